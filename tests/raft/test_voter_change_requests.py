"""AddRaftVoter/RemoveRaftVoter as the driver answers them before the core decides
(Kafka's checks 1-4: cluster id, leadership, a valid voter, the default listener's
endpoint), over real Raft drivers; a refusal changes nothing."""

from __future__ import annotations

import uuid

import trio

from protocol.errors import ErrorCode
from server.voters import Endpoint

from raft_harness import CLUSTER_ID, raft_cluster

BOUND_S = 30
DIRECTORY = uuid.UUID(int=7)
ENDPOINTS = (Endpoint("CONTROLLER", "127.0.0.1", 1),)


async def test_refusals_before_the_core_in_kafkas_order_and_words(tmp_path):
    async with raft_cluster(tmp_path, size=3) as cluster:
        with trio.fail_after(BOUND_S):
            leader = await cluster.wait_for_leader()
            follower = next(node for node in cluster.nodes.values() if node is not leader)
            voters = leader.driver.describe().voter_set
            assert await leader.driver.add_voter(4, DIRECTORY, ENDPOINTS, cluster_id="another") == (
                ErrorCode.INCONSISTENT_CLUSTER_ID, f'The given id "another" doesn\'t match the cluster id "{CLUSTER_ID}"')
            # Not the leader: Kafka's pre-check sets the code alone.
            assert await follower.driver.add_voter(4, DIRECTORY, ENDPOINTS) == (ErrorCode.NOT_LEADER_OR_FOLLOWER, "")
            assert await follower.driver.remove_voter(1, DIRECTORY) == (ErrorCode.NOT_LEADER_OR_FOLLOWER, "")
            for voter_id, directory_id in ((-1, DIRECTORY), (4, None)):
                assert await leader.driver.add_voter(voter_id, directory_id, ENDPOINTS) == (
                    ErrorCode.INVALID_REQUEST, "Add voter request didn't include a valid voter")
                assert await leader.driver.remove_voter(voter_id, directory_id) == (
                    ErrorCode.INVALID_REQUEST, "Remove voter request didn't include a valid voter")
            # No endpoint at all (a hostile or broken request): refused, never an error of ours.
            error, message = await leader.driver.add_voter(4, DIRECTORY, ())
            assert error == ErrorCode.INVALID_REQUEST and message.startswith("Add voter request didn't include the endpoint")
            # A static quorum (kraft.version 0): Kafka's refusal, once the leader's high watermark
            # is known (before, check 6 answers REQUEST_TIMED_OUT).
            await cluster.wait_until(lambda: leader.driver.leader_ready)
            assert await leader.driver.add_voter(4, DIRECTORY, ENDPOINTS) == (
                ErrorCode.UNSUPPORTED_VERSION, "Cluster doesn't support adding voter because the kraft.version feature is 0")
            assert leader.driver.describe().voter_set == voters
