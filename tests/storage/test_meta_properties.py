"""meta.properties and Kafka's uuid strings."""

from __future__ import annotations

import base64
import os
import uuid

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from server.storage.meta_properties import (
    META_PROPERTIES_FILE_NAME,
    MetaProperties,
    MetaPropertiesError,
    format_properties,
    is_reserved_uuid,
    parse_properties,
    parse_uuid_string,
    random_uuid_string,
    read_meta_properties,
    uuid_to_string,
    write_meta_properties,
)


def test_uuid_string_form_is_unpadded_base64url_of_the_16_bytes():
    value = uuid.UUID("00112233-4455-6677-8899-aabbccddeeff")
    text = uuid_to_string(value)
    assert text == "ABEiM0RVZneImaq7zN3u_w"
    assert len(text) == 22
    assert parse_uuid_string(text) == value
    assert parse_uuid_string(text + "==") == value
    # Kafka's metadata topic id, Uuid(0, 1).
    assert uuid_to_string(uuid.UUID(int=1)) == "AAAAAAAAAAAAAAAAAAAAAQ"


@pytest.mark.parametrize(
    "text",
    ["", "short", "ABEiM0RVZneImaq7zN3u_w=", "ABEiM0RVZneImaq7zN3u+w", "ABEiM0RVZneImaq7zN3u_x",
     "ABEiM0RVZneImaq7zN3u_w_", "ABEiM0RVZneImaq7zN3u!w"],
)
def test_bad_uuid_strings_are_rejected(text):
    with pytest.raises(ValueError):
        parse_uuid_string(text)


@settings(max_examples=200)
@given(st.binary(min_size=16, max_size=16))
def test_uuid_string_round_trip(raw):
    value = uuid.UUID(bytes=raw)
    text = uuid_to_string(value)
    assert text == base64.urlsafe_b64encode(raw).decode().rstrip("=")
    assert parse_uuid_string(text) == value


def test_random_uuid_strings_avoid_dash_and_reserved_values():
    seen = set()
    for _ in range(2000):
        text = random_uuid_string()
        assert len(text) == 22 and not text.startswith("-")
        assert not is_reserved_uuid(parse_uuid_string(text))
        seen.add(text)
    assert len(seen) == 2000
    assert is_reserved_uuid(uuid.UUID(int=0)) and is_reserved_uuid(uuid.UUID(int=99))
    assert not is_reserved_uuid(uuid.UUID(int=100)) and not is_reserved_uuid(uuid.UUID(int=1 << 64))


def test_write_then_read(tmp_path):
    meta = MetaProperties(cluster_id="MkU3OEVBNTcwNTJENDM2Qk", node_id=3, directory_id=random_uuid_string())
    write_meta_properties(tmp_path, meta)
    assert read_meta_properties(tmp_path) == meta
    text = (tmp_path / META_PROPERTIES_FILE_NAME).read_text()
    assert "version=1\n" in text
    assert "cluster.id=MkU3OEVBNTcwNTJENDM2Qk\n" in text
    assert "node.id=3\n" in text
    assert f"directory.id={meta.directory_id}\n" in text
    assert os.listdir(tmp_path) == [META_PROPERTIES_FILE_NAME]  # no temp file left behind


def test_missing_file_reads_as_none(tmp_path):
    assert read_meta_properties(tmp_path) is None


def test_reads_a_file_as_kafka_writes_it(tmp_path):
    # Properties.store output: a comment with the date, keys in hash order.
    (tmp_path / META_PROPERTIES_FILE_NAME).write_text(
        "#\n#Tue Oct 22 10:00:00 UTC 2024\nnode.id=1\ndirectory.id=ZQ5BFqUSRUSCFT4Xwoby2w\n"
        "version=1\ncluster.id=4L6g3nShT-eMCtK--X86sw\n"
    )
    meta = read_meta_properties(tmp_path)
    assert meta == MetaProperties(cluster_id="4L6g3nShT-eMCtK--X86sw", node_id=1, directory_id="ZQ5BFqUSRUSCFT4Xwoby2w")


def test_unknown_keys_survive_a_rewrite(tmp_path):
    (tmp_path / META_PROPERTIES_FILE_NAME).write_text("version=1\ncluster.id=abc\nnode.id=2\nfuture.key=x y\n")
    meta = read_meta_properties(tmp_path)
    assert meta.extra == {"future.key": "x y"}
    write_meta_properties(tmp_path, meta)
    assert read_meta_properties(tmp_path) == meta


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("cluster.id=a\nnode.id=1\n", "no version"),
        ("version=0\nbroker.id=1\ncluster.id=a\n", "not supported"),
        ("version=1\nnode.id=1\n", "no cluster.id"),
        ("version=1\ncluster.id=a\n", "no node.id"),
        ("version=1\ncluster.id=a\nnode.id=one\n", "not an integer"),
        ("version=1\ncluster.id=a\nnode.id=-4\n", "negative"),
        ("version=1\ncluster.id=a\nnode.id=1\ndirectory.id=nope\n", "directory.id"),
    ],
)
def test_invalid_files_are_rejected(tmp_path, text, message):
    (tmp_path / META_PROPERTIES_FILE_NAME).write_text(text)
    with pytest.raises(MetaPropertiesError, match=message):
        read_meta_properties(tmp_path)


def test_java_properties_syntax():
    text = (
        "# comment\n"
        "! also a comment\n"
        "   \n"
        "a=1\n"
        "b : 2\n"
        "c 3\n"
        "d==4\n"
        "  e\t=\t5  \n"
        "long = first \\\n"
        "       second\n"
        "esc\\=key=va\\:l\\u00e9\\n\n"
        "empty=\n"
        "bare\n"
    )
    assert parse_properties(text) == {
        "a": "1", "b": "2", "c": "3", "d": "=4", "e": "5  ", "long": "first second",
        "esc=key": "va:lé\n", "empty": "", "bare": "",
    }


@settings(max_examples=200)
@given(st.dictionaries(st.text(min_size=1, max_size=10), st.text(max_size=20), max_size=5))
def test_properties_format_round_trip(properties):
    assert parse_properties(format_properties(properties)) == properties


def test_write_replaces_atomically(tmp_path, monkeypatch):
    first = MetaProperties(cluster_id="c1", node_id=1)
    write_meta_properties(tmp_path, first)

    def failing_replace(src, dst):
        raise OSError("simulated crash before rename")

    monkeypatch.setattr(os, "replace", failing_replace)
    with pytest.raises(OSError):
        write_meta_properties(tmp_path, MetaProperties(cluster_id="c2", node_id=2))
    # The old file is untouched: a crash before the rename leaves the old contents.
    assert read_meta_properties(tmp_path) == first
