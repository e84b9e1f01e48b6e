"""ZkSession against a real ZooKeeper (server/zk/client.py)."""

from __future__ import annotations

import pytest
import trio

from cli.local_cluster import free_port_run
from server.zk.client import (
    Check,
    Create,
    Delete,
    SetData,
    ZkConnectionError,
    ZkConnectionState,
    ZkNodeExists,
    ZkNoNode,
    ZkNotEmpty,
    ZkSession,
    ZkVersionConflict,
    connect,
)
from server.zk.process import ZooKeeperProcess

WAIT_S = 20


async def test_crud(zk_hosts: str) -> None:
    async with await connect(zk_hosts) as zk:
        assert await zk.get("/a/b") is None
        assert await zk.exists("/a/b") is None
        assert await zk.children("/a") is None
        assert await zk.create("/a/b", b"one") == "/a/b"  # parents made
        assert await zk.get("/a/b") == (b"one", 0)
        assert await zk.exists("/a/b") == 0
        assert await zk.children("/a") == ["b"]
        with pytest.raises(ZkNodeExists):
            await zk.create("/a/b", b"again")
        with pytest.raises(ZkNoNode):
            await zk.create("/x/y", b"", makepath=False)
        assert await zk.set("/a/b", b"two") == 1
        assert await zk.set("/a/b", b"three", version=1) == 2
        with pytest.raises(ZkVersionConflict):
            await zk.set("/a/b", b"stale", version=1)
        assert await zk.get("/a/b") == (b"three", 2)
        with pytest.raises(ZkNotEmpty):
            await zk.delete("/a")
        with pytest.raises(ZkVersionConflict):
            await zk.delete("/a/b", version=0)
        await zk.delete("/a/b", version=2)
        assert await zk.get("/a/b") is None
        with pytest.raises(ZkNoNode):
            await zk.delete("/a/b")
        with pytest.raises(ZkNoNode):
            await zk.set("/a/b", b"")
        await zk.create("/deep/er/node", b"")
        await zk.delete("/deep", recursive=True)
        assert await zk.exists("/deep") is None
        await zk.ensure_path("/e/f")
        assert await zk.get("/e/f") == (b"", 0)


async def test_ephemeral_node_goes_with_its_session(zk_hosts: str) -> None:
    async with await connect(zk_hosts) as observer:
        owner = await connect(zk_hosts)
        await owner.create("/brokers/ids/1", b"me", ephemeral=True)
        async with await observer.watch_data("/brokers/ids/1") as watch:
            first = await watch.next(WAIT_S)
            assert first.data == b"me" and first.exists
            await owner.aclose()
            gone = await watch.next(WAIT_S)
            assert not gone.exists and gone.version is None
        assert await observer.exists("/brokers/ids/1") is None
        assert await observer.children("/brokers/ids") == []


async def test_multi_applies_all_or_nothing(zk_hosts: str) -> None:
    async with await connect(zk_hosts) as zk:
        await zk.create("/migration", b"m0")
        await zk.create("/topics", b"")
        result = await zk.multi([
            Check("/migration", 0),
            Create("/topics/a", b"A"),
            SetData("/migration", b"m1", 0),
        ])
        assert result.results == (None, "/topics/a", 1)
        assert await zk.get("/migration") == (b"m1", 1)

        # A deposed writer still believes the fence is at version 0.
        with pytest.raises(ZkVersionConflict) as excinfo:
            await zk.multi([
                Create("/topics/b", b"B"),
                Delete("/topics/a"),
                SetData("/migration", b"m-stale", 0),
            ])
        assert excinfo.value.op_index == 2
        assert excinfo.value.path == "/migration"
        assert await zk.get("/topics/b") is None
        assert await zk.get("/topics/a") == (b"A", 0)
        assert await zk.get("/migration") == (b"m1", 1)

        with pytest.raises(ZkVersionConflict):
            await zk.multi([Check("/migration", 0), Create("/topics/c", b"")])
        assert await zk.get("/topics/c") is None
        with pytest.raises(ZkNoNode):
            await zk.multi([Create("/topics/d", b""), Check("/nowhere", 0)])
        assert await zk.get("/topics/d") is None
        assert (await zk.multi([])).results == ()


async def test_data_watch_fires_on_each_change(zk_hosts: str) -> None:
    async with await connect(zk_hosts) as zk, await connect(zk_hosts) as writer:
        watch = await zk.watch_data("/features")
        initial = await watch.next(WAIT_S)
        assert initial.path == "/features" and not initial.exists
        await writer.create("/features", b"v0")
        created = await watch.next(WAIT_S)
        assert (created.data, created.version) == (b"v0", 0)
        await writer.set("/features", b"v1")
        changed = await watch.next(WAIT_S)
        assert (changed.data, changed.version) == (b"v1", 1)
        await watch.aclose()
        # A closed watch ends its iteration.
        with trio.fail_after(WAIT_S):
            remaining = [change async for change in watch]
        assert remaining == []


async def test_children_watch(zk_hosts: str) -> None:
    async with await connect(zk_hosts) as zk:
        with pytest.raises(ZkNoNode):
            await zk.watch_children("/brokers/ids")
        await zk.create("/brokers/ids", b"")
        async with await zk.watch_children("/brokers/ids") as watch:
            assert (await watch.next(WAIT_S)).children == ()
            await zk.create("/brokers/ids/2", b"", ephemeral=True)
            assert (await watch.next(WAIT_S)).children == ("2",)


async def test_session_reconnects_after_zookeeper_restart(zookeeper: ZooKeeperProcess) -> None:
    async with await connect(zookeeper.hosts, session_timeout_s=30) as zk:
        session_id = zk.session_id
        await zk.create("/eph", b"e", ephemeral=True)
        await zk.create("/persistent", b"p")
        states = zk.connection_events()
        watch = await zk.watch_data("/persistent")
        assert (await watch.next(WAIT_S)).data == b"p"

        await trio.to_thread.run_sync(zookeeper.restart)

        seen = []
        with trio.fail_after(WAIT_S):
            async for state in states:
                seen.append(state)
                if state is ZkConnectionState.CONNECTED:
                    break
        assert seen[0] is ZkConnectionState.SUSPENDED
        await zk.wait_connected(WAIT_S)
        # ZooKeeper keeps sessions across a restart shorter than their timeout: the
        # same session, with its ephemeral node, is back.
        assert zk.session_id == session_id
        assert await zk.get("/eph") == (b"e", 0)
        await zk.set("/persistent", b"after")
        while True:
            change = await watch.next(WAIT_S)
            if change.data == b"after":
                break


async def test_calls_fail_with_connection_error_while_zookeeper_is_down(zookeeper: ZooKeeperProcess) -> None:
    async with await connect(zookeeper.hosts, call_timeout_s=1.0) as zk:
        states = zk.connection_events()
        await trio.to_thread.run_sync(zookeeper.kill)
        assert await states.next(WAIT_S) is ZkConnectionState.SUSPENDED
        assert zk.state is ZkConnectionState.SUSPENDED
        with trio.fail_after(WAIT_S):
            with pytest.raises(ZkConnectionError):
                await zk.get("/")


async def test_connect_to_nothing_fails_in_time() -> None:
    with trio.fail_after(WAIT_S):
        with pytest.raises(ZkConnectionError):
            await connect(f"127.0.0.1:{free_port_run(1)}", timeout_s=1.0)


async def test_closed_session_refuses_calls(zk_hosts: str) -> None:
    zk = await ZkSession.connect(zk_hosts)
    events = zk.connection_events()
    await zk.aclose()
    with pytest.raises(ZkConnectionError):
        await zk.get("/")
    with trio.fail_after(WAIT_S):
        assert [state async for state in events] == []


def expire_session(hosts: str, client_id: tuple[int, bytes]) -> None:
    """Makes ZooKeeper end a session: another client takes it over and closes it
    (the usual way to inject a session expiry)."""
    from kazoo.client import KazooClient

    hijacker = KazooClient(hosts=hosts, client_id=client_id)
    hijacker.start(timeout=15)
    hijacker.stop()
    hijacker.close()


async def test_session_expiry_is_reported_and_a_new_session_follows(zk_hosts: str) -> None:
    async with await connect(zk_hosts) as zk, await connect(zk_hosts) as observer:
        await zk.create("/eph", b"e", ephemeral=True)
        old_session = zk.session_id
        states = zk.connection_events()
        watch = await observer.watch_data("/eph")
        assert (await watch.next(WAIT_S)).exists
        await trio.to_thread.run_sync(expire_session, zk_hosts, zk.client_id)
        assert not (await watch.next(WAIT_S)).exists  # the session's ephemeral node went
        seen = []
        with trio.fail_after(WAIT_S):
            async for state in states:
                seen.append(state)
                if state is ZkConnectionState.CONNECTED and ZkConnectionState.LOST in seen:
                    break
        assert zk.session_id != old_session
        assert await zk.exists("/eph") is None
        await zk.create("/eph", b"again", ephemeral=True)  # the new session works
