"""`kraftwerk metadata-quorum`: kafka-metadata-quorum.sh's commands (KIP-853's client side).

Owns the `metadata-quorum` subcommand of `kraftwerk`:
  describe --status | --replication [--human-readable]    DescribeQuorum (v2: directory ids, endpoints)
  add-controller [--dry-run]                               AddRaftVoter for the controller whose own
                                                           server.properties is --command-config
  remove-controller -i ID -d DIRECTORY_ID [--dry-run]      RemoveRaftVoter

Rules kept here:
- Flags, output and error texts are those of Apache Kafka 4.4.0's MetadataQuorumCommand. The
  checks run in its order: --command-config must exist (for every command), then the
  command's own checks, then the request. Its "terse" errors print the message alone; an
  error code from the quorum prints as its Admin client reports it, the exception class
  then the message (`org.apache.kafka.common.errors.DuplicateVoterException: ...`). Both
  exit 1. (Kafka also prints a Java stack trace after the latter; kraftwerk prints none.)
- The bootstrap options are accepted before the subcommand (Kafka's place) and after it
  (kraftwerk's other commands' place).
- Parsing the controller's properties, the uuid text and the output lines are pure functions;
  the network is one async function per command, bounded by --timeout-s. Writes go to the
  active controller and are sent again only when the answer is NOT_CONTROLLER (a failover),
  as Kafka's Admin client does.
"""

from __future__ import annotations

import argparse
import re
import sys
import time
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import trio

from cli import active_controller as shared
from protocol.api_keys import ApiKey
from protocol.errors import KAFKA_ERROR_MESSAGES, ErrorCode
from server.client import ClientError
from server.security.client_config import ClientSecurity, ClientSecurityError
from server.storage.meta_properties import (
    MetaPropertiesError,
    parse_properties,
    read_meta_properties,
    uuid_to_string,
)
from server.voters import Endpoint

EXIT_OK = 0
EXIT_FAILED = 1

CLUSTER_METADATA_TOPIC = "__cluster_metadata"
BROKER_ENDPOINT_TYPE = 1
ZERO_UUID = uuid.UUID(int=0)
DEFAULT_TIMEOUT_S = 30.0

# The Java exception class Kafka's Admin client raises for an error code
# (`Errors.forCode(code).exception(message)`), for the codes the three requests of this
# tool can be answered with. Any other code prints as the UNKNOWN_SERVER_ERROR class, which
# is what Kafka does for a code it does not know.
_ERRORS = "org.apache.kafka.common.errors."
EXCEPTION_CLASSES: Mapping[int, str] = {
    -1: "UnknownServerException",
    3: "UnknownTopicOrPartitionException",
    6: "NotLeaderOrFollowerException",
    7: "TimeoutException",
    8: "BrokerNotAvailableException",
    29: "TopicAuthorizationException",
    31: "ClusterAuthorizationException",
    35: "UnsupportedVersionException",
    41: "NotControllerException",
    42: "InvalidRequestException",
    74: "FencedLeaderEpochException",
    75: "UnknownLeaderEpochException",
    104: "InconsistentClusterIdException",
    126: "DuplicateVoterException",
    127: "VoterNotFoundException",
}


class TerseError(Exception):
    """Kafka's TerseException: the message is all the operator sees."""


class ApiError(Exception):
    """The quorum answered an error code (or the answer was unusable); printed as Kafka's
    Admin client exception: `org.apache.kafka.common.errors.<Class>: <message>`."""

    def __init__(self, java_class: str, message: str | None) -> None:
        super().__init__(java_class if message is None else f"{java_class}: {message}")

    @classmethod
    def from_code(cls, code: int, message: str | None) -> "ApiError":
        known = code if code in EXCEPTION_CLASSES else -1
        java_class, default = EXCEPTION_CLASSES[known], KAFKA_ERROR_MESSAGES[known]
        # Errors.exception(null) keeps the error's own text; an empty message stays empty.
        return cls(_ERRORS + java_class, default if message is None else message)


class JavaError(Exception):
    """A Java exception other than the Admin client's (a number or endpoint that does not
    parse): the tool prints its getMessage() alone."""


class UsageError(Exception):
    """Bad bootstrap options: argparse's usage error (exit 2)."""


class ReachError(Exception):
    """No answer within --timeout-s (kraftwerk's wording: Kafka's Admin client times out too)."""


# --------------------------------------------------------------------------
# Java's parsing, as the tool's checks see it
# --------------------------------------------------------------------------

_JAVA_INT = re.compile(r"[+-]?[0-9]+")
INT32_MIN, INT32_MAX = -(2**31), 2**31 - 1


def parse_java_int(text: str) -> int:
    """Integer.parseInt: no whitespace, no underscores, 32 bits. Java's NumberFormatException
    otherwise, which the tool does not make terse: it prints the message alone."""
    if _JAVA_INT.fullmatch(text) is None or not INT32_MIN <= int(text) <= INT32_MAX:
        raise JavaError(f'For input string: "{text}"')
    return int(text)


_URL_ALPHABET = {c: i for i, c in enumerate("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_")}


def _java_url_base64_decode(text: str) -> bytes:
    """java.util.Base64.getUrlDecoder().decode(text): padding optional, leftover bits not
    checked, and Java's IllegalArgumentException texts for what it refuses."""
    data = text.encode("latin-1", errors="replace")
    if len(data) == 1:
        raise ValueError("Input byte[] should at least have 2 bytes for base64 bytes")
    out = bytearray()
    bits = 0
    shift = 18
    position = 0
    while position < len(data):
        byte = data[position]
        position += 1
        value = _URL_ALPHABET.get(chr(byte))
        if value is None:
            if byte == ord("="):
                # '=' may end a unit of two characters ('==') or of three ('=').
                if shift == 6 and (position == len(data) or data[position] != ord("=")) or shift == 18:
                    raise ValueError("Input byte array has wrong 4-byte ending unit")
                if shift == 6:
                    position += 1
                break
            shown = byte - 256 if byte > 127 else byte  # Java bytes are signed
            raise ValueError(f"Illegal base64 character {format(shown, 'x') if shown >= 0 else '-' + format(-shown, 'x')}")
        bits |= value << shift
        shift -= 6
        if shift < 0:
            out += bytes(((bits >> 16) & 0xFF, (bits >> 8) & 0xFF, bits & 0xFF))
            shift, bits = 18, 0
    if shift == 6:
        out.append((bits >> 16) & 0xFF)
    elif shift == 0:
        out += bytes(((bits >> 16) & 0xFF, (bits >> 8) & 0xFF))
    elif shift == 12:
        raise ValueError("Last unit does not have enough valid bits")
    if position < len(data):
        raise ValueError(f"Input byte array has incorrect ending byte at {position}")
    return bytes(out)


def parse_kafka_uuid(text: str) -> uuid.UUID:
    """Kafka's Uuid.fromString, with its IllegalArgumentException texts (ValueError here)."""
    if len(text) > 24:
        raise ValueError(f"Input string with prefix `{text[:24]}` is too long to be decoded as a base64 UUID")
    raw = _java_url_base64_decode(text)
    if len(raw) != 16:
        raise ValueError(f"Input string `{text}` decoded as {len(raw)} bytes, which is not equal to the "
                         "expected 16 bytes of a base64-encoded UUID")
    return uuid.UUID(bytes=raw)


# --------------------------------------------------------------------------
# The controller to add: what its own server.properties says
# --------------------------------------------------------------------------

@dataclass(frozen=True, slots=True)
class NewController:
    node_id: int
    directory_id: uuid.UUID
    endpoints: tuple[Endpoint, ...]


_LISTENER = re.compile(r"^(.*)://\[?([0-9a-zA-Z\-%._:]*)\]?:(-?[0-9]+)")


def _csv(text: str) -> list[str]:
    """Kafka's Csv.parseCsvList: split on commas with the whitespace around them, drop empties."""
    if not text:
        return []
    return [item for item in re.split(r"\s*,\s*", text) if item]


def _listener_endpoints(text: str) -> list[Endpoint]:
    """`listeners`-style text into endpoints (names upper-cased as Kafka normalises them;
    an empty host stays empty here and becomes `localhost` where the tool uses it)."""
    endpoints = []
    for item in _csv(text):
        match = _LISTENER.match(item)
        if match is None:
            raise JavaError(f"Unable to parse {item} to a broker endpoint")
        endpoints.append(Endpoint(match[1].upper(), match[2], int(match[3])))
    return endpoints


def _java_split_first(text: str) -> str | None:
    """The first element of Java's `text.split(",")` (None when there is none: Java drops
    trailing empty strings, and a text of commas only splits into nothing)."""
    if "," not in text:
        return text
    parts = text.split(",")
    while parts and parts[-1] == "":
        parts.pop()
    return parts[0] if parts else None


def controller_id(properties: Mapping[str, str]) -> int:
    if "node.id" not in properties:
        raise TerseError("node.id not found in configuration file. Is this a valid controller configuration file?")
    node_id = parse_java_int(properties["node.id"])
    if node_id < 0:
        raise TerseError("node.id was negative in configuration file. Is this a valid controller configuration file?")
    if "controller" not in properties.get("process.roles", ""):
        raise TerseError("process.roles did not contain 'controller' in configuration file. Is this a valid "
                         "controller configuration file?")
    return node_id


def metadata_directory(properties: Mapping[str, str]) -> str:
    if "metadata.log.dir" in properties:
        return properties["metadata.log.dir"]
    if "log.dirs" in properties:
        first = _java_split_first(properties["log.dirs"].strip())
        if first is not None:
            return first
    raise TerseError("Neither metadata.log.dir nor log.dirs were found. Is this a valid controller configuration "
                     "file?")


def metadata_directory_id(directory: str) -> uuid.UUID:
    try:
        meta = read_meta_properties(directory)
    except (OSError, MetaPropertiesError):
        meta = None
    if meta is None:
        raise TerseError(f"Unable to read meta.properties from {directory}")
    if meta.directory_id is None:
        raise TerseError(f"No directory id found in {directory}")
    return parse_kafka_uuid(meta.directory_id)


def controller_endpoints(properties: Mapping[str, str]) -> tuple[Endpoint, ...]:
    """The endpoint of each controller listener name, from `listeners` overridden by
    `advertised.listeners`, in controller.listener.names order."""
    by_name: dict[str, Endpoint] = {}
    for endpoint in _listener_endpoints(properties.get("listeners", "")):
        by_name[endpoint.name] = endpoint
    for endpoint in _listener_endpoints(properties.get("advertised.listeners", "")):
        by_name[endpoint.name] = endpoint
    if "controller.listener.names" not in properties:
        raise TerseError("controller.listener.names was not found. Is this a valid controller configuration file?")
    chosen: dict[Endpoint, None] = {}  # an ordered set, as the tool's LinkedHashSet
    for name in properties["controller.listener.names"].split(","):
        name = name.upper()
        endpoint = by_name.get(name)
        if endpoint is None:
            raise TerseError(f"Cannot find information about controller listener name: {name}")
        chosen[Endpoint(endpoint.name, endpoint.host or "localhost", endpoint.port)] = None
    return tuple(chosen)


def read_new_controller(properties: Mapping[str, str]) -> NewController:
    """The controller add-controller adds, read in the tool's order (each check's error first)."""
    node_id = controller_id(properties)
    directory_id = metadata_directory_id(metadata_directory(properties))
    return NewController(node_id, directory_id, controller_endpoints(properties))


def added_line(controller: NewController, dry_run: bool) -> str:
    endpoints = ", ".join(map(str, controller.endpoints))
    return (f"{'DRY RUN of adding' if dry_run else 'Added'} controller {controller.node_id} with directory id "
            f"{uuid_to_string(controller.directory_id)} and endpoints: {endpoints}")


def removed_line(node_id: int, directory_id: uuid.UUID, dry_run: bool) -> str:
    return (f"{'DRY RUN of removing' if dry_run else 'Removed'} KRaft controller {node_id} with directory id "
            f"{uuid_to_string(directory_id)}")


# --------------------------------------------------------------------------
# describe: the quorum as Kafka's Admin client hands it to the tool
# --------------------------------------------------------------------------

@dataclass(frozen=True, slots=True)
class Replica:
    node_id: int
    directory_id: uuid.UUID
    log_end_offset: int
    last_fetch_ms: int | None  # None: unknown (-1 on the wire)
    last_caught_up_ms: int | None


@dataclass(frozen=True, slots=True)
class Quorum:
    leader_id: int
    leader_epoch: int
    high_watermark: int
    voters: tuple[Replica, ...]
    observers: tuple[Replica, ...]
    endpoints: Mapping[int, tuple[Endpoint, ...]]  # the response's Nodes: voters' listeners


def _replica(state) -> Replica:
    def known(value: int) -> int | None:
        return None if value == -1 else value
    return Replica(state.replica_id, state.replica_directory_id or ZERO_UUID, state.log_end_offset,
                   known(state.last_fetch_timestamp), known(state.last_caught_up_timestamp))


def quorum_from_response(response) -> Quorum:
    """A DescribeQuorum response as the Admin client reads it: errors become ApiError with
    its texts; -1 timestamps are unknown; a missing directory id (before v2) is zero."""
    if response.error_code != 0:
        raise ApiError.from_code(response.error_code, response.error_message)
    # What the Admin client says of an answer about something else than the one partition it asked for.
    topics = response.topics
    unknown = _ERRORS + "UnknownServerException"
    if len(topics) != 1:
        raise ApiError(unknown, f"DescribeMetadataQuorum received {len(topics)} topics when 1 was expected")
    topic = topics[0]
    if topic.topic_name != CLUSTER_METADATA_TOPIC:
        raise ApiError(unknown, f"DescribeMetadataQuorum received a topic with name {topic.topic_name} when "
                                f"{CLUSTER_METADATA_TOPIC} was expected")
    if len(topic.partitions) != 1:
        raise ApiError(unknown, f"DescribeMetadataQuorum received a topic {topic.topic_name} with "
                                f"{len(topic.partitions)} partitions when 1 was expected")
    partition = topic.partitions[0]
    if partition.partition_index != 0:
        raise ApiError(unknown, f"DescribeMetadataQuorum received a single partition with index "
                                f"{partition.partition_index} when 0 was expected")
    if partition.error_code != 0:
        raise ApiError.from_code(partition.error_code, partition.error_message)
    endpoints = {node.node_id: tuple(Endpoint(listener.name, listener.host, listener.port)
                                     for listener in node.listeners)
                 for node in response.nodes or ()}
    return Quorum(partition.leader_id, partition.leader_epoch, partition.high_watermark,
                  tuple(map(_replica, partition.current_voters)), tuple(map(_replica, partition.observers)),
                  endpoints)


def _leader(quorum: Quorum) -> Replica:
    for replica in quorum.voters:
        if replica.node_id == quorum.leader_id:
            return replica
    # Optional.get() on an empty Optional: the tool prints its message.
    raise JavaError("No value present")


def node_text(replica: Replica, endpoints: Sequence[Endpoint]) -> str:
    """The tool's Node.toString: the directory id only when it is not zero, the endpoints
    only when there are any."""
    text = f'{{"id": {replica.node_id}'
    if replica.directory_id != ZERO_UUID:
        text += f', "directoryId": "{uuid_to_string(replica.directory_id)}"'
    if endpoints:
        text += ', "endpoints": [' + ", ".join(f'"{endpoint}"' for endpoint in endpoints) + "]"
    return text + "}"


def _nodes_text(quorum: Quorum, replicas: Sequence[Replica]) -> str:
    # Endpoints are looked up by id alone, as the tool does (an observer that shares a
    # voter's id shows that voter's endpoints).
    return "[" + ", ".join(node_text(r, quorum.endpoints.get(r.node_id, ())) for r in replicas) + "]"


def status_lines(cluster_id: str, quorum: Quorum) -> list[str]:
    leader = _leader(quorum)
    # The first voter with the lowest log end offset (Stream.min keeps the first of equals).
    slowest = min(quorum.voters, key=lambda replica: replica.log_end_offset)
    max_lag = leader.log_end_offset - slowest.log_end_offset
    if slowest is leader:
        max_lag_time_ms = 0
    elif leader.last_caught_up_ms is not None and slowest.last_caught_up_ms is not None:
        max_lag_time_ms = leader.last_caught_up_ms - slowest.last_caught_up_ms
    else:
        max_lag_time_ms = -1
    return [
        f"ClusterId:              {cluster_id}",
        f"LeaderId:               {quorum.leader_id}",
        f"LeaderEpoch:            {quorum.leader_epoch}",
        f"HighWatermark:          {quorum.high_watermark}",
        f"MaxFollowerLag:         {max_lag}",
        f"MaxFollowerLagTimeMs:   {max_lag_time_ms}",
        f"CurrentVoters:          {_nodes_text(quorum, quorum.voters)}",
        f"CurrentObservers:       {_nodes_text(quorum, quorum.observers)}",
    ]


def _relative_ms(timestamp_ms: int, now_ms: int, what: str) -> int:
    if not (timestamp_ms > 0 and timestamp_ms <= now_ms):
        raise JavaError(f"Error while computing relative time, possible drift in system clock.\n"
                        f"Current timestamp is {now_ms}, {what} timestamp is {timestamp_ms}")
    return now_ms - timestamp_ms


def _timestamp_cell(value: int | None, human_readable: bool, now_ms: int, what: str) -> str:
    if value is None:
        return "-1"
    if human_readable:
        return f"{_relative_ms(value, now_ms, what)} ms ago"
    return str(value)


def table_lines(header: Sequence[str], rows: Sequence[Sequence[str]]) -> list[str]:
    """Kafka's ToolsUtils.prettyPrintTable: every cell left-aligned to its column's width
    and followed by a tab (the last one too)."""
    widths = [max([len(header[i])] + [len(row[i]) for row in rows]) for i in range(len(header))]
    return ["".join(cell.ljust(width) + "\t" for cell, width in zip(line, widths)) for line in [header, *rows]]


REPLICATION_HEADER = ("NodeId", "DirectoryId", "LogEndOffset", "Lag", "LastFetchTimestamp",
                      "LastCaughtUpTimestamp", "Status")


def replication_lines(quorum: Quorum, human_readable: bool, now_ms: int) -> list[str]:
    leader = _leader(quorum)
    ordered = [(leader, "Leader")]
    ordered += [(r, "Follower") for r in quorum.voters if r.node_id != quorum.leader_id]
    ordered += [(r, "Observer") for r in quorum.observers]
    rows = [[str(replica.node_id), uuid_to_string(replica.directory_id), str(replica.log_end_offset),
             str(leader.log_end_offset - replica.log_end_offset),
             _timestamp_cell(replica.last_fetch_ms, human_readable, now_ms, "last fetch"),
             _timestamp_cell(replica.last_caught_up_ms, human_readable, now_ms, "last caught up"), status]
            for replica, status in ordered]
    return table_lines(REPLICATION_HEADER, rows)


# --------------------------------------------------------------------------
# The network: one bounded exchange per command
# --------------------------------------------------------------------------

@dataclass(frozen=True, slots=True)
class Target:
    """Where the tool's requests go: the bootstrap address, whether it names controllers
    (--bootstrap-controller) or brokers, the client security, and the time bound."""
    bootstrap: tuple[tuple[str, int], ...]
    controllers: bool
    security: ClientSecurity | None
    timeout_s: float


async def call_active_controller(target: Target, api_key: int, body: dict):
    """One request to the active controller, followed across a failover until
    target.timeout_s (cli/active_controller.py); what cannot change by asking again
    becomes the exception Kafka's Admin client raises."""
    try:
        return await shared.call_active_controller(target.bootstrap, controllers=target.controllers,
                                                   security=target.security, timeout_s=target.timeout_s,
                                                   api_key=api_key, body=body)
    except shared.Unreachable as exc:
        raise ReachError(str(exc)) from None
    except shared.NotServed:
        raise ApiError.from_code(ErrorCode.UNSUPPORTED_VERSION, None) from None
    except shared.Refused as exc:
        raise ApiError.from_code(exc.code, exc.message) from None


async def describe(target: Target) -> tuple[str, Quorum]:
    """The cluster id (DescribeCluster) and the quorum (DescribeQuorum, the newest version
    both sides speak), both from the active controller, or from the bootstrap broker."""
    body = {"topics": [{"topic_name": CLUSTER_METADATA_TOPIC, "partitions": [{"partition_index": 0}]}]}
    if target.controllers:
        response = await call_active_controller(target, ApiKey.DESCRIBE_QUORUM, body)
        cluster = await _describe_cluster(target)
        return cluster, quorum_from_response(response)
    try:
        with trio.fail_after(target.timeout_s):
            async with await shared.connect_any(target.bootstrap, target.security, target.timeout_s) as client:
                cluster = await client.call(ApiKey.DESCRIBE_CLUSTER, {
                    "include_cluster_authorized_operations": False, "endpoint_type": BROKER_ENDPOINT_TYPE})
                if cluster.error_code != 0:
                    raise ApiError.from_code(cluster.error_code, cluster.error_message)
                response = await client.call(ApiKey.DESCRIBE_QUORUM, body)
    except (ClientError, trio.TooSlowError) as exc:
        raise ReachError(f"could not reach {shared.describe(target.bootstrap)} ({exc or 'timed out'})") from None
    return cluster.cluster_id, quorum_from_response(response)


async def _describe_cluster(target: Target) -> str:
    try:
        with trio.fail_after(target.timeout_s):
            async with await shared.connect_any(target.bootstrap, target.security, target.timeout_s) as client:
                reply = await client.call(ApiKey.DESCRIBE_CLUSTER, {
                    "include_cluster_authorized_operations": False, "endpoint_type": shared.CONTROLLER_ENDPOINT_TYPE},
                    min_version=1)
    except (ClientError, trio.TooSlowError) as exc:
        raise ReachError(f"could not reach {shared.describe(target.bootstrap)} ({exc or 'timed out'})") from None
    if reply.error_code != 0:
        raise ApiError.from_code(reply.error_code, reply.error_message)
    return reply.cluster_id


def _check_write(response) -> None:
    if response.error_code != 0:
        raise ApiError.from_code(response.error_code, response.error_message)


# --------------------------------------------------------------------------
# The command
# --------------------------------------------------------------------------

def _bootstrap(args) -> tuple[list[tuple[str, int]], bool]:
    server = getattr(args, "bootstrap_server", None)
    controller = getattr(args, "bootstrap_controller", None)
    if server and controller:
        raise UsageError("argument --bootstrap-controller: not allowed with argument --bootstrap-server")
    if not server and not controller:
        raise UsageError("one of the arguments --bootstrap-server --bootstrap-controller is required")
    try:
        return shared.parse_bootstrap(server or controller), controller is not None
    except ValueError as exc:
        raise UsageError(str(exc)) from None


def _command_properties(args) -> dict[str, str] | None:
    """--command-config's properties (None without the option); Kafka checks the file
    exists before anything else, for every command."""
    path = getattr(args, "command_config", None)
    if path is None:
        return None
    if not Path(path).exists():
        raise TerseError(f"Properties file {path} does not exist.")
    try:
        return parse_properties(Path(path).read_text(encoding="latin-1"))
    except (OSError, MetaPropertiesError) as exc:
        raise TerseError(f"Properties file {path} could not be read: {exc}") from None


def _target(args, bootstrap: list[tuple[str, int]], controllers: bool, properties: dict[str, str] | None) -> Target:
    try:
        security = ClientSecurity.from_properties(properties) if properties else None
    except ClientSecurityError as exc:
        raise TerseError(f"--command-config {args.command_config}: {exc}") from None
    return Target(tuple(bootstrap), controllers, security, getattr(args, "timeout_s", None) or DEFAULT_TIMEOUT_S)


def run(args) -> tuple[list[str], int]:
    """The lines to print on stdout and the exit status; raises TerseError, ApiError,
    ReachError or UsageError for the operator's stderr."""
    bootstrap, controllers = _bootstrap(args)
    properties = _command_properties(args)
    target = _target(args, bootstrap, controllers, properties)
    command = args.quorum_command
    if command == "describe":
        if args.status and args.replication:
            raise TerseError("Only one of --status or --replication should be specified with describe sub-command")
        if args.replication:
            cluster_id, quorum = trio.run(describe, target)
            return replication_lines(quorum, args.human_readable, int(time.time() * 1000)), EXIT_OK
        if args.status:
            if args.human_readable:
                raise TerseError("The option --human-readable is only supported along with --replication")
            cluster_id, quorum = trio.run(describe, target)
            return status_lines(cluster_id, quorum), EXIT_OK
        raise TerseError("One of --status or --replication must be specified with describe sub-command")
    if command == "add-controller":
        if properties is None:
            raise TerseError("You must supply the configuration file of the controller you are adding when using "
                             "add-controller.")
        controller = read_new_controller(properties)
        if not args.dry_run:
            response = trio.run(_add, target, controller)
            _check_write(response)
        return [added_line(controller, args.dry_run)], EXIT_OK
    if command == "remove-controller":
        if args.controller_id < 0:
            raise TerseError(f"Invalid negative --controller-id: {args.controller_id}")
        try:
            directory_id = parse_kafka_uuid(args.controller_directory_id)
        except ValueError as exc:
            raise TerseError(f"Failed to parse --controller-directory-id: {exc}") from None
        if not args.dry_run:
            response = trio.run(call_active_controller, target, ApiKey.REMOVE_RAFT_VOTER, {
                "cluster_id": None, "voter_id": args.controller_id, "voter_directory_id": directory_id})
            _check_write(response)
        return [removed_line(args.controller_id, directory_id, args.dry_run)], EXIT_OK
    raise TerseError(f"Unknown command: {command}")


async def _add(target: Target, controller: NewController):
    return await call_active_controller(target, ApiKey.ADD_RAFT_VOTER, {
        "cluster_id": None,
        "timeout_ms": int(target.timeout_s * 1000),
        "voter_id": controller.node_id,
        "voter_directory_id": controller.directory_id,
        "listeners": [{"name": e.name, "host": e.host, "port": e.port} for e in controller.endpoints],
        # v1: answer once the new voter set is committed (v0 always does).
        "ack_when_committed": True,
    })


def cmd_metadata_quorum(args) -> int:
    try:
        lines, status = run(args)
    except (TerseError, ApiError, JavaError) as exc:
        print(exc, file=sys.stderr)
        return EXIT_FAILED
    except ReachError as exc:
        print(f"Error: {exc}", file=sys.stderr)
        return EXIT_FAILED
    except UsageError as exc:
        args.quorum_parser.error(str(exc))
    for line in lines:
        print(line)
    return status


def _bootstrap_options(parser: argparse.ArgumentParser) -> None:
    # SUPPRESS: an option given before the subcommand is not overwritten by the
    # subcommand's default, so both places work.
    parser.add_argument("--bootstrap-server", default=argparse.SUPPRESS,
                        help="A comma-separated list of host:port pairs to use for establishing the connection "
                             "to the Kafka cluster.")
    parser.add_argument("--bootstrap-controller", default=argparse.SUPPRESS,
                        help="A comma-separated list of host:port pairs to use for establishing the connection "
                             "to the Kafka controllers.")
    parser.add_argument("--command-config", default=argparse.SUPPRESS, metavar="FILE",
                        help="Property file containing configs to be passed to Admin Client. For add-controller, "
                             "the file is used to specify the controller properties as well.")
    parser.add_argument("--timeout-s", type=float, default=argparse.SUPPRESS,
                        help=f"give up after this many seconds (default {DEFAULT_TIMEOUT_S:g})")


def add_parsers(sub: argparse._SubParsersAction) -> None:
    """Registers `metadata-quorum` on the `kraftwerk` command."""
    quorum = sub.add_parser("metadata-quorum", help="describe the metadata quorum, add and remove controllers "
                                                    "(like kafka-metadata-quorum.sh)",
                            description="This tool describes kraft metadata quorum status.")
    _bootstrap_options(quorum)
    quorum_sub = quorum.add_subparsers(dest="quorum_command", required=True)
    describe_parser = quorum_sub.add_parser("describe", help="Describe the metadata quorum info")
    _bootstrap_options(describe_parser)
    describe_parser.add_argument("--status", action="store_true", help="A short summary of the quorum status and "
                                 "the other provides detailed information about the status of replication.")
    describe_parser.add_argument("--replication", action="store_true",
                                 help="Detailed information about the status of replication")
    describe_parser.add_argument("--human-readable", action="store_true", help="Human-readable output")
    add = quorum_sub.add_parser("add-controller", help="Add a controller to the KRaft controller cluster")
    _bootstrap_options(add)
    add.add_argument("--dry-run", action="store_true",
                     help="True if we should print what would be done, but not do it.")
    remove = quorum_sub.add_parser("remove-controller", help="Remove a controller from the KRaft controller cluster")
    _bootstrap_options(remove)
    remove.add_argument("--controller-id", "-i", type=int, required=True, help="The id of the controller to remove.")
    remove.add_argument("--controller-directory-id", "-d", required=True,
                        help="The directory ID of the controller to remove.")
    remove.add_argument("--dry-run", action="store_true",
                        help="True if we should print what would be done, but not do it.")
    quorum.set_defaults(func=cmd_metadata_quorum, quorum_parser=quorum)
