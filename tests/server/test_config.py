"""Kafka-style properties into ServerConfig."""

from __future__ import annotations

from pathlib import Path

import pytest

from server.config import Listener, VoterAddress, config_from_properties, load_properties


def test_properties_syntax_and_known_keys():
    props = load_properties(
        "# comment\n! also a comment\nnode.id = 3\nlisteners=CONTROLLER://127.0.0.1:19093,OTHER://x:1\n"
        "metadata.log.dir: /data/meta\nlog.dirs=/ignored\nsocket.request.max.bytes=1048576\n"
        "controller.quorum.voters=1@127.0.0.1:19091, 2@127.0.0.1:19092,3@localhost:19093\n"
        "controller.quorum.election.timeout.ms=500\nsome.unknown.key=kept\n"
    )
    config = config_from_properties(props)
    assert config.node_id == 3
    assert config.listener == Listener("CONTROLLER", "127.0.0.1", 19093)
    assert config.metadata_log_dir == Path("/data/meta")  # metadata.log.dir wins over log.dirs
    assert config.socket_request_max_bytes == 1048576
    assert config.quorum_voters == (VoterAddress(1, "127.0.0.1", 19091), VoterAddress(2, "127.0.0.1", 19092),
                                    VoterAddress(3, "localhost", 19093))
    assert config.quorum_election_timeout_ms == 500
    assert config.quorum_fetch_timeout_ms == 2000  # Kafka's default
    assert config.extra == {"some.unknown.key": "kept"}


@pytest.mark.parametrize("voters", ["1@127.0.0.1", "x@h:1", "1:h:2", "1@h:1,1@h:2"])
def test_bad_voter_lists_are_refused(voters):
    with pytest.raises(ValueError):
        config_from_properties({"controller.quorum.voters": voters})
