"""The active controller replays the record objects of its own committed batch instead of
decoding the batch again, when the command says they replay as their encoding decodes
(`ControllerResult.records_as_decoded`, the migration's copy), and proposes the bytes a
command encoded ahead (`ControllerResult.values`); every other batch is decoded and
encoded as always, and a restart (which decodes the log) reaches the same image."""

from __future__ import annotations

from protocol import metadata_records as mr
from protocol.records import encode_metadata_record, record
from server.controller import commands as cmd
from server.controller import replayer as replayer_module

from .test_loop import formatted_config, running

BROKER_RESOURCE = 4


def set_default_config(key: str, value: str, as_decoded: bool):
    config = record(mr.CONFIG_RECORD, {"resource_type": BROKER_RESOURCE, "resource_name": "",
                                       "name": key, "value": value}, 0)
    # The copy's way: records that replay as they decode, with their bytes made ahead.
    values = [encode_metadata_record(config)] if as_decoded else None
    return lambda state, tracker, next_offset, now_ms: cmd.ControllerResult(
        [config], {}, records_as_decoded=as_decoded, values=values)


def counting_decodes(monkeypatch) -> list[bytes]:
    decoded: list[bytes] = []
    original = replayer_module.decode_metadata_record

    def counting(value: bytes):
        decoded.append(value)
        return original(value)
    monkeypatch.setattr(replayer_module, "decode_metadata_record", counting)
    return decoded


async def test_the_leader_replays_its_own_records_and_a_restart_decodes_the_same(tmp_path, monkeypatch):
    config = formatted_config(tmp_path)
    async with running(config) as node:
        decoded = counting_decodes(monkeypatch)
        await node.submit(set_default_config("a.key", "1", as_decoded=True))
        assert decoded == []  # its own batch: not decoded again
        await node.submit(set_default_config("b.key", "2", as_decoded=False))
        assert len(decoded) == 1  # an ordinary command's batch is decoded as always
        image = node.state.snapshot()
        assert dict(node.state.configs(BROKER_RESOURCE, "")) == {"a.key": "1", "b.key": "2"}
        monkeypatch.undo()
    async with running(config) as restarted:
        assert dict(restarted.state.configs(BROKER_RESOURCE, "")) == {"a.key": "1", "b.key": "2"}
        replayed = restarted.state.snapshot()
        # The restart adds its own RegisterControllerRecord (KIP-919) after the log.
        assert {k: v for k, v in replayed.items() if k not in ("controllers", "last_applied_offset")} == \
            {k: v for k, v in image.items() if k not in ("controllers", "last_applied_offset")}


async def test_an_expectation_for_another_batch_is_never_used(tmp_path):
    async with running(formatted_config(tmp_path)) as node:
        replayer = node.replayer
        other = set_default_config("x.key", "9", as_decoded=True)(node.state, None, 0, 0).records
        # A stale expectation (wrong epoch) at the next offset: the batch there is decoded.
        replayer.expect_own_batch(-5, replayer.replayed_end_offset, other, [b"\x00"])
        await node.submit(set_default_config("c.key", "3", as_decoded=False))
        assert dict(node.state.configs(BROKER_RESOURCE, "")) == {"c.key": "3"}
        assert replayer._own_batch is None  # dropped once the log reached its offset
