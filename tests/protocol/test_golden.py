"""Golden request frames captured from real clients decode exactly.

The fixtures (tests/protocol/golden/, see its README) are the first frames
kafka-python, confluent-kafka (librdkafka) and kcat sent to a listener; here
they are decoded with our request header and ApiVersions declarations, every
field is checked against the value the client is known to send, and
re-encoding gives the same bytes.
"""

from __future__ import annotations

from io import BytesIO
from pathlib import Path

import pytest

from protocol import header
from protocol.registry import API_MESSAGES

GOLDEN = Path(__file__).parent / "golden"

# fixture -> (api key, api version, correlation id, client id, software name, software version)
EXPECTED = {
    "kafka-python": (18, 4, 1, "kraftwerk-golden", "kafka-python", "3.0.12"),
    "confluent-kafka": (18, 3, 1, "kraftwerk-golden", "confluent-kafka-python", "2.16.1-rdkafka-2.16.0"),
    "kcat": (18, 3, 1, "rdkafka", "librdkafka", "2.0.2"),
}


def load(name: str) -> bytes:
    return bytes.fromhex((GOLDEN / f"{name}.hex").read_text().strip())


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_golden_frame_decodes_to_known_values(name):
    frame = load(name)
    api_key, api_version, correlation_id, client_id, software_name, software_version = EXPECTED[name]
    assert header.peek_api(frame) == (api_key, api_version)
    request, _ = API_MESSAGES[api_key]
    header_version = header.request_header_version(request, api_version)
    assert header_version == 2
    stream = BytesIO(frame)
    hdr = header.decode_request_header(stream, header_version)
    assert hdr["request_api_key"] == api_key
    assert hdr["request_api_version"] == api_version
    assert hdr["correlation_id"] == correlation_id
    assert hdr["client_id"] == client_id
    assert "_unknown_tagged_fields" not in hdr
    header_end = stream.tell()
    body = request.decode(api_version, stream)
    assert stream.read() == b"", "trailing bytes after the body"
    assert body["client_software_name"] == software_name
    assert body["client_software_version"] == software_version
    assert "_unknown_tagged_fields" not in body
    # Byte-exact re-encoding of both parts.
    assert header.REQUEST_HEADER.encode(header_version, hdr) == frame[:header_end]
    assert request.encode(api_version, body) == frame[header_end:]


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_golden_metadata_matches_fixture(name):
    # Each fixture documents the client that produced it.
    meta = (GOLDEN / f"{name}.meta").read_text()
    assert name.split("-")[0] in meta
