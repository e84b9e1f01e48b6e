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


@pytest.mark.parametrize("network", ["bridge", "host"])
def test_the_compose_deployment_configs_describe_one_three_voter_quorum(network):
    from server.config import load_config

    deploy = Path(__file__).resolve().parents[2] / "deploy" / network
    configs = [load_config(deploy / f"controller-{n}.properties") for n in (1, 2, 3)]
    assert [c.node_id for c in configs] == [1, 2, 3]
    voters = {c.quorum_voters for c in configs}
    assert len(voters) == 1  # every node agrees on the voter set
    (voter_set,) = voters
    assert [v.node_id for v in voter_set] == [1, 2, 3]
    for config, voter in zip(configs, voter_set):
        # Each node advertises the address its peers use for it.
        assert (config.advertised_listener.host, config.advertised_listener.port) == (voter.host, voter.port)
