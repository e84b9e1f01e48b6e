"""KIP-853 voter changes, scripted through the simulator with the real core.

Each case starts a quiet dynamic quorum (every node's log opens with kraft.version 1
and the first voters, as `storage format --initial-controllers` leaves it), asks the
leader for a change the way AddRaftVoter/RemoveRaftVoter do, and checks what every
node then believes, Kafka's refusals word for word, and that a refusal changes nothing.
"""

from __future__ import annotations

from protocol.errors import ErrorCode
from server.raft.core import Role
from server.voters import Endpoint

from .cluster import SimConfig, Simulation

QUIET = dict(faults=(), drop_rate=0.0, duplicate_rate=0.0, jitter_rate=0.0, dynamic=True)


def dynamic_cluster(voters: int = 3, observers: int = 1, seed: int = 7) -> Simulation:
    sim = Simulation(seed, SimConfig(voters=voters, observers=observers, **QUIET))
    sim.run_until(600)
    return sim


def leader_of(sim: Simulation):
    leader = sim.current_leader()
    assert leader is not None and leader.core.leader_high_watermark is not None, "no leader has committed"
    return leader


def settle(sim: Simulation, ms: int = 400) -> None:
    sim.run_until(sim.now + ms)
    sim.check_invariants()


def voters_everywhere(sim: Simulation) -> set[frozenset[int]]:
    return {node.core.voters.ids for node in sim.up()}


def test_an_observer_that_caught_up_is_added_and_every_node_counts_it():
    sim = dynamic_cluster()
    leader = leader_of(sim)
    offset = leader.core.add_voter(sim.voter_of(4), sim.now)
    assert isinstance(offset, int)
    sim.drain(leader)
    settle(sim)
    assert voters_everywhere(sim) == {frozenset({1, 2, 3, 4})}
    assert leader.core.high_watermark > offset
    # The new voter fetches as a voter (with the leader's token) and counts toward commits.
    node4 = sim.nodes[4]
    assert node4.core.is_voter and node4.core.role is Role.FOLLOWER
    assert leader.core.describe().voters[4].end_offset >= offset + 1


def test_a_second_change_waits_for_the_first_to_commit():
    sim = dynamic_cluster(observers=2)
    leader = leader_of(sim)
    first = leader.core.add_voter(sim.voter_of(4), sim.now)
    assert isinstance(first, int)
    # Same step, before anything went out: the first change is not committed yet.
    refusal = leader.core.add_voter(sim.voter_of(5), sim.now)
    assert refusal == (ErrorCode.REQUEST_TIMED_OUT,
                       f"Request timed out waiting for voters to commit the latest voter change at "
                       f"Optional[{first}] with HWM {leader.core.leader_high_watermark}")
    sim.drain(leader)
    settle(sim)
    assert voters_everywhere(sim) == {frozenset({1, 2, 3, 4})}


def test_an_observer_that_never_caught_up_is_not_added():
    sim = Simulation(7, SimConfig(voters=3, observers=1, **QUIET))
    # Down from the start: the leader has never seen it fetch at its log end. (One that
    # caught up once counts as caught up for an hour, as in Kafka; the driver's ApiVersions
    # probe then finds it down.)
    sim.stop_node(sim.nodes[4], graceful=False)
    sim.run_until(600)
    leader = leader_of(sim)
    refusal = leader.core.add_voter(sim.voter_of(4), sim.now)
    assert refusal == (ErrorCode.REQUEST_TIMED_OUT,
                       f"Aborted add voter operation for {sim.voter_of(4).describe()} since it is lagging behind")
    assert voters_everywhere(sim) == {frozenset({1, 2, 3})}


def test_an_observer_with_another_directory_is_not_the_one_asked_for():
    sim = dynamic_cluster()
    leader = leader_of(sim)
    stranger = sim.voter_of(4)
    impostor = type(stranger)(4, None, stranger.endpoints, 0, 1)
    refusal = leader.core.add_voter(impostor, sim.now)
    assert refusal[0] == ErrorCode.REQUEST_TIMED_OUT and "lagging behind" in refusal[1]


def test_a_duplicate_id_is_refused_even_with_another_directory_id():
    sim = dynamic_cluster()
    leader = leader_of(sim)
    voters = leader.core.voters
    twin = sim.voter_of(4)
    twin = type(twin)(2, twin.directory_id, twin.endpoints, 0, 1)
    refusal = leader.core.add_voter(twin, sim.now)
    assert refusal == (ErrorCode.DUPLICATE_VOTER,
                       f"The voter id for {twin.describe()} is already part of the set of voters "
                       f"{voters.keys_text()}.")
    assert leader.core.voters == voters


def test_removing_a_voter_with_another_directory_id_or_the_last_voter_is_voter_not_found():
    sim = dynamic_cluster(voters=1, observers=0)
    leader = leader_of(sim)
    voters = leader.core.voters
    me = voters.get(leader.node_id)
    last = leader.core.remove_voter(leader.node_id, me.directory_id, sim.now)
    assert last == (ErrorCode.VOTER_NOT_FOUND,
                    f"Cannot remove voter {me.describe()} from the set of voters {voters.keys_text()}")
    wrong = leader.core.remove_voter(leader.node_id, sim.directory_ids[leader.node_id].__class__(int=5), sim.now)
    assert wrong[0] == ErrorCode.VOTER_NOT_FOUND
    assert leader.core.voters == voters and leader.core.role is Role.LEADER


def test_a_leader_that_removes_itself_leads_until_the_change_commits_then_resigns():
    sim = dynamic_cluster()
    leader = leader_of(sim)
    offset = leader.core.remove_voter(leader.node_id, sim.directory_ids[leader.node_id], sim.now)
    assert isinstance(offset, int)
    sim.drain(leader)
    # Still the leader of a set that no longer names it: it counts only the others' copies.
    assert leader.core.role is Role.LEADER and not leader.core.is_voter
    settle(sim, 1000)
    assert leader.core.role is not Role.LEADER and not leader.core.is_voter
    new_leader = leader_of(sim)
    assert new_leader.node_id != leader.node_id
    assert voters_everywhere(sim) == {frozenset({1, 2, 3}) - {leader.node_id}}
    # The old leader follows as an observer and still gets every commit.
    first, _ = sim.propose(new_leader)
    settle(sim)
    assert leader.core.high_watermark > first


def test_removing_a_voter_shrinks_the_majority_and_the_removed_node_observes():
    sim = dynamic_cluster(voters=3, observers=0)
    leader = leader_of(sim)
    victim = next(node_id for node_id in (1, 2, 3) if node_id != leader.node_id)
    offset = leader.core.remove_voter(victim, sim.directory_ids[victim], sim.now)
    assert isinstance(offset, int)
    sim.drain(leader)
    settle(sim)
    assert voters_everywhere(sim) == {frozenset({1, 2, 3}) - {victim}}
    # With the removed node down, the two voters still commit.
    sim.stop_node(sim.nodes[victim], graceful=False)
    first, _ = sim.propose(leader)
    settle(sim)
    assert leader.core.high_watermark > first


def test_kraft_version_0_refuses_voter_changes_as_kafka_does():
    sim = Simulation(7, SimConfig(voters=3, observers=1, faults=(), drop_rate=0.0, duplicate_rate=0.0,
                                  jitter_rate=0.0))
    sim.run_until(600)
    leader = leader_of(sim)
    assert leader.core.add_voter(sim.voter_of(4), sim.now) == (
        ErrorCode.UNSUPPORTED_VERSION, "Cluster doesn't support adding voter because the kraft.version feature is 0")
    assert leader.core.remove_voter(1, None, sim.now) == (
        ErrorCode.UNSUPPORTED_VERSION,
        "Cluster doesn't support removing voter because the kraft.version feature is 0")


def test_a_change_the_leader_could_not_commit_is_undone_by_the_next_leader():
    sim = dynamic_cluster(observers=1)
    leader = leader_of(sim)
    # The leader is cut off before anyone fetched the change: it stays uncommitted.
    sim.isolate(leader.node_id, 1500)
    offset = leader.core.add_voter(sim.voter_of(4), sim.now)
    assert isinstance(offset, int)
    sim.drain(leader)
    assert 4 in leader.core.voters.ids
    sim.run_until(sim.now + 1400)
    new_leader = leader_of(sim)
    assert new_leader.node_id != leader.node_id and 4 not in new_leader.core.voters.ids
    settle(sim, 1000)
    # Healed: the old leader truncated the change away, and the set before it is back.
    assert voters_everywhere(sim) == {frozenset({1, 2, 3})}
    sim.check_final()


def test_a_voter_updates_its_own_endpoints_and_only_its_own():
    sim = dynamic_cluster()
    leader = leader_of(sim)
    follower = next(node for node in sim.up() if node.node_id in (1, 2, 3) and node is not leader)
    old = leader.core.voters.get(follower.node_id)
    moved = type(old)(old.node_id, old.directory_id, (Endpoint("CONTROLLER", "127.0.0.1", 29999),), 0, 1)
    epoch = leader.core.epoch
    assert leader.core.update_voter(moved, epoch - 1, sim.now) == (ErrorCode.FENCED_LEADER_EPOCH, None)
    assert leader.core.update_voter(moved, epoch + 1, sim.now) == (ErrorCode.UNKNOWN_LEADER_EPOCH, None)
    assert follower.core.update_voter(moved, epoch, sim.now) == (ErrorCode.NOT_LEADER_OR_FOLLOWER, None)
    stranger = type(old)(old.node_id, sim.directory_ids[4], moved.endpoints, 0, 1)
    assert leader.core.update_voter(stranger, epoch, sim.now) == (ErrorCode.VOTER_NOT_FOUND, None)
    unable = type(old)(old.node_id, old.directory_id, moved.endpoints, 0, 0)
    assert leader.core.update_voter(unable, epoch, sim.now) == (ErrorCode.INVALID_REQUEST, None)
    offset = leader.core.update_voter(moved, epoch, sim.now)
    assert isinstance(offset, int)
    sim.drain(leader)
    settle(sim)
    assert {node.core.voters.get(follower.node_id) for node in sim.up()} == {moved}
    assert voters_everywhere(sim) == {frozenset({1, 2, 3})}
    # Asking again for what is already there writes nothing.
    assert leader.core.update_voter(moved, epoch, sim.now) is None


def test_an_observer_that_keeps_up_with_a_busy_leader_counts_as_caught_up():
    # A proposal every millisecond from before the observer starts: each of its Fetches finds
    # entries more than it asked for, so it is never exactly at the leader's end when it asks.
    # Kafka's rule counts it caught up as of its previous fetch when it reached the end the
    # leader had then.
    sim = Simulation(7, SimConfig(voters=3, observers=1, **QUIET))
    sim.stop_node(sim.nodes[4], graceful=False)
    sim.run_until(600)
    leader = leader_of(sim)

    def busy(ms: int) -> None:
        for _ in range(ms):  # bounded: one proposal per simulated millisecond
            sim.propose(leader)
            sim.run_until(sim.now + 1)

    busy(100)
    sim.start_node(sim.nodes[4])
    busy(300)
    observer = leader.core.describe().observers[4]
    assert 0 <= observer.end_offset < leader.core.end_offset  # behind whenever it asks
    offset = leader.core.add_voter(sim.voter_of(4), sim.now)
    assert isinstance(offset, int), offset
