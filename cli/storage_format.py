"""`kraftwerk storage format`: Kafka 4.4.0's kafka-storage.sh format (kafka.tools.StorageTool).

Owns: the dynamic-quorum flags (KIP-853: `--standalone`, `--no-initial-controllers`,
`--initial-controllers`), which kraft.version and voter set a directory is formatted
with, what it prints, and what it writes: meta.properties for every node, and for a
controller the bootstrap snapshot (server/storage/bootstrap.py).

Rules kept here (Kafka's, in Kafka's order, so the first refusal is the one Kafka gives):
- The three flags exclude each other (an argparse group; a clash exits 1 as Kafka's does).
- A dynamic quorum is one whose `controller.quorum.voters` is empty; kraft.version is then 1
  by default, else 0, and `--feature kraft.version=N` must agree (cli/release_tools.py).
- voters + `--standalone`/`--initial-controllers` is refused before `--initial-controllers`
  is parsed; `--standalone` needs a controller; a controller without voters needs one flag.
- `--standalone`: this node, its first advertised controller listener (no host:
  `localhost`), a fresh directory id, which meta.properties gets too. `--initial-controllers`
  naming this node: that entry's directory id goes into meta.properties.
- Brokers get meta.properties only.

Where kraftwerk differs (docs/kip-differences.md): a controller with neither
`controller.quorum.voters` nor `controller.quorum.bootstrap.servers` is a quorum of itself
(Kafka refuses that configuration); formatted without a flag it is static (kraft.version 0)
as before KIP-853, and with a flag it is dynamic. A bad `--initial-controllers` is a clean
`Error: <Kafka's message>` (Kafka prints a stack trace); errors carry kraftwerk's `Error: `
prefix; a missing process.roles means controller (kraftwerk's default), not Kafka's
"legacy cluster" refusal.
"""

from __future__ import annotations

import argparse
import base64
import sys
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from protocol.records import MetadataRecord
from protocol.schema import Message
from server.config import ServerConfig, load_properties
from server.voters import KRAFT_VERSION_MAX, KRAFT_VERSION_MIN, Endpoint, Voter, VoterSet
from server.storage.bootstrap import write_bootstrap_snapshot
from server.storage.dynamic_voters import DynamicVoter, parse_dynamic_voters, standalone_voter
from server.storage.meta_properties import uuid_to_string

EXIT_FAILED = 1

VOTERS_AND_DYNAMIC_FLAG = (
    "You cannot specify controller.quorum.voters and format the node with --initial-controllers or "
    "--standalone. If you want to use dynamic quorum, please remove controller.quorum.voters and specify "
    "controller.quorum.bootstrap.servers instead.")
STANDALONE_ON_BROKER = "You can only use --standalone on a controller."
CONTROLLER_NEEDS_A_FLAG = (
    "Because controller.quorum.voters is not set on this controller, you must specify one of the following: "
    "--standalone, --initial-controllers, or --no-initial-controllers.")

# Formatter$DirectoryType descriptions.
STATIC_METADATA_DIRECTORY = "metadata directory"
DYNAMIC_METADATA_DIRECTORY = "dynamic metadata directory"
DYNAMIC_METADATA_VOTER_DIRECTORY = "dynamic metadata voter directory"


class StorageFormatError(ValueError):
    """`storage format` refuses; the message is Kafka's where Kafka has one."""


# --------------------------------------------------------------------------
# Flags
# --------------------------------------------------------------------------

def add_quorum_flags(parser: argparse.ArgumentParser) -> None:
    """KIP-853's three flags, mutually exclusive. A clash exits 1, as kafka-storage does
    (argparse's usual 2 stays for every other usage error)."""
    group = parser.add_mutually_exclusive_group()
    group.add_argument("--standalone", "-s", action="store_true",
                       help="Used to initialize a controller as a single-node dynamic quorum.")
    group.add_argument("--no-initial-controllers", "-N", action="store_true",
                       help="Used to initialize a server without a dynamic quorum topology.")
    group.add_argument("--initial-controllers", "-I", metavar="INITIAL_CONTROLLERS",
                       help="Used to initialize a server with a specific dynamic quorum topology: a "
                            "comma-separated list of id@hostname:port:directory (the same on every node)")
    usage_error = parser.error

    def error(message: str):
        if "not allowed with argument" in message:
            parser.print_usage(sys.stderr)
            parser.exit(EXIT_FAILED, f"{parser.prog}: error: {message}\n")
        usage_error(message)

    parser.error = error  # type: ignore[method-assign]


# --------------------------------------------------------------------------
# The plan: which quorum, which voters, which words
# --------------------------------------------------------------------------

@dataclass(frozen=True, slots=True)
class QuorumPlan:
    """What the quorum flags and the configuration decide, before any level is checked."""

    dynamic_quorum: bool
    # The initial voters (--standalone / --initial-controllers), by node id; None without.
    voters: tuple[DynamicVoter, ...] | None

    def directory_type(self, node_id: int) -> str:
        if self.voters is None:
            return STATIC_METADATA_DIRECTORY
        if any(voter.node_id == node_id for voter in self.voters):
            return DYNAMIC_METADATA_VOTER_DIRECTORY
        return DYNAMIC_METADATA_DIRECTORY

    def own_directory_id(self, node_id: int) -> uuid.UUID | None:
        for voter in self.voters or ():
            if voter.node_id == node_id:
                return voter.directory_id
        return None


def _raw_hosts(text: str | None) -> dict[str, str]:
    """Listener name -> host as written (empty when the listener names no host)."""
    hosts: dict[str, str] = {}
    for item in (text or "").split(","):
        name, sep, rest = item.strip().partition("://")
        if sep:
            hosts.setdefault(name.strip().upper(), rest.rpartition(":")[0])
    return hosts


def standalone_address(config: ServerConfig, raw_props: dict[str, str]) -> tuple[str | None, int]:
    """Host (None when the listener names none) and port of the first advertised
    controller listener, as Kafka's effectiveAdvertisedControllerListeners orders them:
    advertised ones first, then the bound ones not advertised."""
    names = set(config.controller_listener_names) or {config.listener.name}
    advertised = [item for item in config.advertised_listeners if item.name in names]
    bound = [item for item in config.listeners
             if item.name in names and all(other.name != item.name for other in advertised)]
    candidates = [(item, "advertised.listeners") for item in advertised] + [(item, "listeners") for item in bound]
    if not candidates:
        raise StorageFormatError("No controller listeners found.")
    listener, key = candidates[0]
    written = _raw_hosts(raw_props.get(key)).get(listener.name.upper())
    host = None if written == "" else listener.host
    return host, listener.port


def plan_quorum(config: ServerConfig, raw_props: dict[str, str], *, standalone: bool,
                no_initial_controllers: bool, initial_controllers: str | None,
                new_directory_id=uuid.uuid4) -> QuorumPlan:
    """StorageTool.runFormatCommand's quorum checks, in its order."""
    is_controller = not config.is_broker
    has_voters = bool(config.quorum_voters)
    flagged = standalone or no_initial_controllers or initial_controllers is not None
    # kraftwerk: a controller with neither voters nor bootstrap servers runs alone; it is
    # static unless a KIP-853 flag asks for a dynamic quorum (Kafka refuses the config).
    alone = is_controller and not has_voters and not config.quorum_bootstrap_servers and not flagged
    dynamic = not has_voters and not alone
    if has_voters and (initial_controllers is not None or standalone):
        raise StorageFormatError(VOTERS_AND_DYNAMIC_FLAG)
    voters = parse_dynamic_voters(initial_controllers) if initial_controllers is not None else None
    if standalone:
        if not is_controller:
            raise StorageFormatError(STANDALONE_ON_BROKER)
        host, port = standalone_address(config, raw_props)
        voters = (standalone_voter(config.node_id, host, port, new_directory_id()),)
    if not no_initial_controllers and is_controller and dynamic and voters is None:
        raise StorageFormatError(CONTROLLER_NEEDS_A_FLAG)
    return QuorumPlan(dynamic, voters)


def bootstrap_voters(voters: Sequence[DynamicVoter], listener_name: str) -> VoterSet:
    """The VotersRecord's set: each voter on the controller listener, kraft.version 0-1."""
    return VoterSet(tuple(Voter(voter.node_id, voter.directory_id, (Endpoint(listener_name, voter.host, voter.port),),
                                KRAFT_VERSION_MIN, KRAFT_VERSION_MAX)
                          for voter in voters))


def in_kafka_order(records: Sequence[MetadataRecord]) -> list[MetadataRecord]:
    """Kafka's BootstrapMetadata.fromVersions order: metadata.version, then the other
    FeatureLevelRecords by feature name; the rest (SCRAM credentials) after them, as given."""
    features = [item for item in records if item.message.name == "FeatureLevelRecord"]
    others = [item for item in records if item.message.name != "FeatureLevelRecord"]
    first = [item for item in features if item.data["name"] == "metadata.version"]
    rest = sorted((item for item in features if item.data["name"] != "metadata.version"),
                  key=lambda item: item.data["name"])
    return first + rest + others


# --------------------------------------------------------------------------
# Kafka's "Bootstrap metadata: BootstrapMetadata(...)" line (generated toString forms)
# --------------------------------------------------------------------------

def _java_value(field_type: str, value) -> str:
    if value is None:
        return "null"
    if field_type == "string":
        return f"'{value}'"
    if field_type == "bool":
        return "true" if value else "false"
    if field_type == "bytes":
        return "[" + ", ".join(str(b - 256 if b > 127 else b) for b in bytes(value)) + "]"
    if field_type == "uuid":
        return base64.urlsafe_b64encode(value.bytes).decode().rstrip("=")
    return str(value)


def _java_struct(name: str, fields, data) -> str:
    parts = []
    for field in fields:
        value = data[field.attr] if field.attr in data else None
        camel = field.name[:1].lower() + field.name[1:]
        if field.is_array:
            if value is None:
                shown = "null"
            elif field.is_struct:
                shown = "[" + ", ".join(_java_struct(field.element_type, field.fields, item) for item in value) + "]"
            else:
                shown = "[" + ", ".join(_java_value(field.element_type, item) for item in value) + "]"
        elif field.is_struct:
            shown = _java_struct(field.type, field.fields, value)
        else:
            shown = _java_value(field.type, value)
        parts.append(f"{camel}={shown}")
    return f"{name}({', '.join(parts)})"


def java_record_string(item: MetadataRecord) -> str:
    message: Message = item.message
    return f"ApiMessageAndVersion({_java_struct(message.name, message.fields, item.data)} at version {item.version})"


def bootstrap_metadata_line(records: Sequence[MetadataRecord], metadata_version_level: int) -> str:
    return ("Bootstrap metadata: BootstrapMetadata(records=[" + ", ".join(java_record_string(r) for r in records)
            + f"], metadataVersionLevel={metadata_version_level}, source=format command)")


# --------------------------------------------------------------------------
# Writing
# --------------------------------------------------------------------------

def write_formatted_directory(config: ServerConfig, directory: Path, plan: QuorumPlan,
                              records: Sequence[MetadataRecord], kraft_version: int) -> uuid.UUID | None:
    """A controller's bootstrap snapshot (kraft.version, and the voters when named).
    Returns the directory id meta.properties must carry (this node's voter entry), or
    None for a fresh one. The caller writes meta.properties after this, so a crash
    between the two leaves a directory that is not formatted yet."""
    if not config.is_broker:
        voters = None
        if plan.voters is not None and kraft_version >= 1:
            voters = bootstrap_voters(plan.voters, config.controller_listener_name)
        write_bootstrap_snapshot(directory, records, kraft_version=kraft_version, voters=voters)
    return plan.own_directory_id(config.node_id)


def raw_properties(config_path: str | None, overrides: dict[str, str]) -> dict[str, str]:
    """The properties as written (file, then overrides), for what parsing loses: a
    listener written without a host."""
    props: dict[str, str] = {}
    if config_path is not None:
        props.update(load_properties(Path(config_path).read_text()))
    props.update(overrides)
    return props


def directory_id_string(value: uuid.UUID) -> str:
    return uuid_to_string(value)
