"""The request frames a peer connection writes are the declarations' bytes.

`RequestEncoder` encodes each header once and writes a follower's Fetch bodies from
the last one with the new offset; both must give exactly what `encode_request` gives.
"""

from __future__ import annotations

import uuid

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from protocol.frames import encode_request
from protocol.registry import API_MESSAGES
from server.net.peer import RequestEncoder
from server.raft import messages as m

FETCH = 1
FETCH_VERSIONS = range(0, 18)
INT32 = st.integers(-(1 << 31), (1 << 31) - 1)
INT64 = st.integers(-(1 << 63), (1 << 63) - 1)


@pytest.mark.parametrize("client_id", ["kraftwerk-controller-2", None, ""])
def test_headers_match_the_declaration_for_every_api_and_version(client_id):
    encoder = RequestEncoder(client_id)
    checked = 0
    for api_key, (request, _) in sorted(API_MESSAGES.items()):
        for version in range(0, 20):
            try:
                expected = encode_request(api_key, version, 7, client_id, request.default(version))
            except Exception:
                continue  # not a version of this API
            for correlation_id in (7, 0, -1, (1 << 31) - 1, -(1 << 31)):
                assert encoder.encode(api_key, version, correlation_id, request.default(version)) == \
                    encode_request(api_key, version, correlation_id, client_id, request.default(version))
            assert expected
            checked += 1
    assert checked > 100


fetch_args = st.fixed_dictionaries({
    "cluster_id": st.text(max_size=30),
    "replica_id": INT32,
    "leader_epoch": INT32,
    "last_fetched_epoch": INT32,
    "max_wait_ms": INT32,
    "max_bytes": INT32,
    "token": st.one_of(st.none(), st.integers(0, (1 << 64) - 1)),
    "directory_id": st.one_of(st.none(), st.uuids()),
})


@settings(max_examples=150, deadline=None)
@given(version=st.sampled_from(FETCH_VERSIONS), shapes=st.lists(fetch_args, min_size=1, max_size=3),
       offsets=st.lists(INT64, min_size=1, max_size=6))
def test_fetch_bodies_from_the_template_match_the_declaration(version, shapes, offsets):
    encoder = RequestEncoder("kraftwerk-controller-3")
    for args in shapes:
        for correlation_id, offset in enumerate(offsets):
            body = m.fetch_request(args["cluster_id"], args["replica_id"], args["leader_epoch"], offset,
                                   args["last_fetched_epoch"], args["max_wait_ms"], args["max_bytes"],
                                   args["token"], args["directory_id"])
            assert encoder.encode(FETCH, version, correlation_id, body) == \
                encode_request(FETCH, version, correlation_id, "kraftwerk-controller-3", body)
    # The core's shape takes the template path (else this test would prove nothing).
    assert encoder._fetch is not None


def test_a_fetch_of_another_shape_is_encoded_the_general_way():
    encoder = RequestEncoder("c")
    body = m.fetch_request("cluster", 2, 5, 100, 4, 500, 1 << 20, None, uuid.uuid4())
    several = {**body, "topics": body["topics"] * 2}
    other_flag = {**body, "min_bytes": True}
    extra = {**body, "rack_id": "r1"}
    for variant in (several, other_flag, extra):
        for version in (4, 12, 13, 17):
            assert encoder.encode(FETCH, version, 9, variant) == encode_request(FETCH, version, 9, "c", variant)
    assert encoder._fetch is None
    # A template is not reused for a body that differs in anything but the offset.
    encoder.encode(FETCH, 17, 1, body)
    moved = m.fetch_request("cluster", 2, 6, 100, 4, 500, 1 << 20, None, body["topics"][0]["partitions"][0]
                            ["replica_directory_id"])
    assert encoder.encode(FETCH, 17, 2, moved) == encode_request(FETCH, 17, 2, "c", moved)
    assert encoder.encode(FETCH, 16, 3, moved) == encode_request(FETCH, 16, 3, "c", moved)
