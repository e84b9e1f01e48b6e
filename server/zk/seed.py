"""Seeding and reading a ZooKeeper-mode Kafka cluster's metadata (test and bench tooling).

Owns: `SeedSpec` (what to seed), `spec_image(spec)` (the exact `ZkClusterImage` a
spec describes, pure and deterministic), `seed_zookeeper(hosts, spec)` /
`write_cluster_image(client, image)` (write it in Kafka's layout),
`read_zookeeper(hosts)` / `read_cluster_image(client)` (read a whole cluster back
into a `ZkClusterImage`, the dataclasses of which live in `server/zk/paths.py`),
and `ZkWireError`.

Rules kept here:
- Blocking kazoo on purpose: this is tooling, run from tests, benches or a worker
  thread (`ZkSession.run_sync(read_cluster_image)` from trio code).
- Writes go in kazoo transactions of at most `batch_ops` operations, several in
  flight at once (ZooKeeper applies one session's requests in order, so parents
  still precede children); 100k partitions take seconds, not minutes.
- Reads are pipelined too. `read_cluster_image` goes through a kazoo session
  (~3k znodes/s: kazoo's connection thread serves one request per loop);
  `read_zookeeper` opens its own read-only session over ZooKeeper's wire protocol
  (GetData/GetChildren only, a window of requests per write, ~10k znodes/s with
  decoding) — the bulk path for a migration's copy. Both produce the same image.
  A znode that vanishes between listing and reading is skipped (it was deleted); a
  znode with a bad layout raises `ZnodeDecodeError` naming its path. Neither is a
  snapshot: ZooKeeper has no consistent multi-znode read.
- Broker registrations are ephemeral in Kafka: the seed never writes them (live
  broker agents do). `read_cluster_image` reads whichever exist.
"""

from __future__ import annotations

import random
import socket
import struct
import uuid
from collections import deque
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Iterator, Mapping, NamedTuple, TypeVar

from kazoo.client import KazooClient
from kazoo.exceptions import NodeExistsError, NoNodeError, RolledBackError

from server.zk import paths
from server.zk.paths import (
    BrokerRegistrationZnode,
    ClusterIdZnode,
    ConfigZnode,
    ControllerEpochZnode,
    ControllerZnode,
    FeaturesZnode,
    FeatureZnodeStatus,
    FinalizedFeature,
    MigrationZnode,
    PartitionStateZnode,
    TopicZnode,
    ZkClusterImage,
    ZkTopicImage,
    ZnodeDecodeError,
)

DEFAULT_BATCH_OPS = 500
# Transactions/reads in flight at once: enough to hide the round trip, few enough
# that a failure stops the write quickly.
PIPELINE_DEPTH = 8
READ_PIPELINE_DEPTH = 2000
DEFAULT_TIMEOUT_S = 60.0

# The persistent paths a ZooKeeper-mode Kafka cluster has from its first broker's start.
KAFKA_PERSISTENT_PATHS = (
    paths.BROKER_IDS_PATH,
    paths.TOPICS_PATH,
    "/brokers/seqid",
    paths.config_entity_type_path(paths.CONFIG_TOPICS),
    paths.config_entity_type_path(paths.CONFIG_BROKERS),
    "/config/clients",
    "/config/users",
    "/config/changes",
    "/admin/delete_topics",
    "/isr_change_notification",
    "/latest_producer_id_block",
)

T = TypeVar("T")


class SeedError(RuntimeError):
    """Seeding failed (an existing cluster in the way, or ZooKeeper refused a write)."""


@dataclass(frozen=True, slots=True)
class SeedSpec:
    """A ZooKeeper-mode cluster to seed.

    Topics are `<topic_prefix><index>` (zero-padded), each with
    `partitions_per_topic` partitions of `replication_factor` replicas spread over
    `broker_ids` as Kafka's rack-unaware assignment does (a random start per topic,
    consecutive brokers after it). Leader = first replica, ISR = all replicas.
    `topic_configs` applies to every topic; `broker_configs` is keyed by broker id
    as text (or "<default>"); `features` maps feature -> finalized level in
    `/features`. `seed` drives topic ids and assignment starts.
    """

    cluster_id: str
    broker_ids: tuple[int, ...] = (1, 2, 3)
    topics: int = 3
    partitions_per_topic: int = 3
    replication_factor: int = 3
    topic_configs: Mapping[str, str] = field(default_factory=lambda: {"retention.ms": "604800000"})
    broker_configs: Mapping[str, Mapping[str, str]] = field(default_factory=dict)
    features: Mapping[str, int] = field(default_factory=dict)
    controller_epoch: int = 1
    leader_epoch: int = 0
    topic_prefix: str = "topic-"
    seed: int = 0

    def __post_init__(self) -> None:
        if not self.broker_ids:
            raise ValueError("a cluster needs at least one broker id")
        if len(set(self.broker_ids)) != len(self.broker_ids):
            raise ValueError(f"duplicate broker ids: {self.broker_ids}")
        if not 1 <= self.replication_factor <= len(self.broker_ids):
            raise ValueError(
                f"replication factor {self.replication_factor} needs 1..{len(self.broker_ids)} brokers"
            )
        if self.topics < 0 or self.partitions_per_topic < 1:
            raise ValueError("topics must be >= 0 and partitions_per_topic >= 1")
        paths.parse_kafka_uuid(self.cluster_id)  # a Kafka cluster id is a base64url uuid

    @property
    def partition_count(self) -> int:
        return self.topics * self.partitions_per_topic

    def topic_names(self) -> list[str]:
        width = max(len(str(max(self.topics - 1, 0))), 1)
        return [f"{self.topic_prefix}{index:0{width}d}" for index in range(self.topics)]


def spec_image(spec: SeedSpec) -> ZkClusterImage:
    """The persistent cluster state `spec` describes (no broker registrations, no
    /controller, no /migration). Pure: the same spec gives the same image."""
    rng = random.Random(spec.seed)
    brokers = spec.broker_ids
    topics: dict[str, ZkTopicImage] = {}
    for name in spec.topic_names():
        topic_id = paths.kafka_uuid_string(uuid.UUID(int=rng.getrandbits(128)))
        start = rng.randrange(len(brokers))
        assignment: dict[int, tuple[int, ...]] = {}
        states: dict[int, PartitionStateZnode] = {}
        for partition in range(spec.partitions_per_topic):
            first = (start + partition) % len(brokers)
            replicas = tuple(brokers[(first + k) % len(brokers)] for k in range(spec.replication_factor))
            assignment[partition] = replicas
            states[partition] = PartitionStateZnode(
                leader=replicas[0],
                leader_epoch=spec.leader_epoch,
                isr=replicas,
                controller_epoch=spec.controller_epoch,
            )
        topics[name] = ZkTopicImage(name, TopicZnode(topic_id, assignment), states)
    return ZkClusterImage(
        cluster_id=spec.cluster_id,
        brokers={},
        topics=topics,
        topic_configs={name: ConfigZnode(dict(spec.topic_configs)) for name in topics},
        broker_configs={name: ConfigZnode(dict(config)) for name, config in spec.broker_configs.items()},
        features=FeaturesZnode(
            FeatureZnodeStatus.ENABLED,
            {name: FinalizedFeature(level) for name, level in spec.features.items()},
        ),
        controller=None,
        controller_epoch=spec.controller_epoch,
        migration=None,
        migration_version=None,
    )


# --------------------------------------------------------------------------
# Writing
# --------------------------------------------------------------------------

def _image_creates(image: ZkClusterImage) -> Iterator[tuple[str, bytes]]:
    """(path, data) in parent-before-child order for every persistent znode of `image`."""
    for path in KAFKA_PERSISTENT_PATHS:
        yield path, b""
    if image.cluster_id is not None:
        yield paths.CLUSTER_ID_PATH, ClusterIdZnode(image.cluster_id).encode()
    if image.controller_epoch is not None:
        yield paths.CONTROLLER_EPOCH_PATH, ControllerEpochZnode(image.controller_epoch).encode()
    if image.features is not None:
        yield paths.FEATURES_PATH, image.features.encode()
    if image.controller is not None:
        yield paths.CONTROLLER_PATH, image.controller.encode()
    if image.migration is not None:
        yield paths.MIGRATION_PATH, image.migration.encode()
    for name, config in image.broker_configs.items():
        yield paths.config_path(paths.CONFIG_BROKERS, name), config.encode()
    for name, topic in image.topics.items():
        yield paths.topic_path(name), topic.assignment.encode()
        yield paths.topic_partitions_path(name), b""
        for partition in sorted(topic.assignment.partitions):
            yield paths.partition_path(name, partition), b""
            state = topic.partition_states.get(partition)
            if state is not None:
                yield paths.partition_state_path(name, partition), state.encode()
        config = image.topic_configs.get(name)
        if config is not None:
            yield paths.config_path(paths.CONFIG_TOPICS, name), config.encode()
    # Configs of topics that have no assignment znode (rare, but an image may hold them).
    for name, config in image.topic_configs.items():
        if name not in image.topics:
            yield paths.config_path(paths.CONFIG_TOPICS, name), config.encode()
    yield from _quota_creates(image)


def _quota_creates(image: ZkClusterImage) -> Iterator[tuple[str, bytes]]:
    """The client quota config znodes of `image`, parents first (a user's per-client
    znodes need the user's znode and its `clients` znode; /config/ips is not among
    the paths every cluster has)."""
    created: set[str] = set()
    if any(entity_path.startswith(paths.CONFIG_IPS + "/") for entity_path in image.quota_configs):
        created.add(paths.config_entity_type_path(paths.CONFIG_IPS))
        yield paths.config_entity_type_path(paths.CONFIG_IPS), b""
    for entity_path in sorted(image.quota_configs):
        parts = entity_path.split("/")
        if len(parts) == 4:
            user_path = paths.config_path(paths.CONFIG_USERS, parts[1])
            if user_path not in created and f"{paths.CONFIG_USERS}/{parts[1]}" not in image.quota_configs:
                created.add(user_path)
                yield user_path, ConfigZnode({}).encode()
            clients_path = paths.user_clients_path(parts[1])
            if clients_path not in created:
                created.add(clients_path)
                yield clients_path, b""
        path = paths.quota_config_path(entity_path)
        created.add(path)
        yield path, image.quota_configs[entity_path].encode()


def _parents(path: str) -> Iterator[str]:
    parts = path.strip("/").split("/")
    for end in range(1, len(parts)):
        yield "/" + "/".join(parts[:end])


def write_cluster_image(
    client: KazooClient,
    image: ZkClusterImage,
    *,
    batch_ops: int = DEFAULT_BATCH_OPS,
    timeout_s: float = DEFAULT_TIMEOUT_S,
) -> int:
    """Creates every persistent znode of `image` (all must be new, except the shared
    Kafka paths and their parents, which may exist). Returns the number of znodes
    created. Raises SeedError when a znode is already there."""
    if batch_ops < 1:
        raise ValueError("batch_ops must be >= 1")
    # Parents (/brokers, /config, /admin, /cluster) and the well-known paths may
    # already exist (a broker started first); create them one by one, idempotently.
    shared = set(KAFKA_PERSISTENT_PATHS)
    roots: list[str] = []
    for path in KAFKA_PERSISTENT_PATHS + (paths.CLUSTER_ID_PATH,):
        for parent in _parents(path):
            if parent not in roots:
                roots.append(parent)
    created = 0
    for path in roots + list(KAFKA_PERSISTENT_PATHS):
        try:
            client.create(path, b"")
            created += 1
        except NodeExistsError:
            pass

    in_flight: deque[tuple[Any, list[str]]] = deque()

    def settle_one() -> None:
        nonlocal created
        result, batch_paths = in_flight.popleft()
        outcome = result.get(timeout=timeout_s)
        for index, item in enumerate(outcome):
            if isinstance(item, BaseException) and not isinstance(item, RolledBackError):
                raise SeedError(f"could not create {batch_paths[index]}: {type(item).__name__}")
        created += len(batch_paths)

    transaction = client.transaction()
    batch_paths: list[str] = []
    for path, data in _image_creates(image):
        if path in shared:
            continue
        transaction.create(path, data)
        batch_paths.append(path)
        if len(batch_paths) >= batch_ops:
            in_flight.append((transaction.commit_async(), batch_paths))
            transaction, batch_paths = client.transaction(), []
            if len(in_flight) >= PIPELINE_DEPTH:
                settle_one()
    if batch_paths:
        in_flight.append((transaction.commit_async(), batch_paths))
    while in_flight:
        settle_one()
    return created


def seed_zookeeper(
    hosts: str,
    spec: SeedSpec,
    *,
    batch_ops: int = DEFAULT_BATCH_OPS,
    timeout_s: float = DEFAULT_TIMEOUT_S,
) -> ZkClusterImage:
    """Writes the cluster `spec` describes into an empty ZooKeeper at `hosts`;
    returns the image written (`spec_image(spec)`). SeedError if /cluster/id exists."""
    image = spec_image(spec)
    with _client(hosts, timeout_s) as client:
        if client.exists(paths.CLUSTER_ID_PATH) is not None:
            raise SeedError(f"{hosts} already holds a cluster ({paths.CLUSTER_ID_PATH} exists)")
        write_cluster_image(client, image, batch_ops=batch_ops, timeout_s=timeout_s)
    return image


# --------------------------------------------------------------------------
# Reading
# --------------------------------------------------------------------------

class _ZnodeStat(NamedTuple):
    version: int
    czxid: int
    num_children: int = 0


class _KazooReader:
    """Reads through a kazoo session, pipelined (~3k znodes/s: kazoo's connection
    thread handles one request per loop)."""

    def __init__(self, client: KazooClient, timeout_s: float) -> None:
        self._client = client
        self._timeout_s = timeout_s

    def children(self, path: str) -> list[str]:
        try:
            return sorted(self._client.get_children(path))
        except NoNodeError:
            return []

    def get_many(self, znode_paths: Iterable[str]) -> Iterator[tuple[str, bytes | None, _ZnodeStat | None]]:
        """(path, data, stat) for each path in order; (path, None, None) when missing."""
        in_flight: deque[tuple[str, Any]] = deque()

        def settle() -> tuple[str, bytes | None, _ZnodeStat | None]:
            path, result = in_flight.popleft()
            try:
                data, stat = result.get(timeout=self._timeout_s)
            except NoNodeError:
                return path, None, None
            return path, data if data is not None else b"", _ZnodeStat(stat.version, stat.czxid, stat.numChildren)

        for path in znode_paths:
            in_flight.append((path, self._client.get_async(path)))
            if len(in_flight) >= READ_PIPELINE_DEPTH:
                yield settle()
        while in_flight:
            yield settle()


# ZooKeeper's wire protocol (jute), the few messages a bulk reader needs.
_OP_GET_DATA = 4
_OP_GET_CHILDREN = 8
_OP_CLOSE_SESSION = -11
_ERR_NO_NODE = -101
_STAT = struct.Struct(">qqqqiiiqiiq")  # czxid mzxid ctime mtime version cversion aversion owner len children pzxid
_INT = struct.Struct(">i")
_REPLY_HEADER = struct.Struct(">iqi")  # xid, zxid, err
_MAX_FRAME_BYTES = 64 * 1024 * 1024
# Requests written before their answers are read: large enough to hide the round
# trip, small enough that neither side's socket buffers fill with the other waiting.
_WIRE_WINDOW = 1000


class ZkWireError(RuntimeError):
    """The bulk reader could not talk to ZooKeeper (connect failed, connection lost,
    an unexpected answer)."""


def _split_hosts(hosts: str) -> tuple[list[tuple[str, int]], str]:
    """"h1:p1,h2:p2/chroot" -> ([(h1, p1), (h2, p2)], "/chroot")."""
    servers, slash, chroot = hosts.partition("/")
    addresses = []
    for item in servers.split(","):
        host, colon, port = item.strip().rpartition(":")
        if not colon:
            host, port = item.strip(), "2181"
        addresses.append((host.strip("[]"), int(port)))
    return addresses, ("/" + chroot.rstrip("/")) if slash and chroot.strip("/") else ""


class _WireReader:
    """A read-only ZooKeeper session over a plain socket, pipelining GetData requests
    (tens of thousands of znodes/s where kazoo manages ~3k). Used for bulk reads only;
    everything else goes through kazoo. One thread, blocking, bounded by `timeout_s`
    per socket operation."""

    def __init__(self, hosts: str, timeout_s: float, session_timeout_ms: int = 30_000) -> None:
        addresses, self._chroot = _split_hosts(hosts)
        self._xid = 0
        self._buffer = bytearray()
        last_error: Exception | None = None
        for address in addresses:
            try:
                self._sock = socket.create_connection(address, timeout=timeout_s)
                break
            except OSError as exc:
                last_error = exc
        else:
            raise ZkWireError(f"cannot connect to ZooKeeper at {hosts}: {last_error}")
        try:
            # ConnectRequest: protocolVersion, lastZxidSeen, timeOut, sessionId, passwd, readOnly.
            body = struct.pack(">iqiq", 0, 0, session_timeout_ms, 0) + _INT.pack(16) + bytes(16) + b"\x00"
            self._sock.sendall(_INT.pack(len(body)) + body)
            reply = self._read_frame()
            if len(reply) < 20:
                raise ZkWireError("short ConnectResponse")
            _, _, session_id = struct.unpack_from(">iiq", reply, 0)
            if session_id == 0:
                raise ZkWireError("ZooKeeper refused the session")
        except OSError as exc:
            self._sock.close()
            raise ZkWireError(f"cannot open a session with ZooKeeper at {hosts}: {exc}") from None
        except BaseException:
            self._sock.close()
            raise

    def close(self) -> None:
        try:
            self._send([self._request(_OP_CLOSE_SESSION, b"")])
            self._read_reply()
        except (OSError, ZkWireError):
            pass  # the server expires the session by itself
        finally:
            self._sock.close()

    # -- framing ------------------------------------------------------------

    def _read_exact_into_buffer(self, size: int) -> None:
        while len(self._buffer) < size:
            try:
                chunk = self._sock.recv(max(65536, size - len(self._buffer)))
            except OSError as exc:
                raise ZkWireError(f"connection to ZooKeeper lost: {exc}") from None
            if not chunk:
                raise ZkWireError("ZooKeeper closed the connection")
            self._buffer += chunk

    def _read_frame(self) -> bytes:
        self._read_exact_into_buffer(4)
        (size,) = _INT.unpack_from(self._buffer, 0)
        if not 0 <= size <= _MAX_FRAME_BYTES:
            raise ZkWireError(f"bad frame size {size}")
        self._read_exact_into_buffer(4 + size)
        frame = bytes(self._buffer[4:4 + size])
        del self._buffer[:4 + size]
        return frame

    def _request(self, op: int, body: bytes) -> bytes:
        self._xid += 1
        payload = struct.pack(">ii", self._xid, op) + body
        return _INT.pack(len(payload)) + payload

    def _send(self, frames: list[bytes]) -> None:
        try:
            self._sock.sendall(b"".join(frames))
        except OSError as exc:
            raise ZkWireError(f"connection to ZooKeeper lost: {exc}") from None

    def _read_reply(self) -> tuple[int, int, bytes]:
        frame = self._read_frame()
        xid, _, err = _REPLY_HEADER.unpack_from(frame, 0)
        return xid, err, frame[_REPLY_HEADER.size:]

    def _path_body(self, path: str) -> bytes:
        encoded = (self._chroot + path if path != "/" or not self._chroot else self._chroot).encode("utf-8")
        return _INT.pack(len(encoded)) + encoded + b"\x00"  # watch = false

    # -- reads --------------------------------------------------------------

    def children(self, path: str) -> list[str]:
        self._send([self._request(_OP_GET_CHILDREN, self._path_body(path))])
        xid, err, body = self._read_reply()
        if xid != self._xid:
            raise ZkWireError(f"answer {xid} to request {self._xid}")
        if err == _ERR_NO_NODE:
            return []
        if err != 0:
            raise ZkWireError(f"GetChildren {path} failed with ZooKeeper error {err}")
        (count,) = _INT.unpack_from(body, 0)
        offset, names = 4, []
        for _ in range(max(count, 0)):
            (length,) = _INT.unpack_from(body, offset)
            names.append(body[offset + 4:offset + 4 + length].decode("utf-8"))
            offset += 4 + length
        return sorted(names)

    def get_many(self, znode_paths: Iterable[str]) -> Iterator[tuple[str, bytes | None, _ZnodeStat | None]]:
        """(path, data, stat) for each path in order; (path, None, None) when missing.
        ZooKeeper answers one session's requests in order, so replies match by position."""
        pending = list(znode_paths)
        for start in range(0, len(pending), _WIRE_WINDOW):
            window = pending[start:start + _WIRE_WINDOW]
            first_xid = self._xid + 1
            self._send([self._request(_OP_GET_DATA, self._path_body(path)) for path in window])
            for index, path in enumerate(window):
                xid, err, body = self._read_reply()
                if xid != first_xid + index:
                    raise ZkWireError(f"answer {xid} to request {first_xid + index}")
                if err == _ERR_NO_NODE:
                    yield path, None, None
                    continue
                if err != 0:
                    raise ZkWireError(f"GetData {path} failed with ZooKeeper error {err}")
                (length,) = _INT.unpack_from(body, 0)
                data = body[4:4 + length] if length >= 0 else b""
                stat = _STAT.unpack_from(body, 4 + max(length, 0))
                yield path, data, _ZnodeStat(version=stat[4], czxid=stat[0], num_children=stat[9])
def _decode(decoder: Callable[[bytes], T], path: str, data: bytes) -> T:
    try:
        return decoder(data)
    except ZnodeDecodeError as exc:
        raise ZnodeDecodeError(f"{path}: {exc}") from None


def _image_from(reader: _KazooReader | _WireReader) -> ZkClusterImage:
    def get_one(path: str) -> tuple[bytes, _ZnodeStat] | None:
        [(_, data, stat)] = list(reader.get_many([path]))
        return (data, stat) if data is not None and stat is not None else None

    def decode_one(decoder: Callable[[bytes], T], path: str) -> tuple[T, _ZnodeStat] | None:
        found = get_one(path)
        return (_decode(decoder, path, found[0]), found[1]) if found is not None else None

    cluster = decode_one(ClusterIdZnode.decode, paths.CLUSTER_ID_PATH)

    brokers: dict[int, BrokerRegistrationZnode] = {}
    broker_epochs: dict[int, int] = {}
    broker_names = [name for name in reader.children(paths.BROKER_IDS_PATH) if name.isdigit()]
    for path, data, stat in reader.get_many([paths.broker_path(int(n)) for n in broker_names]):
        if data is not None and stat is not None:  # a broker may go away between listing and reading
            broker_id = int(path.rsplit("/", 1)[1])
            brokers[broker_id] = _decode(BrokerRegistrationZnode.decode, path, data)
            broker_epochs[broker_id] = stat.czxid

    assignments: dict[str, TopicZnode] = {}
    topic_names = reader.children(paths.TOPICS_PATH)
    for path, data, _ in reader.get_many([paths.topic_path(n) for n in topic_names]):
        if data is not None:
            assignments[path.rsplit("/", 1)[1]] = _decode(TopicZnode.decode, path, data)

    state_paths = [
        (name, partition)
        for name, assignment in assignments.items()
        for partition in sorted(assignment.partitions)
    ]
    states: dict[str, dict[int, PartitionStateZnode]] = {name: {} for name in assignments}
    gets = reader.get_many([paths.partition_state_path(n, p) for n, p in state_paths])
    for (name, partition), (path, data, _) in zip(state_paths, gets):
        if data is not None:
            states[name][partition] = _decode(PartitionStateZnode.decode, path, data)
    topics = {
        name: ZkTopicImage(name, assignment, states[name]) for name, assignment in assignments.items()
    }

    def read_configs(entity_type: str) -> dict[str, ConfigZnode]:
        names = reader.children(paths.config_entity_type_path(entity_type))
        out: dict[str, ConfigZnode] = {}
        for path, data, _ in reader.get_many([paths.config_path(entity_type, n) for n in names]):
            if data is not None:
                out[path.rsplit("/", 1)[1]] = _decode(ConfigZnode.decode, path, data)
        return out

    quota_configs, user_client_parents = _read_quota_configs(reader)
    features = decode_one(FeaturesZnode.decode, paths.FEATURES_PATH)
    controller = decode_one(ControllerZnode.decode, paths.CONTROLLER_PATH)
    controller_epoch = decode_one(ControllerEpochZnode.decode, paths.CONTROLLER_EPOCH_PATH)
    migration = decode_one(MigrationZnode.decode, paths.MIGRATION_PATH)
    return ZkClusterImage(
        cluster_id=cluster[0].cluster_id if cluster else None,
        brokers=brokers,
        topics=topics,
        topic_configs=read_configs(paths.CONFIG_TOPICS),
        broker_configs=read_configs(paths.CONFIG_BROKERS),
        features=features[0] if features else None,
        controller=controller[0] if controller else None,
        controller_epoch=controller_epoch[0].epoch if controller_epoch else None,
        migration=migration[0] if migration else None,
        migration_version=migration[1].version if migration else None,
        broker_epochs=broker_epochs,
        quota_configs=quota_configs,
        user_client_parents=user_client_parents,
    )


def _quota_config(path: str, data: bytes) -> ConfigZnode:
    # A user znode Kafka created only as the parent of per-client znodes has no data.
    return ConfigZnode({}) if not data else _decode(ConfigZnode.decode, path, data)


def _read_quota_configs(reader: _KazooReader | _WireReader) -> tuple[dict[str, ConfigZnode], frozenset[str]]:
    """Every config znode under /config/users (with the users' per-client znodes),
    /config/clients and /config/ips, by entity path; and the users that have a
    `clients` child. Only users whose znode has children are listed again."""
    out: dict[str, ConfigZnode] = {}
    users_with_children: list[str] = []
    for entity_type in (paths.CONFIG_USERS, paths.CONFIG_CLIENTS, paths.CONFIG_IPS):
        names = reader.children(paths.config_entity_type_path(entity_type))
        for path, data, stat in reader.get_many([paths.config_path(entity_type, n) for n in names]):
            if data is None or stat is None:
                continue
            name = path.rsplit("/", 1)[1]
            out[f"{entity_type}/{name}"] = _quota_config(path, data)
            if entity_type == paths.CONFIG_USERS and stat.num_children > 0:
                users_with_children.append(name)
    parents: set[str] = set()
    for user in users_with_children:
        if paths.CONFIG_CLIENTS not in reader.children(paths.config_path(paths.CONFIG_USERS, user)):
            continue
        parents.add(user)
        clients = reader.children(paths.user_clients_path(user))
        znode_paths = [f"{paths.user_clients_path(user)}/{client}" for client in clients]
        for path, data, _ in reader.get_many(znode_paths):
            if data is not None:
                out[f"{paths.CONFIG_USERS}/{user}/{paths.CONFIG_CLIENTS}/{path.rsplit('/', 1)[1]}"] = \
                    _quota_config(path, data)
    return out, frozenset(parents)


def read_cluster_image(client: KazooClient, *, timeout_s: float = DEFAULT_TIMEOUT_S) -> ZkClusterImage:
    """Reads brokers (with their epochs), topics with assignments and partition states,
    topic and broker configs, client quota znodes (users, clients, ips), features,
    cluster id, controller, controller epoch and /migration (with its version) through
    an existing kazoo session (~3k znodes/s; `read_zookeeper` is an order of magnitude
    faster for big clusters)."""
    return _image_from(_KazooReader(client, timeout_s))


def read_zookeeper(hosts: str, *, timeout_s: float = DEFAULT_TIMEOUT_S) -> ZkClusterImage:
    """Reads the whole cluster like `read_cluster_image`, over its own short-lived
    session with pipelined wire-protocol reads (the bulk path for a migration's
    copy). Raises ZkWireError when ZooKeeper cannot be reached or drops the session."""
    reader = _WireReader(hosts, timeout_s)
    try:
        return _image_from(reader)
    finally:
        reader.close()


class _client:
    """A started KazooClient for the duration of a `with` block."""

    def __init__(self, hosts: str, timeout_s: float) -> None:
        self._client = KazooClient(hosts=hosts, timeout=10.0)
        self._timeout_s = timeout_s

    def __enter__(self) -> KazooClient:
        self._client.start(timeout=self._timeout_s)
        return self._client

    def __exit__(self, *exc_info: object) -> None:
        try:
            self._client.stop()
        finally:
            self._client.close()
