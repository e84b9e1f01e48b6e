"""A trio bridge over kazoo: ZooKeeper reads, writes, multi-ops and watches for trio code.

Owns: `ZkSession` (one ZooKeeper session), `connect()`, the multi-op values
(`Create`, `SetData`, `Delete`, `Check`), the watch streams (`ZkWatch` of
`DataChange` / `ChildrenChange`), `ZkConnectionState`, and the error family
(`ZkError` and subclasses).

Rules kept here:
- kazoo is blocking and runs its own threads. Every kazoo call runs in
  `trio.to_thread.run_sync` with a bounded wait (`call_timeout_s`), so the trio
  thread never blocks and a cancelled caller is freed within that bound.
- kazoo's callbacks (watches, connection states) run on kazoo's threads; they only
  hand the value to the trio loop with `TrioToken.run_sync_soon` (never blocking,
  never waiting for trio), into a bounded mailbox read by the async iterator.
- Watches deliver *latest state*, as ZooKeeper's one-shot watches do: if several
  changes happen before the reader looks, it sees the newest one. The first item of
  a watch is the state at registration. Connection states are a bounded queue
  (oldest dropped beyond `STATE_QUEUE_LIMIT`, which a healthy reader never reaches).
- One error family: `ZkVersionConflict` (a version check failed; a multi applied
  nothing), `ZkNoNode`, `ZkNodeExists`, `ZkNotEmpty`, `ZkConnectionError` (no
  answer: connection lost, session expired, timed out, closed — the outcome of a
  write that raised it is unknown, it may still be applied).
"""

from __future__ import annotations

import enum
from collections import deque
from dataclasses import dataclass
from typing import Any, Callable, Generic, Sequence, TypeVar

import trio
from kazoo.client import KazooClient
from kazoo.exceptions import (
    BadVersionError,
    ConnectionClosedError,
    ConnectionLoss,
    KazooException,
    NodeExistsError,
    NoNodeError,
    NotEmptyError,
    OperationTimeoutError,
    RolledBackError,
    SessionExpiredError,
)
from kazoo.handlers.threading import KazooTimeoutError
from kazoo.protocol.states import KazooState
from kazoo.recipe.watchers import ChildrenWatch, DataWatch

from server.observability import Event, get_logger

log = get_logger("zk")

DEFAULT_SESSION_TIMEOUT_S = 10.0
DEFAULT_CALL_TIMEOUT_S = 10.0
STATE_QUEUE_LIMIT = 64

T = TypeVar("T")


# --------------------------------------------------------------------------
# Errors
# --------------------------------------------------------------------------

class ZkError(Exception):
    """Any ZooKeeper failure surfaced by ZkSession."""


class ZkVersionConflict(ZkError):
    """An expected znode version did not match. In a multi, nothing was applied."""

    def __init__(self, message: str, path: str | None = None, op_index: int | None = None) -> None:
        super().__init__(message)
        self.path = path
        self.op_index = op_index


class ZkNoNode(ZkError):
    def __init__(self, message: str, path: str | None = None, op_index: int | None = None) -> None:
        super().__init__(message)
        self.path = path
        self.op_index = op_index


class ZkNodeExists(ZkError):
    def __init__(self, message: str, path: str | None = None, op_index: int | None = None) -> None:
        super().__init__(message)
        self.path = path
        self.op_index = op_index


class ZkNotEmpty(ZkError):
    def __init__(self, message: str, path: str | None = None, op_index: int | None = None) -> None:
        super().__init__(message)
        self.path = path
        self.op_index = op_index


class ZkConnectionError(ZkError):
    """No answer from ZooKeeper (retriable). A write that raised this may still apply."""


_CONNECTION_FAILURES = (
    ConnectionLoss,
    SessionExpiredError,
    ConnectionClosedError,
    OperationTimeoutError,
    KazooTimeoutError,
)


def _translate(exc: BaseException, path: str | None, op_index: int | None = None) -> ZkError:
    where = f"{path}" if op_index is None else f"op {op_index} ({path})"
    if isinstance(exc, BadVersionError):
        return ZkVersionConflict(f"version conflict at {where}", path, op_index)
    if isinstance(exc, NoNodeError):
        return ZkNoNode(f"no node at {where}", path, op_index)
    if isinstance(exc, NodeExistsError):
        return ZkNodeExists(f"node exists at {where}", path, op_index)
    if isinstance(exc, NotEmptyError):
        return ZkNotEmpty(f"node has children at {where}", path, op_index)
    if isinstance(exc, _CONNECTION_FAILURES):
        return ZkConnectionError(f"{type(exc).__name__} at {where}")
    return ZkError(f"{type(exc).__name__} at {where}: {exc}")


# --------------------------------------------------------------------------
# Multi-op values
# --------------------------------------------------------------------------

@dataclass(frozen=True, slots=True)
class Create:
    path: str
    data: bytes = b""
    ephemeral: bool = False
    # ZooKeeper appends a counter to the name (e.g. /config/changes/config_change_0000000007).
    sequential: bool = False


@dataclass(frozen=True, slots=True)
class SetData:
    path: str
    data: bytes
    version: int = -1  # -1: any version


@dataclass(frozen=True, slots=True)
class Delete:
    path: str
    version: int = -1


@dataclass(frozen=True, slots=True)
class Check:
    """Fails the whole multi unless `path` is at exactly `version`."""

    path: str
    version: int


ZkOp = Create | SetData | Delete | Check


@dataclass(frozen=True, slots=True)
class MultiResult:
    """Per op: the created path (Create), the new version (SetData), None (Delete/Check)."""

    results: tuple[str | int | None, ...]


# --------------------------------------------------------------------------
# Watches and states
# --------------------------------------------------------------------------

class ZkConnectionState(enum.Enum):
    CONNECTED = "connected"
    SUSPENDED = "suspended"  # disconnected; the session may still be alive
    LOST = "lost"  # the session expired: ephemeral nodes and watches are gone


_STATE_FROM_KAZOO = {
    KazooState.CONNECTED: ZkConnectionState.CONNECTED,
    KazooState.SUSPENDED: ZkConnectionState.SUSPENDED,
    KazooState.LOST: ZkConnectionState.LOST,
}


@dataclass(frozen=True, slots=True)
class ZkStat:
    """The parts of a znode's Stat kraftwerk uses. `czxid` (the zxid that created
    it) is a ZooKeeper-mode broker's epoch; `ephemeral_owner` is the owning
    session id (0 for a persistent znode)."""

    version: int
    czxid: int
    mzxid: int
    ephemeral_owner: int
    num_children: int


@dataclass(frozen=True, slots=True)
class DataChange:
    """A znode's data now: None/None when it does not exist."""

    path: str
    data: bytes | None
    version: int | None

    @property
    def exists(self) -> bool:
        return self.data is not None


@dataclass(frozen=True, slots=True)
class ChildrenChange:
    path: str
    children: tuple[str, ...]


_EMPTY = object()


class _Mailbox(Generic[T]):
    """A bounded queue filled from callbacks on the trio thread, read by one task.

    `maxlen=1` keeps only the newest value (watch semantics)."""

    def __init__(self, maxlen: int) -> None:
        self._items: deque[T] = deque(maxlen=maxlen)
        self._ready = trio.Event()
        self._closed = False

    def put(self, item: T) -> None:
        if self._closed:
            return
        self._items.append(item)
        self._ready.set()

    def close(self) -> None:
        self._closed = True
        self._ready.set()

    @property
    def closed(self) -> bool:
        return self._closed

    async def get(self) -> T:
        """The next item; raises StopAsyncIteration once closed and drained."""
        while True:
            if self._items:
                item = self._items.popleft()
                if not self._items and not self._closed:
                    self._ready = trio.Event()
                return item
            if self._closed:
                raise StopAsyncIteration
            await self._ready.wait()


class ZkWatch(Generic[T]):
    """An async iterator of changes to one znode (or its children). Close it (or the
    session) to stop; used as `async with` it closes itself."""

    def __init__(self, mailbox: _Mailbox[T], on_close: Callable[[], None]) -> None:
        self._mailbox = mailbox
        self._on_close = on_close

    def __aiter__(self) -> ZkWatch[T]:
        return self

    async def __anext__(self) -> T:
        return await self._mailbox.get()

    async def next(self, timeout_s: float) -> T:
        """The next change within `timeout_s` (trio.TooSlowError otherwise)."""
        with trio.fail_after(timeout_s):
            return await self._mailbox.get()

    def close(self) -> None:
        self._mailbox.close()
        self._on_close()

    async def aclose(self) -> None:
        self.close()

    async def __aenter__(self) -> ZkWatch[T]:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        self.close()


# --------------------------------------------------------------------------
# The session
# --------------------------------------------------------------------------

class ZkSession:
    """One ZooKeeper session for trio code. Create with `await connect(...)` (or
    `await ZkSession.connect(...)`)."""

    @staticmethod
    async def connect(hosts: str, **kwargs: Any) -> ZkSession:
        return await connect(hosts, **kwargs)

    def __init__(self, client: KazooClient, token: trio.lowlevel.TrioToken, call_timeout_s: float) -> None:
        self._client = client
        self._token = token
        self._call_timeout_s = call_timeout_s
        self._state = ZkConnectionState.CONNECTED
        self._state_listeners: list[_Mailbox[ZkConnectionState]] = []
        self._connected = trio.Event()
        self._connected.set()
        self._watches: list[ZkWatch[Any]] = []
        self._closed = False
        client.add_listener(self._on_kazoo_state)

    # ------------------------------------------------------------ bridging helpers

    def _deliver(self, function: Callable[..., None], *args: Any) -> bool:
        """From any thread: run `function(*args)` on the trio thread soon. False when
        the trio run is gone (the caller then stops its kazoo watch)."""
        try:
            self._token.run_sync_soon(function, *args)
        except trio.RunFinishedError:
            return False
        return True

    async def _run(self, function: Callable[[], T], path: str | None) -> T:
        if self._closed:
            raise ZkConnectionError("session is closed")
        try:
            return await trio.to_thread.run_sync(function)
        # kazoo's timeout is not a KazooException.
        except (KazooException, KazooTimeoutError) as exc:
            raise _translate(exc, path) from exc

    def _wait(self, async_result: Any) -> Any:
        # Runs in a worker thread: a bounded wait for kazoo's answer.
        return async_result.get(block=True, timeout=self._call_timeout_s)

    # ------------------------------------------------------------ connection state

    def _on_kazoo_state(self, kazoo_state: KazooState) -> None:
        # kazoo's connection thread: must not block (kazoo's rule for listeners).
        state = _STATE_FROM_KAZOO.get(kazoo_state)
        if state is not None:
            self._deliver(self._apply_state, state)

    def _apply_state(self, state: ZkConnectionState) -> None:
        if self._closed:
            return  # kazoo reports LOST when we stop it: nobody listens any more
        self._state = state
        if state is ZkConnectionState.CONNECTED:
            self._connected.set()
        elif self._connected.is_set():
            self._connected = trio.Event()
        log.info(Event.ZK_CONNECTION_STATE, state=state.value)
        for mailbox in self._state_listeners:
            mailbox.put(state)

    @property
    def state(self) -> ZkConnectionState:
        return self._state

    @property
    def session_id(self) -> int | None:
        client_id = self._client.client_id
        return client_id[0] if client_id else None

    @property
    def client_id(self) -> tuple[int, bytes] | None:
        """(session id, session password): what another client needs to take this
        session over — fault tests use it to make ZooKeeper expire the session."""
        client_id = self._client.client_id
        return (client_id[0], client_id[1]) if client_id else None

    async def wait_connected(self, timeout_s: float | None = None) -> None:
        with trio.fail_after(timeout_s) if timeout_s is not None else _nullcontext():
            while self._state is not ZkConnectionState.CONNECTED:
                await self._connected.wait()

    def connection_events(self) -> ZkWatch[ZkConnectionState]:
        """An async iterator of connection states from now on (CONNECTED, SUSPENDED, LOST)."""
        mailbox: _Mailbox[ZkConnectionState] = _Mailbox(STATE_QUEUE_LIMIT)
        self._state_listeners.append(mailbox)

        def remove() -> None:
            if mailbox in self._state_listeners:
                self._state_listeners.remove(mailbox)

        watch: ZkWatch[ZkConnectionState] = ZkWatch(mailbox, remove)
        if self._closed:
            watch.close()
        return watch

    # ------------------------------------------------------------ reads

    async def get(self, path: str) -> tuple[bytes, int] | None:
        """(data, version), or None when the znode does not exist."""
        def call() -> tuple[bytes, int] | None:
            try:
                data, stat = self._wait(self._client.get_async(path))
            except NoNodeError:
                return None
            return (data if data is not None else b"", stat.version)

        return await self._run(call, path)

    async def children(self, path: str) -> list[str] | None:
        """Child names (sorted), or None when the znode does not exist."""
        def call() -> list[str] | None:
            try:
                return sorted(self._wait(self._client.get_children_async(path)))
            except NoNodeError:
                return None

        return await self._run(call, path)

    async def exists(self, path: str) -> int | None:
        """The znode's version, or None when it does not exist."""
        def call() -> int | None:
            stat = self._wait(self._client.exists_async(path))
            return stat.version if stat is not None else None

        return await self._run(call, path)

    async def stat(self, path: str) -> ZkStat | None:
        """The znode's stat, or None when it does not exist."""
        def call() -> ZkStat | None:
            stat = self._wait(self._client.exists_async(path))
            if stat is None:
                return None
            return ZkStat(stat.version, stat.czxid, stat.mzxid, stat.ephemeralOwner, stat.numChildren)

        return await self._run(call, path)

    # ------------------------------------------------------------ writes

    async def create(self, path: str, data: bytes = b"", *, ephemeral: bool = False,
                     makepath: bool = True) -> str:
        """Creates the znode (parents too when `makepath`); ZkNodeExists if it exists."""
        def call() -> str:
            return self._wait(self._client.create_async(path, data, ephemeral=ephemeral, makepath=makepath))

        return await self._run(call, path)

    async def set(self, path: str, data: bytes, version: int = -1) -> int:
        """Sets the data if the znode is at `version` (-1: any); returns the new version."""
        def call() -> int:
            return self._wait(self._client.set_async(path, data, version)).version

        return await self._run(call, path)

    async def delete(self, path: str, version: int = -1, *, recursive: bool = False) -> None:
        def call() -> None:
            if recursive:
                # kazoo's recursive delete is a sequence of calls, each bounded by the
                # session's own request handling.
                self._client.delete(path, recursive=True)
            else:
                self._wait(self._client.delete_async(path, version))

        await self._run(call, path)

    async def ensure_path(self, path: str) -> None:
        """Creates `path` and its parents (empty data) where missing."""
        def call() -> None:
            self._wait(self._client.ensure_path_async(path))

        await self._run(call, path)

    async def multi(self, ops: Sequence[ZkOp]) -> MultiResult:
        """Applies all `ops` atomically or none. A failed Check/version raises
        ZkVersionConflict (with the failing op's index and path)."""
        ops = tuple(ops)
        if not ops:
            return MultiResult(())

        def call() -> list[Any]:
            transaction = self._client.transaction()
            for op in ops:
                if isinstance(op, Create):
                    transaction.create(op.path, op.data, ephemeral=op.ephemeral, sequence=op.sequential)
                elif isinstance(op, SetData):
                    transaction.set_data(op.path, op.data, op.version)
                elif isinstance(op, Delete):
                    transaction.delete(op.path, op.version)
                elif isinstance(op, Check):
                    transaction.check(op.path, op.version)
                else:
                    raise TypeError(f"not a multi op: {op!r}")
            return self._wait(transaction.commit_async())

        results = await self._run(call, ops[0].path)
        failure = _first_failure(results)
        if failure is not None:
            index, exc = failure
            raise _translate(exc, ops[index].path, index)
        out: list[str | int | None] = []
        for op, result in zip(ops, results):
            if isinstance(op, Create):
                out.append(result)
            elif isinstance(op, SetData):
                out.append(result.version)
            else:
                out.append(None)
        return MultiResult(tuple(out))

    async def run_sync(self, function: Callable[[KazooClient], T]) -> T:
        """Runs `function(kazoo_client)` in a worker thread: for blocking tooling that
        wants this session, e.g. `await zk.run_sync(seed.read_cluster_image)`.
        kazoo errors come back translated like every other call's."""
        return await self._run(lambda: function(self._client), None)

    # ------------------------------------------------------------ watches

    async def watch_data(self, path: str) -> ZkWatch[DataChange]:
        """Data changes of `path` (existing or not); the first item is its state now.
        Survives reconnects and session expiry (it re-reads after each)."""
        mailbox: _Mailbox[DataChange] = _Mailbox(1)
        stopped = False

        def on_change(data: bytes | None, stat: Any) -> bool | None:
            # kazoo's thread. Returning False ends kazoo's watch.
            if stopped:
                return False
            change = DataChange(path, data if stat is not None else None,
                                stat.version if stat is not None else None)
            if not self._deliver(mailbox.put, change):
                return False
            return None

        def stop() -> None:
            nonlocal stopped
            stopped = True

        watch: ZkWatch[DataChange] = ZkWatch(mailbox, lambda: self._forget(watch, stop))
        self._watches.append(watch)
        try:
            await self._run(lambda: DataWatch(self._client, path, on_change), path)
        except BaseException:
            watch.close()
            raise
        return watch

    async def watch_children(self, path: str) -> ZkWatch[ChildrenChange]:
        """Child-list changes of an existing `path`; the first item is the list now.
        ZkNoNode if `path` does not exist; the stream ends if `path` is deleted."""
        if await self.exists(path) is None:
            raise ZkNoNode(f"no node at {path}", path)
        mailbox: _Mailbox[ChildrenChange] = _Mailbox(1)
        stopped = False

        def on_children(children: list[str]) -> bool | None:
            if stopped:
                return False
            if not self._deliver(mailbox.put, ChildrenChange(path, tuple(sorted(children)))):
                return False
            return None

        def stop() -> None:
            nonlocal stopped
            stopped = True

        watch: ZkWatch[ChildrenChange] = ZkWatch(mailbox, lambda: self._forget(watch, stop))
        self._watches.append(watch)
        try:
            await self._run(lambda: ChildrenWatch(self._client, path, on_children), path)
        except BaseException:
            watch.close()
            raise
        return watch

    def _forget(self, watch: ZkWatch[Any], stop: Callable[[], None]) -> None:
        # A closed watch is dropped at once: a long-lived session may open many.
        stop()
        if watch in self._watches:
            self._watches.remove(watch)

    # ------------------------------------------------------------ closing

    @property
    def closed(self) -> bool:
        return self._closed

    async def aclose(self) -> None:
        """Ends the session (its ephemeral znodes go at once) and every watch stream."""
        if self._closed:
            return
        self._closed = True
        for watch in list(self._watches):
            watch.close()
        for mailbox in self._state_listeners:
            mailbox.close()
        self._state_listeners.clear()
        client = self._client

        def stop() -> None:
            try:
                client.stop()
            finally:
                client.close()

        # Shielded: closing must finish even when the caller is being cancelled, or the
        # session (and its ephemeral znodes) would linger until the server expires it.
        with trio.CancelScope(shield=True):
            await trio.to_thread.run_sync(stop)

    async def __aenter__(self) -> ZkSession:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()


def _first_failure(results: Sequence[Any]) -> tuple[int, BaseException] | None:
    # A failed multi returns one exception per op: RolledBackError for the ops that
    # were fine, the real error for the op that failed.
    for index, result in enumerate(results):
        if isinstance(result, BaseException) and not isinstance(result, RolledBackError):
            return index, result
    for index, result in enumerate(results):
        if isinstance(result, BaseException):
            return index, result
    return None


class _nullcontext:
    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc_info: object) -> None:
        return None


async def connect(
    hosts: str,
    *,
    timeout_s: float = 15.0,
    session_timeout_s: float = DEFAULT_SESSION_TIMEOUT_S,
    call_timeout_s: float = DEFAULT_CALL_TIMEOUT_S,
) -> ZkSession:
    """Opens a session to `hosts` ("127.0.0.1:2181[,...][/chroot]") within `timeout_s`.

    kazoo reconnects by itself after a disconnect (retrying every ≤1 s, forever) and
    opens a new session after expiry; `ZkSession.connection_events()` reports both."""
    client = KazooClient(
        hosts=hosts,
        timeout=session_timeout_s,
        connection_retry={"max_tries": -1, "delay": 0.1, "backoff": 2, "max_delay": 1.0},
    )

    def start() -> None:
        client.start(timeout=timeout_s)

    try:
        await trio.to_thread.run_sync(start)
    except (KazooTimeoutError, KazooException) as exc:
        def close() -> None:
            # kazoo's start() already stops a client that timed out; this covers the
            # other failures and is harmless twice.
            try:
                client.stop()
                client.close()
            except Exception:  # noqa: BLE001 - best-effort cleanup of a failed start
                pass

        with trio.CancelScope(shield=True):
            await trio.to_thread.run_sync(close)
        raise ZkConnectionError(f"could not connect to ZooKeeper at {hosts} within {timeout_s}s") from exc
    return ZkSession(client, trio.lowlevel.current_trio_token(), call_timeout_s)

