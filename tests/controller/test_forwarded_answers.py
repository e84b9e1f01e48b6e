"""Forwarded writes remembered in the log: the NoOpRecord that carries an answer, its
replay into the image, and a command run at most once per forward id."""

from __future__ import annotations

import uuid

from protocol import metadata_records as mr
from protocol.records import decode_metadata_record, encode_metadata_record, record
from server.controller.answers import ANSWER_TAG, MAX_REMEMBERED, ForwardedAnswers, answer_record, parse_answer, \
    tagged
from server.controller.commands import ControllerResult, bootstrap_records
from server.controller.idempotence import idempotent
from server.controller.state import BrokerHeartbeatTracker, ControllerState

MV_3_7_IV4, MV_3_2_IV0 = 19, 3


def state_at(level: int) -> ControllerState:
    state = ControllerState("cluster")
    for offset, item in enumerate(bootstrap_records(level)):
        state.replay(item, offset)
    return state


def test_an_answer_survives_the_log_with_uuids_and_bytes():
    key = bytes(range(16)) + b"\x00\x01"
    response = {"topics": [{"name": "t", "topic_id": uuid.UUID(int=7), "error_code": 0, "blob": b"\x00\xff"}]}
    item = answer_record(key, 19, 7, response, "why")
    # What a Kafka node reads: a NoOpRecord with a tag it skips.
    decoded = decode_metadata_record(encode_metadata_record(item))
    assert decoded.message is mr.NO_OP_RECORD
    parsed = parse_answer(tagged(decoded.data, ANSWER_TAG))
    assert parsed is not None
    got_key, answer = parsed
    assert got_key == key
    assert (answer.api_key, answer.api_version, answer.error_message) == (19, 7, "why")
    assert answer.response == response


def test_a_no_op_record_that_is_not_ours_is_nothing():
    answers = ForwardedAnswers()
    answers.replay(record(mr.NO_OP_RECORD, {}, version=0).data)
    answers.replay(record(mr.NO_OP_RECORD, {"_unknown_tagged_fields": [(ANSWER_TAG, b"short")]}, version=0).data)
    garbage = bytes(22) + b"{not json"
    answers.replay(record(mr.NO_OP_RECORD, {"_unknown_tagged_fields": [(ANSWER_TAG, garbage)]}, version=0).data)
    assert len(answers) == 0


def test_the_memory_is_bounded_oldest_forgotten_first():
    answers = ForwardedAnswers()
    keys = [index.to_bytes(16, "big") + b"\x00\x00" for index in range(MAX_REMEMBERED + 3)]
    for key in keys:
        answers.replay(answer_record(key, 19, 7, {"n": 1}, None).data)
    assert len(answers) == MAX_REMEMBERED
    assert answers.get(keys[0]) is None and answers.get(keys[2]) is None
    assert answers.get(keys[3]) is not None and answers.get(keys[-1]) is not None


def _create(calls: list[int]):
    def command(state, tracker, next_offset, now_ms):
        calls.append(next_offset)
        return ControllerResult([record(mr.CONFIG_RECORD, {"resource_type": 2, "resource_name": "t", "name": "k",
                                                           "value": str(len(calls))})], {"error_code": 0,
                                                                                       "n": len(calls)})
    return command


def test_a_command_runs_once_per_key_and_its_answer_is_returned_again():
    state, tracker, calls = state_at(MV_3_7_IV4), BrokerHeartbeatTracker(9000), []
    key = b"k" * 16 + b"\x00\x00"
    first = idempotent(_create(calls), key, 44, 1)(state, tracker, 10, 0)
    assert len(first.records) == 2 and first.records[-1].message is mr.NO_OP_RECORD
    for index, item in enumerate(first.records):
        state.replay(item, 10 + index)
    again = idempotent(_create(calls), key, 44, 1)(state, tracker, 12, 0)
    assert again.records == [] and again.response == first.response and calls == [10]
    # The same key for another API is not the same write.
    other = idempotent(_create(calls), key, 33, 1)(state, tracker, 12, 0)
    assert len(other.records) == 2 and calls == [10, 12]
    # A copy (the controller loop's speculative state) remembers too.
    assert state.copy().forwarded_answer(key) is not None


def test_below_the_level_with_no_op_records_nothing_is_remembered():
    state, calls = ControllerState("cluster"), []
    # No cluster bootstraps this low; a log copied from an old cluster may be there.
    state.replay(record(mr.FEATURE_LEVEL_RECORD, {"name": "metadata.version", "feature_level": MV_3_2_IV0}), 0)
    result = idempotent(_create(calls), b"k" * 18, 44, 1)(state, BrokerHeartbeatTracker(9000), 5, 0)
    assert [item.message for item in result.records] == [mr.CONFIG_RECORD]
