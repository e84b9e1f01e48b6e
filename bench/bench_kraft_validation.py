"""What the boundary check of KRaft requests costs, next to what decoding them costs.

Usage: .venv/bin/python bench/bench_kraft_validation.py

For each KRaft request kraftwerk nodes send each other (at the wire versions of
server/raft/messages.py): µs per `validate.check_request` on the decoded body and µs
per decode of the same frame body (timeit, best of five repeats), and their ratio.
A commit through a 3-voter quorum costs the leader one Fetch per follower, so the
check's share of the leader's CPU per commit is 2 x the Fetch row over that CPU
(reported by `bench_quorum_ab.py`, which measures the whole path with and without
the check in one run).
"""

from __future__ import annotations

import sys
import timeit
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from protocol.registry import API_MESSAGES  # noqa: E402
from server.raft import messages as m  # noqa: E402
from server.raft.messages import WIRE_VERSIONS, ApiKey  # noqa: E402
from server.raft.validate import PeerRules, check_request  # noqa: E402

CLUSTER = "bench-cluster-AAAAAAAAAAA"
RULES = PeerRules(CLUSTER, 1, frozenset({1, 2, 3}))
REQUESTS = {
    "Fetch": (ApiKey.FETCH, m.fetch_request(CLUSTER, 2, 7, 123_456, 7, 500, 8 << 20)),
    "Vote": (ApiKey.VOTE, m.vote_request(CLUSTER, 1, 8, 2, 7, 123_456, False)),
    "BeginQuorumEpoch": (ApiKey.BEGIN_QUORUM_EPOCH, m.begin_quorum_epoch_request(CLUSTER, 1, 2, 8)),
    "EndQuorumEpoch": (ApiKey.END_QUORUM_EPOCH, m.end_quorum_epoch_request(CLUSTER, 2, 8, [1, 3])),
    "FetchSnapshot": (ApiKey.FETCH_SNAPSHOT, m.fetch_snapshot_request(CLUSTER, 2, 8, (100_000, 6), 0, 1 << 20)),
}


def best_us(function, number: int) -> float:
    return min(timeit.repeat(function, number=number, repeat=5)) / number * 1e6


def main() -> None:
    print("| request | check µs | decode µs | check / decode |")
    print("|---|---:|---:|---:|")
    for name, (api_key, body) in REQUESTS.items():
        message = API_MESSAGES[api_key][0]
        version = WIRE_VERSIONS[api_key]
        wire = message.encode(version, body)
        decoded = message.decode(version, wire)
        if check_request(api_key, decoded, RULES) is not None:
            raise SystemExit(f"{name}: the benchmark's request is refused")
        check = best_us(lambda: check_request(api_key, decoded, RULES), 50_000)
        decode = best_us(lambda: message.decode(version, wire), 10_000)
        print(f"| {name} | {check:.2f} | {decode:.2f} | {check / decode:.2f} |")


if __name__ == "__main__":
    main()
