"""The controller loop and metadata transactions (KIP-868): while a transaction is open
in the speculative state, commands not submitted as transactional wait until it ends or
is aborted, so nothing unrelated lands inside it; an abort rolls the image back."""

from __future__ import annotations

import trio

from protocol import metadata_records as mr
from protocol.records import decode_metadata_record, record
from server.controller.commands import ControllerResult

from .test_loop import formatted_config, running, upgrade


def writes(*records):
    return lambda state, tracker, next_offset, now_ms: ControllerResult(list(records), {"error_code": 0})


BEGIN = record(mr.BEGIN_TRANSACTION_RECORD, {"name": "test"}, 0)
END = record(mr.END_TRANSACTION_RECORD, {}, 0)
ABORT = record(mr.ABORT_TRANSACTION_RECORD, {"reason": "test"}, 0)


def logged_records(node, from_offset: int):
    out = []
    for batch in node.metadata_log.read(from_offset):
        if batch.is_control:
            continue
        out += [decode_metadata_record(r.value) for r in batch.records]
    return out


def feature(level: int):
    return record(mr.FEATURE_LEVEL_RECORD, {"name": "group.version", "feature_level": level}, 0)


async def test_a_command_waits_for_the_open_transaction_and_lands_after_it(tmp_path):
    async with running(formatted_config(tmp_path)) as node:
        loop = node.controller
        await loop.submit(writes(BEGIN, feature(1)), transactional=True)
        assert node.state.in_transaction
        done = trio.Event()
        outcome = {}

        async def outsider():
            outcome["result"] = await loop.submit(upgrade(21))
            done.set()

        async with trio.open_nursery() as nursery:
            nursery.start_soon(outsider)
            await trio.testing.wait_all_tasks_blocked()
            # Held: nothing of it is in the speculative or committed state yet.
            assert not done.is_set()
            assert node.state.metadata_version == 19
            await loop.submit(writes(END), transactional=True)
            with trio.fail_after(10):
                await done.wait()
        assert outcome["result"].response["error_code"] == 0
        assert not node.state.in_transaction
        assert node.state.metadata_version == 21
        # In the log, the held command's record comes after EndTransactionRecord.
        names = [(r.name, r.data.get("feature_level")) for r in logged_records(node, 0)]
        assert names.index(("EndTransactionRecord", None)) < names.index(("FeatureLevelRecord", 21))


async def test_an_abort_rolls_the_image_back_and_releases_the_held_commands(tmp_path):
    async with running(formatted_config(tmp_path)) as node:
        loop = node.controller
        await loop.submit(writes(BEGIN, feature(1)), transactional=True)
        assert node.state.finalized_levels.get("group.version") == 1
        async with trio.open_nursery() as nursery:
            nursery.start_soon(loop.submit, upgrade(21))
            await trio.testing.wait_all_tasks_blocked()
            await loop.submit(writes(ABORT), transactional=True)
        assert node.state.finalized_levels.get("group.version") is None
        assert node.state.metadata_version == 21
