"""Claiming ZooKeeper and the `/migration` fence, against a real ZooKeeper: a KRaft
controller takes over /controller (persistent) and /controller_epoch, a newer leader's
claim makes every later write of the deposed one fail whole, and a deposed leader
cannot claim back."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import trio

from server.migration.driver import Fenced, MigrationDriver
from server.migration.zk_sync import ZkWrite
from server.zk import paths as zp
from server.zk.client import connect


def driver_for(node_id: int, hosts: str) -> MigrationDriver:
    # The fence logic needs only the node's id; the controller loop is not involved.
    node = SimpleNamespace(config=SimpleNamespace(node_id=node_id))
    return MigrationDriver(node, hosts, max_lag_records=100)


async def test_a_newer_leader_fences_the_deposed_one(zk_hosts):
    async with await connect(zk_hosts) as zk:
        # A ZooKeeper-mode controller holds the role: an ephemeral /controller, epoch 4.
        await zk.create(zp.CONTROLLER_EPOCH_PATH, zp.ControllerEpochZnode(4).encode())
        await zk.create(zp.CONTROLLER_PATH, zp.ControllerZnode(2, 1, None, version=1).encode(), ephemeral=True)

        old = driver_for(3000, zk_hosts)
        await old._claim(zk, epoch=5, reset_offset=True)
        await old._ensure_roots(zk)
        controller = zp.ControllerZnode.decode((await zk.get(zp.CONTROLLER_PATH))[0])
        assert (controller.broker_id, controller.kraft_controller_epoch) == (3000, 5)
        assert zp.ControllerEpochZnode.decode((await zk.get(zp.CONTROLLER_EPOCH_PATH))[0]).epoch == 5
        await old._write(zk, 5, [ZkWrite("create", "/config/topics/a", zp.ConfigZnode({}).encode())], 10)
        migration = zp.MigrationZnode.decode((await zk.get(zp.MIGRATION_PATH))[0])
        assert (migration.last_offset, migration.kraft_controller_id) == (10, 3000)

        new = driver_for(3001, zk_hosts)
        await new._claim(zk, epoch=6, reset_offset=False)
        assert new.status.zk_last_offset == 10  # resumes from where the old leader got
        with pytest.raises(Fenced):
            await old._write(zk, 5, [ZkWrite("create", "/config/topics/b", zp.ConfigZnode({}).encode())], 11)
        assert await zk.get("/config/topics/b") is None  # the multi applied nothing
        migration = zp.MigrationZnode.decode((await zk.get(zp.MIGRATION_PATH))[0])
        assert (migration.last_offset, migration.kraft_controller_id, migration.kraft_controller_epoch) == (10, 3001, 6)

        # The deposed leader cannot take the role back with its old epoch.
        with pytest.raises(Fenced):
            await old._claim(zk, epoch=5, reset_offset=False)
        # The new one writes on.
        await new._write(zk, 6, [ZkWrite("create", "/config/topics/b", zp.ConfigZnode({}).encode())], 11)
        assert await zk.get("/config/topics/b") is not None


async def test_a_claim_for_a_new_copy_resets_the_offset_of_a_stale_znode(zk_hosts):
    async with await connect(zk_hosts) as zk:
        # Left behind by a rolled-back migration: a high offset from another metadata log.
        await zk.create(zp.MIGRATION_PATH, zp.MigrationZnode(5_000, 1, 3000, 2).encode())
        driver = driver_for(3000, zk_hosts)
        await driver._claim(zk, epoch=3, reset_offset=True)
        migration = zp.MigrationZnode.decode((await zk.get(zp.MIGRATION_PATH))[0])
        assert migration.last_offset == -1 and driver.status.zk_last_offset == -1
        # /controller is persistent: it survives the session that wrote it.
    async with await connect(zk_hosts) as zk:
        with trio.fail_after(10):
            found = await zk.get(zp.CONTROLLER_PATH)
        assert found is not None and zp.ControllerZnode.decode(found[0]).is_kraft
