"""Scripted cases (etcd-style): small, readable runs of the real core through the simulator."""

from __future__ import annotations

import pytest

from server.raft.core import NotLeader, Role
from server.raft.quorum_state import (
    QuorumState,
    QuorumStateError,
    FileQuorumStateStore,
    read_quorum_state,
    write_quorum_state,
)

from .cluster import SimConfig, Simulation

QUIET = dict(faults=(), drop_rate=0.0, duplicate_rate=0.0, jitter_rate=0.0)


def quiet_cluster(seed: int = 1, **overrides) -> Simulation:
    return Simulation(seed, SimConfig(**{**QUIET, **overrides}))


def leader_of(sim: Simulation):
    leader = sim.current_leader()
    assert leader is not None, "no leader"
    return leader


def test_election_and_first_commit():
    sim = quiet_cluster()
    sim.run_until(1000)
    leaders = [node for node in sim.up() if node.core.role is Role.LEADER]
    assert len(leaders) == 1
    leader = leaders[0]
    assert leader.core.epoch == 1
    # The epoch opens with a LeaderChange control record, committed on every node.
    assert sim.committed[0][2] == 2
    assert all(node.core.high_watermark >= 1 for node in sim.up())
    assert all(node.core.leader_id == leader.node_id for node in sim.up())


def test_proposals_commit_in_order_on_all_nodes():
    sim = quiet_cluster(voters=5, observers=1)
    sim.run_until(500)
    leader = leader_of(sim)
    offsets = [sim.propose(leader)[0] for _ in range(20)]
    sim.run_until(sim.now + 500)
    assert offsets == list(range(offsets[0], offsets[0] + 20))
    for node in sim.up():
        assert node.core.high_watermark >= offsets[-1] + 1
        sim.verify_committed(node)
    assert [sim.committed[offset][1] for offset in offsets] == [f"v{i}".encode() for i in range(1, 21)]


def followers_high_watermark(sim: Simulation, leader) -> list[int]:
    return [node.core.high_watermark for node in sim.up() if node is not leader]


def test_high_watermark_only_news_waits_for_the_next_records_up_to_the_linger():
    sim = quiet_cluster(high_watermark_linger_ms=30)
    sim.run_until(500)
    leader = leader_of(sim)
    sim.run_until(sim.now + 300)  # everything so far committed and known everywhere
    first, _ = sim.propose(leader)
    sim.run_until(sim.now + 15)
    assert leader.core.high_watermark == first + 1
    # The followers acknowledged `first` but its commit is news for them only when the
    # next records go out or the linger ends.
    assert all(hw <= first for hw in followers_high_watermark(sim, leader))
    second, _ = sim.propose(leader)
    sim.run_until(sim.now + 6)  # one delivery (at most 5 ms), not the 30 ms linger
    assert all(hw >= first + 1 for hw in followers_high_watermark(sim, leader))
    # With no further records, the linger bounds how late they learn `second` is committed.
    sim.run_until(sim.now + 30 + 2 * 5 + 10)
    assert all(hw == second + 1 for hw in followers_high_watermark(sim, leader))


def test_without_linger_followers_learn_the_high_watermark_at_once():
    sim = quiet_cluster(high_watermark_linger_ms=0)
    sim.run_until(800)
    leader = leader_of(sim)
    offset, _ = sim.propose(leader)
    # Records out, acknowledgement back, high watermark out: three deliveries of at most 5 ms.
    sim.run_until(sim.now + 3 * 5 + 1)
    assert all(hw == offset + 1 for hw in followers_high_watermark(sim, leader))


def test_divergent_tail_of_an_isolated_leader_is_truncated():
    sim = quiet_cluster(seed=3)
    sim.run_until(500)
    old = leader_of(sim)
    old_epoch = old.core.epoch
    sim.isolate(old.node_id, 2000)
    # Writes to the isolated leader cannot commit ...
    stranded = [sim.propose(old) for _ in range(3)]
    sim.run_until(sim.now + 1000)
    new = leader_of(sim)
    assert new is not old and new.core.epoch > old_epoch
    for _ in range(3):
        sim.propose(new)
    sim.run_until(sim.now + 200)
    sim.blocked.clear()
    sim.run_until(sim.now + 1000)
    # ... and after the partition heals, the old leader drops them and follows.
    assert old.core.role is Role.FOLLOWER and old.core.leader_id == new.node_id
    assert sim.stats.get("truncate", 0) >= 1
    values = {entry[1] for entry in sim.committed.values()}
    assert not any(f"v{index}".encode() in values for index in range(1, 4)), stranded
    sim.verify_committed(old)
    assert old.core.high_watermark == new.core.high_watermark


def test_pre_vote_keeps_a_rejoining_node_from_disrupting_the_leader():
    sim = quiet_cluster(seed=5, pre_vote=True)
    sim.run_until(500)
    leader = leader_of(sim)
    epoch = leader.core.epoch
    follower = next(node for node in sim.up() if node is not leader)
    sim.isolate(follower.node_id, 1500)
    sim.run_until(sim.now + 1500)
    # The isolated node kept trying pre-votes but never bumped the epoch.
    assert follower.core.epoch == epoch
    sim.run_until(sim.now + 500)
    assert leader.core.role is Role.LEADER and leader.core.epoch == epoch
    assert follower.core.role is Role.FOLLOWER and follower.core.leader_id == leader.node_id


def test_without_pre_vote_a_rejoining_node_forces_a_new_epoch():
    sim = quiet_cluster(seed=5, pre_vote=False)
    sim.run_until(500)
    leader = leader_of(sim)
    epoch = leader.core.epoch
    follower = next(node for node in sim.up() if node is not leader)
    sim.isolate(follower.node_id, 1500)
    sim.run_until(sim.now + 2000)
    assert max(node.core.epoch for node in sim.up()) > epoch


def test_leader_resigns_when_it_loses_the_quorum():
    sim = quiet_cluster(seed=2)
    sim.run_until(500)
    leader = leader_of(sim)
    isolated_at = sim.now
    sim.isolate(leader.node_id, 5000)
    while leader.core.role is Role.LEADER:
        sim.step()
        assert sim.now - isolated_at < 1000, "isolated leader never resigned"
    # Check quorum fires after 1.5 x fetch timeout without majority fetches.
    assert sim.now - isolated_at >= sim.config.fetch_timeout_ms
    assert leader.core.role is Role.RESIGNED
    assert isinstance(leader.core.propose([b"x"], sim.now), NotLeader)


def test_follower_far_behind_catches_up_from_a_snapshot():
    sim = quiet_cluster(seed=4)
    sim.run_until(500)
    leader = leader_of(sim)
    laggard = next(node for node in sim.up() if node is not leader)
    sim.stop_node(laggard, graceful=False)
    for _ in range(40):
        sim.propose(leader)
        sim.run_until(sim.now + 5)
    sim.run_until(sim.now + 200)
    sim.take_snapshot(leader)
    assert leader.log.start_offset > laggard.log.end_offset
    sim.start_node(laggard)
    sim.run_until(sim.now + 1000)
    assert sim.stats.get("install_snapshot") == 1
    assert laggard.log.snapshot_id == leader.log.snapshot_id
    assert laggard.core.high_watermark == leader.core.high_watermark
    sim.verify_committed(laggard)


def test_kill_9_of_the_leader_loses_nothing_committed():
    sim = quiet_cluster(seed=6)
    sim.run_until(500)
    leader = leader_of(sim)
    for _ in range(10):
        sim.propose(leader)
    sim.run_until(sim.now + 100)
    committed = dict(sim.committed)
    sim.stop_node(leader, graceful=False)
    sim.run_until(sim.now + 1000)
    new = leader_of(sim)
    assert new is not leader
    sim.start_node(leader)
    sim.run_until(sim.now + 1000)
    assert leader.core.role is Role.FOLLOWER
    for offset, entry in committed.items():
        assert sim.committed[offset] == entry


def _elected_after_kill(sim: Simulation) -> int:
    """kill -9 of the leader, then the simulated ms until another node leads."""
    sim.run_until(3000)
    old = leader_of(sim)
    sim.stop_node(old, graceful=False)
    killed_at = sim.now
    for _ in range(5000):  # 1 ms steps, at most 5 s of simulated time
        sim.run_until(sim.now + 1)
        leader = sim.current_leader()
        if leader is not None and leader is not old:
            return sim.now - killed_at
    raise AssertionError("no new leader within 5 s")


@pytest.mark.parametrize("seed", range(5))
def test_a_leader_whose_connections_are_refused_is_replaced_before_the_fetch_timeout(seed):
    """A killed process's host refuses connections: the followers' fetches fail at once,
    and they elect a successor without waiting out the fetch timeout (here 2 s, as
    Kafka's default), in the order of their ids and without splitting the vote."""
    sim = quiet_cluster(seed, fetch_timeout_ms=2000, election_timeout_ms=1000, request_timeout_ms=2000,
                        refuse_when_down=True)
    elected_ms = _elected_after_kill(sim)
    assert elected_ms < 200, elected_ms
    assert sim.stats.get("refused.VOTE", 0) == 0


@pytest.mark.parametrize("seed", range(5))
def test_a_silent_leader_is_replaced_only_after_the_fetch_timeout(seed):
    """Without refusals (a machine gone, a partition) nothing tells the followers: a
    follower that still hears its leader must not be rushed into an election."""
    sim = quiet_cluster(seed, fetch_timeout_ms=2000, election_timeout_ms=1000, request_timeout_ms=2000)
    elected_ms = _elected_after_kill(sim)
    # The last fetch answered at most fetch_max_wait_ms before the kill.
    assert elected_ms >= 2000 - SimConfig.fetch_max_wait_ms - SimConfig.max_delay_ms, elected_ms


# -- the quorum-state file --------------------------------------------------------

def test_quorum_state_file_round_trip(tmp_path):
    assert read_quorum_state(tmp_path) == QuorumState()
    write_quorum_state(tmp_path, QuorumState(epoch=4, leader_id=2, voted_id=3), "cluster", frozenset({1, 2, 3}))
    assert read_quorum_state(tmp_path) == QuorumState(epoch=4, leader_id=2, voted_id=3)
    text = (tmp_path / "quorum-state").read_text()
    assert '"leaderEpoch":4' in text and '"votedId":3' in text and '"data_version":0' in text
    assert not (tmp_path / "quorum-state.tmp").exists()


def test_quorum_state_store_refuses_to_go_back(tmp_path):
    store = FileQuorumStateStore(tmp_path, "cluster", frozenset({1, 2, 3}))
    store.write(QuorumState(epoch=3, voted_id=1))
    with pytest.raises(QuorumStateError):
        store.write(QuorumState(epoch=2))
    with pytest.raises(QuorumStateError):
        store.write(QuorumState(epoch=3, voted_id=2))
    assert FileQuorumStateStore(tmp_path, "cluster", frozenset({1, 2, 3})).read() == QuorumState(epoch=3, voted_id=1)


def test_corrupt_quorum_state_is_an_error(tmp_path):
    (tmp_path / "quorum-state").write_text("{not json")
    with pytest.raises(QuorumStateError):
        read_quorum_state(tmp_path)


def test_raft_core_imports_no_io():
    import ast
    from pathlib import Path

    root = Path(__file__).resolve().parents[2] / "server" / "raft"
    for name in ("core.py", "log.py", "messages.py"):
        tree = ast.parse((root / name).read_text())
        imported = {alias.name.split(".")[0] for node in ast.walk(tree) if isinstance(node, ast.Import)
                    for alias in node.names}
        imported |= {node.module.split(".")[0] for node in ast.walk(tree)
                     if isinstance(node, ast.ImportFrom) and node.module}
        assert not imported & {"trio", "socket", "asyncio", "selectors", "os", "time"}, (name, imported)


def test_an_observer_follows_the_new_leader_long_before_its_fetch_timeout():
    """Observers get no BeginQuorumEpoch: once fetches to the dead leader fail, the
    observer asks the other voters in turn and follows the new leader as soon as one of
    them names it, instead of waiting out its own fetch timeout (here far longer than
    the voters': a broker may set its own)."""
    sim = quiet_cluster(voters=3, observers=1, fetch_timeout_ms=500, election_timeout_ms=300,
                        observer_fetch_timeout_ms=10_000)
    sim.run_until(3000)
    old = leader_of(sim)
    observer = next(node for node in sim.up() if not node.core.is_voter)
    assert observer.core.leader_id == old.node_id
    sim.stop_node(old, graceful=False)
    killed_at, elected_at = sim.now, None
    for _ in range(6000):  # 1 ms steps, at most 6 s of simulated time
        sim.run_until(sim.now + 1)
        leader = sim.current_leader()
        if leader is not None and leader is not old and elected_at is None:
            elected_at = sim.now
        if elected_at is not None and observer.core.leader_id == leader.node_id:
            break
    assert elected_at is not None, "no new leader"
    assert observer.core.leader_id == sim.current_leader().node_id
    # Within a few request timeouts and backoffs of the election, nowhere near 10 s.
    assert sim.now - elected_at < 500, (sim.now - elected_at, elected_at - killed_at)
