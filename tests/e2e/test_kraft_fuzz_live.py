"""A live 3-voter quorum survives a few thousand fuzzed KRaft frames (the CI-sized
bench/bench_kraft_fuzz.py).

Three real controller processes; once they have a leader and a commit, FRAMES fuzzed
request frames (tests/fuzz/kraft_inputs.py: structure-aware Vote, BeginQuorumEpoch,
EndQuorumEpoch, Fetch, FetchSnapshot and DescribeQuorum requests aimed at each node with
the real cluster id and voter ids, mutated bodies and headers, lying sizes) go to all
three on several connections each (tests/fuzz/kraft_live.py). Then: every node is
alive, every node names the same leader, an UpdateFeatures commits and every node
replays it, no node logged a traceback or an error-level line, every node stops
cleanly on SIGTERM (exit status 0), and after starting them all again there is a
leader and a commit again.

`FUZZ_SEED=N` replays one run's frames (per connection; their interleaving is the
scheduler's); `FUZZ_EXAMPLES=N` multiplies the frames (tests/fuzz/budget.py).
"""

from __future__ import annotations

import os

import pytest
import trio

from fuzz.budget import scaled
from fuzz.kraft_inputs import Aim
from fuzz.kraft_live import LiveTarget, blast
from cli import local_cluster as lc
from server.storage.meta_properties import MetaProperties, parse_properties

from .quorum_helpers import SAFE_DOWNGRADE, UPGRADE, LocalQuorum, finalized, poll_until

pytestmark = pytest.mark.e2e

FRAMES = 3000  # CI; times FUZZ_EXAMPLES
CONNECTIONS_PER_NODE = 4
BLAST_TIME_LIMIT_S = 120.0
LEADER_TIMEOUT_S = 30.0
COMMIT_TIMEOUT_S = 30.0
DEFAULT_SEED = 20261125
GROUP_VERSION = "group.version"


def seed() -> int:
    return int(os.environ.get("FUZZ_SEED", DEFAULT_SEED))


def cluster_id_of(quorum: LocalQuorum) -> str:
    spec = next(iter(quorum.specs.values()))
    text = (spec.metadata_dir / "meta.properties").read_text()
    return MetaProperties.from_properties(parse_properties(text)).cluster_id


def problems_in_logs(quorum: LocalQuorum) -> list[str]:
    """Tracebacks and error-level lines in any node's log (all incarnations)."""
    found = []
    for node_id, spec in quorum.specs.items():
        text = spec.log_path.read_text(errors="replace") if spec.log_path.exists() else ""
        for line in text.splitlines():
            if "Traceback" in line or '"level": "error"' in line or '"level": "critical"' in line:
                found.append(f"node {node_id}: {line[:300]}")
    return found


def commit_everywhere(quorum: LocalQuorum, level: int) -> int:
    """group.version=level committed through the leader and replayed by every node; the leader."""
    upgrade_type = UPGRADE if level else SAFE_DOWNGRADE
    leader = quorum.update_on_leader(GROUP_VERSION, level, upgrade_type, COMMIT_TIMEOUT_S)
    for node_id in sorted(quorum.specs):
        poll_until(f"node {node_id} to replay {GROUP_VERSION}={level}",
                   lambda node_id=node_id: True if (finalized(quorum.address(node_id)).level(GROUP_VERSION) or 0)
                   == level else None, COMMIT_TIMEOUT_S)
    return leader


def test_a_quorum_survives_fuzzed_kraft_frames_and_restarts_cleanly(tmp_path):
    run_seed = seed()
    context = f"(FUZZ_SEED={run_seed})"
    quorum = LocalQuorum(tmp_path / "quorum", count=3, metadata_version="3.8-IV0")
    try:
        quorum.start_all()
        view = quorum.wait_for_leader(LEADER_TIMEOUT_S)
        commit_everywhere(quorum, 1)
        cluster_id = cluster_id_of(quorum)
        targets = [LiveTarget(node_id, quorum.specs[node_id].port,
                              Aim(cluster_id, tuple(sorted(quorum.specs)), node_id, epochs=(view.leader_epoch,),
                                  end_offsets=(view.high_watermark,)))
                   for node_id in sorted(quorum.specs)]
        frames = scaled(FRAMES)
        stats = trio.run(blast, targets, frames, CONNECTIONS_PER_NODE, run_seed, BLAST_TIME_LIMIT_S)
        assert stats.frames_sent == frames, f"{context} only {stats.summary()}"
        assert stats.connect_failures == 0, f"{context} a node stopped accepting connections: {stats.summary()}"

        quorum.assert_alive()
        quorum.wait_for_leader(LEADER_TIMEOUT_S)
        commit_everywhere(quorum, 0)

        stopped = {}
        for node_id in sorted(quorum.processes):
            process = quorum.processes.pop(node_id)
            lc.stop_controller(process)
            stopped[node_id] = process.process.returncode
        assert stopped == {node_id: 0 for node_id in quorum.specs}, f"{context} exit statuses {stopped}"

        quorum.start_all()
        quorum.wait_for_leader(LEADER_TIMEOUT_S)
        commit_everywhere(quorum, 1)
        problems = problems_in_logs(quorum)
        assert not problems, f"{context}\n" + "\n".join(problems[:20])
    finally:
        quorum.stop_all()
