"""`kraftwerk`: the command line, shaped like Kafka's own tools.

Owns: argument parsing and output for
  kraftwerk controller --config FILE            run a controller
  kraftwerk storage format|random-uuid|version-mapping|feature-dependencies
                                                prepare a metadata directory
  kraftwerk storage recover                     truncate a damaged metadata log
  kraftwerk features describe|upgrade|downgrade|disable|version-mapping|feature-dependencies
                                                like kafka-features.sh (cli/release_tools.py)
  kraftwerk metadata-quorum describe|add-controller|remove-controller
                                                like kafka-metadata-quorum.sh (cli/quorum_tools.py)
  kraftwerk dump-log|metadata-shell             the metadata log read offline (cli/metadata_tools.py)
  kraftwerk demo                                a local controller plus an upgrade story

Exit codes scripts can trust: 0 success, 1 the operation failed (the message
says why and what to do), 2 bad usage.
"""

from __future__ import annotations

import argparse
import gc
import shlex
import shutil
import signal
import sys
import time
from dataclasses import replace
from pathlib import Path

import trio
from kazoo.client import KazooClient
from kazoo.exceptions import NoNodeError

from cli import local_cluster as lc
from cli.active_controller import NotServed, Refused, Unreachable, call_active_controller, connect_any
from cli.active_controller import describe as describe_bootstrap
from cli.active_controller import parse_bootstrap
from cli.local_cluster import (
    BROKER_USER,
    CONTROLLER_USER,
    NODE_MECHANISM,
    OPERATOR_MECHANISM,
    OPERATOR_USER,
    LocalClusterError,
    SecureLocalCluster,
    grow_quorum,
    stop_added_controllers,
)
from cli.metadata_tools import add_parsers as add_metadata_tool_parsers
from cli.node_process import StopSignals, listener_refusal, refusal_message, serve_until_stopped
from server.collector import use_serving_thresholds
from server.net.listener import ListenerBindError
from cli.migration_story import MigrationCluster, MigrationStoryError
from cli.quorum_tools import add_parsers as add_quorum_parsers
from cli import storage_format as sf
from cli.release_tools import (
    add_feature_subcommands,
    format_feature_levels,
    parse_feature_level,
    release_version_updates,
)
from cli.upgrade_story import LocalCluster, StoryError, UpgradeStory
from cli.zk_broker import add_arguments as add_zk_broker_arguments
from cli.zk_broker import run as run_zk_broker
from pipeline.fake_fleet import fake_fleet_command
from protocol.apis.describe_migration import API_KEY as DESCRIBE_MIGRATION_API_KEY
from protocol.errors import error_name
from protocol.registry import api_name
from server.client import ClientError
from server.config import load_config, load_properties
from server.controller.commands import SAFE_DOWNGRADE, UNSAFE_DOWNGRADE, UPGRADE, bootstrap_records
from server.controller.features import (
    find_metadata_version,
    metadata_version_from_level,
    metadata_version_from_name,
)
from server.controller.scram_commands import bootstrap_scram_records
from server.observability import Event, configure_logging, get_logger
from server.raft.quorum_state import QuorumStateError
from server.releases import release
from server.security.client_config import ClientSecurity, ClientSecurityError
from server.storage.bootstrap import METADATA_LOG_DIR_NAME
from server.storage.log import RECOVER_HINT, CorruptLogError, LogConfig, MetadataLog
from server.storage.meta_properties import (
    MetaProperties,
    parse_uuid_string,
    random_uuid_string,
    read_meta_properties,
    write_meta_properties,
)
from server.zk import paths as zp
from server.zk.process import ZooKeeperStartError, zookeeper_missing
from server.zk.seed import SeedSpec
from streams.cli import add_arguments as add_probe_arguments
from streams.cli import run as run_probe_matrix

EXIT_OK = 0
EXIT_FAILED = 1
EXIT_USAGE = 2

GRACEFUL_RESIGN_TIMEOUT_S = 2.0
CONTROLLED_SHUTDOWN_TIMEOUT_S = 10.0


class CommandError(Exception):
    """An operation failed; the message is for the operator."""


# --------------------------------------------------------------------------
# controller
# --------------------------------------------------------------------------

def _overrides(args) -> dict[str, str]:
    props: dict[str, str] = {}
    if getattr(args, "node_id", None) is not None:
        props["node.id"] = str(args.node_id)
    if getattr(args, "listener", None):
        props["listeners"] = args.listener if "://" in args.listener else f"CONTROLLER://{args.listener}"
    if getattr(args, "log_dir", None):
        props["metadata.log.dir"] = args.log_dir
    if getattr(args, "release", None):
        props["kraftwerk.release"] = args.release
    for item in getattr(args, "override", None) or []:
        key, sep, value = item.partition("=")
        if not sep:
            raise CommandError(f"--override expects key=value, got {item!r}")
        props[key] = value
    return props


def _load_config(args):
    if args.config and not Path(args.config).exists():
        raise CommandError(f"config file {args.config} does not exist")
    try:
        config = load_config(args.config, _overrides(args))
    except ValueError as exc:
        raise CommandError(f"bad configuration: {exc}") from None
    if config.release is not None:
        try:
            release(config.release)
        except ValueError as exc:
            raise CommandError(str(exc)) from None
    return config


def _first_leaf(group: BaseException) -> BaseException:
    while isinstance(group, BaseExceptionGroup):
        group = group.exceptions[0]
    return group


def cmd_broker(args) -> int:
    if args.zookeeper:
        return run_zk_broker(args)

    # A stop signal from here on is noted, not fatal: a node stopped while it loads still exits 0.
    with StopSignals() as early:
        # deferred import: a node loads the whole request path (~0.3 s); the client commands
        # (storage, features, metadata-quorum) start without it.
        from server.broker.lifecycle import BrokerFatalError
        from server.nodes.broker import BrokerNode

        config = _load_config(args)
        if not config.is_broker:
            config = replace(config, process_roles=("broker",))
        node = _open_node(BrokerNode, config)

        async def controlled_shutdown() -> None:
            # The controller fences the broker on purpose, then it stops.
            await node.shutdown(CONTROLLED_SHUTDOWN_TIMEOUT_S)

        return _serve_node(node, args.port_file, controlled_shutdown, BrokerFatalError, early)


def _open_node(node_class, config):
    """A controller or broker node with its storage opened (start-up errors become
    operator messages)."""
    # deferred import: only the node commands reach here; see cmd_broker.
    from server.nodes.startup import StartupError

    # A node configures logging once, for its lifetime: its loggers are built once.
    configure_logging(config.log_level, cache_loggers=True)
    try:
        node = node_class(config)
    except ValueError as exc:  # a configuration the node cannot serve (e.g. an unknown SASL mechanism)
        raise CommandError(f"bad configuration: {exc}") from None

    try:
        node.open()
    except StartupError as exc:
        raise CommandError(str(exc)) from None
    except CorruptLogError as exc:
        # Damaged durable state: one structured line for the log pipeline, the
        # message (with the way out) for the operator, exit 1 — no traceback, and
        # a supervisor that restarts the node gets the same refusal each time.
        get_logger("storage").error(Event.STORAGE_CORRUPTION_DETECTED, path=exc.path, position=exc.position,
                                    base_offset=exc.offset, error=str(exc))
        raise CommandError(str(exc)) from None
    except QuorumStateError as exc:
        get_logger("raft").error(Event.QUORUM_STATE_INVALID, error=str(exc))
        raise CommandError(str(exc)) from None
    return node


def _serve_node(node, port_file: str | None, before_stop, fatal: type[BaseException], early: StopSignals) -> int:
    """Runs `node` until SIGINT/SIGTERM (then `before_stop()`, bounded by its own
    timeout; cli/node_process.py) or until it ends by itself; a `fatal` error becomes a
    non-zero exit with its message (KIP-778 stops), and so does a listener that cannot
    bind its address."""
    def started(port) -> None:
        # What exists once the node serves (modules, the served table, the image,
        # the listeners) lives as long as the process: moved out of the collector's
        # generations, no later collection scans it again. Reference counting still
        # frees any of it that is dropped; only a reference cycle among these
        # objects would outlive its use, once, bounded by the start-up heap.
        gc.freeze()
        if port_file:
            Path(port_file).write_text(f"{port}\n")

    use_serving_thresholds()
    try:
        trio.run(serve_until_stopped, node.run, before_stop, started, early, node.config.node_id)
    except (BaseExceptionGroup, ListenerBindError) as error:
        refusal = listener_refusal(error)
        if refusal is not None:
            raise CommandError(refusal_message(refusal)) from None
        if not isinstance(error, BaseExceptionGroup):
            raise
        matched = error.subgroup(fatal)
        if matched is None:
            raise
        raise CommandError(str(_first_leaf(matched))) from None
    return EXIT_OK


def cmd_controller(args) -> int:
    # A stop signal from here on is noted, not fatal: see cmd_broker.
    with StopSignals() as early:
        # deferred import: a node loads the whole request path; see cmd_broker.
        from server.controller.replayer import UnsupportedFinalizedLevelError
        from server.nodes.controller import ControllerNode

        node = _open_node(ControllerNode, _load_config(args))

        async def resign() -> None:
            if node.migration is not None:
                # KIP-866: a clean shutdown writes what ZooKeeper still lacks first, so a
                # rollback to ZooKeeper loses nothing that was committed.
                await node.migration.drain(MIGRATION_DRAIN_TIMEOUT_S)
            # A leader that stops on purpose tells the quorum (EndQuorumEpoch), so the others
            # elect a new leader at once instead of after a fetch timeout.
            with trio.move_on_after(GRACEFUL_RESIGN_TIMEOUT_S):
                await node.raft_driver.resign()

        # KIP-778: the quorum finalized a level this software cannot run; the loop already
        # logged it and resigned leadership: say so and exit non-zero.
        return _serve_node(node, args.port_file, resign, UnsupportedFinalizedLevelError, early)


# --------------------------------------------------------------------------
# storage
# --------------------------------------------------------------------------

def cmd_storage_random_uuid(args) -> int:
    print(random_uuid_string())
    return EXIT_OK


def _parse_metadata_version(text: str) -> int:
    if text.isdigit():
        if find_metadata_version(int(text)) is None:
            raise CommandError(f"unknown metadata.version level {text}")
        return int(text)
    try:
        return metadata_version_from_name(text).level
    except ValueError:
        raise CommandError(f"unknown metadata.version {text!r} (names look like 3.7-IV4)") from None


def _parse_feature_levels(items: list[str] | None) -> dict[str, int]:
    levels: dict[str, int] = {}
    for item in items or []:
        name, sep, value = item.partition("=")
        if not sep or not value.strip().lstrip("-").isdigit():
            raise CommandError(f"--feature expects name=level, got {item!r}")
        if name in levels:
            raise CommandError(f"feature {name} given twice")
        levels[name.strip()] = int(value)
    return levels


def cmd_storage_format(args) -> int:
    # Kafka 4.4's StorageTool, KIP-853's quorum flags included (cli/storage_format.py).
    config = _load_config(args)
    configure_logging(config.log_level)
    try:
        parse_uuid_string(args.cluster_id)
    except ValueError as exc:
        raise CommandError(f"--cluster-id {args.cluster_id!r} is not a Kafka uuid ({exc}); "
                           "get one with `kraftwerk storage random-uuid`") from None
    try:
        for item in args.feature or ():
            parse_feature_level(item)
        plan = sf.plan_quorum(config, sf.raw_properties(args.config, _overrides(args)),
                              standalone=args.standalone, no_initial_controllers=args.no_initial_controllers,
                              initial_controllers=args.initial_controllers,
                              new_directory_id=lambda: parse_uuid_string(random_uuid_string()))
        # Kafka's Formatter rules and texts (KIP-1022): the release, the features' levels
        # and their dependencies.
        level, feature_levels = format_feature_levels(
            args.metadata_version, args.feature, unstable_enabled=config.unstable_feature_versions_enable,
            dynamic_quorum=plan.dynamic_quorum)
        # SCRAM users of the new cluster (Kafka's --add-scram): UserScramCredentialRecords
        # after the feature levels, replayed with them by the first leader.
        records = sf.in_kafka_order(bootstrap_records(level, feature_levels)
                                    + bootstrap_scram_records(args.add_scram, level))
    except ValueError as exc:
        raise CommandError(str(exc)) from None
    directory = Path(config.metadata_log_dir)
    existing = read_meta_properties(directory) if directory.exists() else None
    if existing is not None:
        if args.ignore_formatted:
            print(f"{directory} is already formatted (cluster {existing.cluster_id}); nothing to do.")
            return EXIT_OK
        raise CommandError(f"{directory} is already formatted (cluster {existing.cluster_id}, node "
                           f"{existing.node_id}); use --ignore-formatted to skip, or delete it to start over")
    print(sf.bootstrap_metadata_line(records, level))
    print(f"Formatting {plan.directory_type(config.node_id)} {directory} with metadata.version "
          f"{metadata_version_from_level(level)}.")
    directory.mkdir(parents=True, exist_ok=True)
    # Only controllers bootstrap the cluster; a broker learns everything from the log.
    own_directory_id = sf.write_formatted_directory(config, directory, plan, records,
                                                    feature_levels.get("kraft.version", 0))
    directory_id = random_uuid_string() if own_directory_id is None else sf.directory_id_string(own_directory_id)
    write_meta_properties(directory, MetaProperties(cluster_id=args.cluster_id, node_id=config.node_id,
                                                    directory_id=directory_id))
    get_logger("storage").info(Event.STORAGE_FORMATTED, directory=str(directory), cluster_id=args.cluster_id,
                               metadata_version=str(metadata_version_from_level(level)))
    return EXIT_OK


def _confirmed(prompt: str) -> bool:
    if not sys.stdin.isatty():
        return False
    try:
        return input(f"{prompt} [y/N] ").strip().lower() in ("y", "yes")
    except EOFError:
        return False


def cmd_storage_recover(args) -> int:
    """Truncates a metadata log that start-up refuses to its last good batch."""
    config = _load_config(args)
    configure_logging(config.log_level)
    log_dir = Path(config.metadata_log_dir) / METADATA_LOG_DIR_NAME
    log_config = LogConfig(segment_bytes=config.log_segment_bytes)
    if not log_dir.is_dir():
        raise CommandError(f"{log_dir} does not exist: nothing to recover (is --config the node's config?)")
    try:
        plan = MetadataLog.repair(log_dir, log_config, apply=False)
    except RuntimeError as exc:  # the log's lock: the node is running
        raise CommandError(f"{exc}; stop the node first") from None
    except CorruptLogError as exc:
        raise CommandError(f"{exc}\nThis damage has no single place to cut; restore the directory from a "
                           "backup, or (in a quorum) wipe it and let the node refetch everything") from None
    except OSError as exc:
        raise CommandError(f"cannot read {log_dir}: {exc}") from None
    if plan.problem is None:
        print(f"The metadata log in {log_dir} verifies (end offset {plan.end_offset}); nothing to recover.")
        return EXIT_OK
    # A lone controller has no one to refetch from; a broker (an observer) always has the controllers.
    single = "controller" in config.process_roles and len(config.quorum_voters) <= 1
    problem = plan.problem.replace(f"; {RECOVER_HINT}", "")  # this command is the way out it names
    print(f"The metadata log in {log_dir} does not verify:\n  {problem}")
    print(_describe_repair(plan))
    if single:
        print("This is a single controller: the removed records are lost for good (clients that were told "
              "they succeeded will not find them).")
    else:
        print("In a quorum the node refetches the removed records from the leader when it starts. If a "
              "majority of the voters lose the same committed records this way, the quorum loses them.")
    if not args.yes and not _confirmed("Truncate the log?"):
        print("Nothing changed: re-run with --yes to truncate.", file=sys.stderr)
        return EXIT_FAILED
    try:
        done = MetadataLog.repair(log_dir, log_config, apply=True)
    except RuntimeError as exc:
        raise CommandError(f"{exc}; stop the node first") from None
    except (CorruptLogError, OSError) as exc:
        raise CommandError(f"recovery failed: {exc}") from None
    if done.problem is None:
        print(f"The log verified when it was opened again (end offset {done.end_offset}); nothing was cut.")
        return EXIT_OK
    if done.cut_offset != plan.cut_offset or done.removed_bytes != plan.removed_bytes:
        # The directory changed between the look and the cut: say what was really done.
        print("The log changed in the meantime; what was done instead:\n" + _describe_repair(done))
    print(f"Done: the log now ends at offset {done.end_offset}; the recovery point was reset to it.")
    print("Start the node again." + ("" if single else " It refetches what is missing from the leader."))
    return EXIT_OK


def _describe_repair(plan) -> str:
    lines = []
    if plan.reset_to_start is not None:
        lines.append(f"  The last good batch ends at offset {plan.cut_offset}, below the snapshot the log starts "
                     f"at ({plan.reset_to_start}): the log restarts empty at offset {plan.reset_to_start}.")
    else:
        lines.append(f"  Keeps offsets below {plan.cut_offset} (the last good batch); removes offset "
                     f"{plan.cut_offset} and everything after it.")
    if plan.recovery_point is not None and plan.recovery_point > plan.cut_offset:
        lines.append(f"  The log had been flushed up to offset {plan.recovery_point}: at least "
                     f"{plan.recovery_point - plan.cut_offset} record(s) (offsets {plan.cut_offset}.."
                     f"{plan.recovery_point - 1}) were durable and are removed.")
    removed = [f"{plan.removed_bytes} bytes"]
    if plan.cut_segment is not None:
        removed.append(f"{Path(plan.cut_segment).name} cut at byte {plan.cut_position}")
    if plan.removed_segments:
        removed.append("segments deleted: " + ", ".join(Path(path).name for path in plan.removed_segments))
    lines.append("  Removes " + "; ".join(removed) + ".")
    return "\n".join(lines)


# --------------------------------------------------------------------------
# features
# --------------------------------------------------------------------------

def _bootstrap_addresses(args) -> list[tuple[str, int]]:
    address = args.bootstrap_server or args.bootstrap_controller
    if not address:
        raise CommandError("one of --bootstrap-server or --bootstrap-controller is required")
    try:
        return parse_bootstrap(address)
    except ValueError as exc:
        raise CommandError(str(exc)) from None


def _mv_name(level: int) -> str:
    found = find_metadata_version(level)
    return found.name if found is not None else str(level)


def _client_security(args):
    """The ClientSecurity of --command-config FILE (None without one: PLAINTEXT)."""
    path = getattr(args, "command_config", None)
    if not path:
        return None

    try:
        return ClientSecurity.from_properties(load_properties(Path(path).read_text()))
    except OSError as exc:
        raise CommandError(f"cannot read --command-config {path}: {exc.strerror or exc}") from None
    except ClientSecurityError as exc:
        raise CommandError(f"--command-config {path}: {exc}") from None


async def _connect(args):
    bootstrap = _bootstrap_addresses(args)
    security = _client_security(args)
    try:
        with trio.fail_after(args.timeout_s):
            return await connect_any(bootstrap, security, args.timeout_s)
    except (ClientError, trio.TooSlowError) as exc:
        raise CommandError(f"could not reach {describe_bootstrap(bootstrap)} ({exc or 'timed out'}); is a "
                           "controller running there? Start one with `kraftwerk controller --config FILE`") from None


MIGRATION_DRAIN_TIMEOUT_S = 30.0


async def _call_active_controller(args, api_key: int, body: dict, min_version: int = 0):
    """Sends a write to the active controller, following it across a failover until
    --timeout-s (cli/active_controller.py)."""
    bootstrap = _bootstrap_addresses(args)
    try:
        return await call_active_controller(bootstrap, controllers=not args.bootstrap_server,
                                            security=_client_security(args), timeout_s=args.timeout_s,
                                            api_key=api_key, body=body, min_version=min_version)
    except Unreachable as exc:
        raise CommandError(str(exc)) from None
    except NotServed as exc:
        controller = f"{exc.address[0]}:{exc.address[1]}"
        raise CommandError(f"{describe_bootstrap(bootstrap)} names {controller} as the controller, which does "
                           f"not serve {api_name(api_key)} (a ZooKeeper-mode broker names itself); "
                           "ask the controllers with --bootstrap-controller") from None
    except Refused as exc:
        raise CommandError(f"{describe_bootstrap(bootstrap)} would not name the active controller: "
                           f"{exc.message or error_name(exc.code)}") from None


async def describe_features(args) -> list[str]:
    client = await _connect(args)
    async with client:
        response = client.api_versions_response
    finalized = {f.name: f.max_version_level for f in response.finalized_features or []}
    epoch = response.finalized_features_epoch
    lines = []
    for feature in sorted(response.supported_features or [], key=lambda f: f.name):
        is_mv = feature.name == "metadata.version"
        show = _mv_name if is_mv else str
        level = finalized.get(feature.name)
        lines.append(
            f"Feature: {feature.name}\tSupportedMinVersion: {show(feature.min_version)}\t"
            f"SupportedMaxVersion: {show(feature.max_version)}\t"
            f"FinalizedVersionLevel: {show(level) if level is not None else '-'}\t"
            f"Epoch: {epoch if epoch is not None and epoch >= 0 else '-'}"
        )
    return lines


async def update_features(args, operation: str) -> tuple[list[str], bool]:
    updates: dict[str, int] = {}
    if getattr(args, "metadata", None):
        updates["metadata.version"] = _parse_metadata_version(args.metadata)
    if operation == "disable":
        for name in args.feature or []:
            updates[name] = 0
    else:
        for name, level in _parse_feature_levels(args.feature).items():
            if name in updates:
                raise CommandError(f"feature {name} given twice")
            updates[name] = level
    if getattr(args, "release_version", None):
        if updates:
            raise CommandError("Can not specify `release-version` with other feature flags.")
        try:
            updates = release_version_updates(args.release_version, UPGRADE if operation == "upgrade" else
                                              SAFE_DOWNGRADE)
        except ValueError as exc:
            raise CommandError(str(exc)) from None
    if not updates:
        raise CommandError("nothing to do: give --metadata VERSION and/or --feature name=level")
    if operation == "upgrade":
        upgrade_type = UPGRADE
    else:
        upgrade_type = UNSAFE_DOWNGRADE if args.unsafe else SAFE_DOWNGRADE
    body = {
        "timeout_ms": int(args.timeout_s * 1000),
        "feature_updates": [
            {"feature": name, "max_version_level": level, "allow_downgrade": upgrade_type != UPGRADE,
             "upgrade_type": upgrade_type}
            for name, level in updates.items()
        ],
        "validate_only": bool(args.dry_run),
    }
    # Dry runs need ValidateOnly (v1+); downgrades need UpgradeType (v1+).
    response = await _call_active_controller(args, 57, body, min_version=1)
    past = {"upgrade": "upgraded", "downgrade": "downgraded", "disable": "disabled"}[operation]
    per_feature_errors = {r.feature: (r.error_code, r.error_message) for r in response.results or []}
    lines = []
    failed = 0
    for name, level in updates.items():
        code, message = per_feature_errors.get(name, (response.error_code, response.error_message))
        if response.error_code != 0:
            code, message = response.error_code, response.error_message
        shown = _mv_name(level) if name == "metadata.version" else str(level)
        if code != 0:
            failed += 1
            # Kafka's FeatureCommand words: "Can not" for a dry run, and "disable X" has no level.
            what = f"disable {name}" if operation == "disable" else f"{operation} {name} to {shown}"
            lines.append(f"{'Can not' if args.dry_run else 'Could not'} {what}. {message}")
        elif operation == "disable":
            lines.append(f"{name} can be disabled." if args.dry_run else f"{name} was disabled.")
        else:
            lines.append(f"{name} can be {past} to {shown}." if args.dry_run else f"{name} was {past} to {shown}.")
    if failed:
        lines.append(f"{failed} out of {len(updates)} operation(s) failed.")
    elif response.error_message:
        # kraftwerk's note on success: what an UNSAFE downgrade drops (or would drop).
        lines.append(response.error_message)
    return lines, failed == 0


def cmd_features(args) -> int:
    if args.features_command == "describe":
        for line in trio.run(describe_features, args):
            print(line)
        return EXIT_OK
    if getattr(args, "unsafe", False) and not args.dry_run and sys.stdin.isatty():
        # An UNSAFE downgrade may destroy metadata: on a terminal, show what this one
        # drops (a dry run) and ask before doing it. Scripts (no terminal) are not asked.
        preview = argparse.Namespace(**{**vars(args), "dry_run": True})
        lines, ok = trio.run(update_features, preview, args.features_command)
        for line in lines:
            print(line)
        if not ok:
            return EXIT_FAILED
        if input("This downgrade cannot be undone. Type 'yes' to perform it: ").strip().lower() != "yes":
            print("Aborted; nothing was changed.")
            return EXIT_FAILED
    lines, ok = trio.run(update_features, args, args.features_command)
    for line in lines:
        print(line)
    return EXIT_OK if ok else EXIT_FAILED


# --------------------------------------------------------------------------
# migration (KIP-866)
# --------------------------------------------------------------------------

_MIGRATION_STATES = {1: "ZooKeeper", 2: "MigrationEligible", 3: "MigrationReady", 4: "MigrationActive",
                     5: "MigrationFinished", 6: "KRaft"}
_ZK_MIGRATION_STATES = {0: "NONE", 1: "MIGRATION", 2: "PRE_MIGRATION", 3: "POST_MIGRATION"}


async def describe_migration(args) -> list[str]:
    response = await _call_active_controller(args, DESCRIBE_MIGRATION_API_KEY, {})
    if response.error_code != 0:
        raise CommandError(f"DescribeMigration failed: error {response.error_code} {response.error_message or ''}")
    lines = [
        f"MigrationState:         {_MIGRATION_STATES.get(response.migration_state, response.migration_state)} "
        f"({response.migration_state})",
        f"ZkMigrationState:       {_ZK_MIGRATION_STATES.get(response.zk_migration_state, response.zk_migration_state)}",
        f"ActiveController:       {response.controller_id}",
        f"MigrationEnabled:       {str(response.migration_enabled).lower()}",
    ]
    if response.migration_enabled:
        lines += [
            f"ZooKeeperWriteBehindLag: {response.zk_write_behind_lag}",
            f"ZooKeeperLastOffset:    {response.zk_last_offset}",
            f"ZooKeeperControllerEpoch: {response.zk_controller_epoch}",
            f"WritesBlocked:          {str(response.writes_blocked).lower()}",
            f"ZooKeeperBrokers:       [{','.join(map(str, response.zk_brokers))}]",
        ]
    lines.append(f"KRaftBrokers:           [{','.join(map(str, response.kraft_brokers))}]")
    for failure in response.precondition_failures:
        who = f"broker {failure.broker_id}" if failure.broker_id >= 0 else "cluster"
        lines.append(f"Blocked:                {who}: {failure.reason}")
    return lines


def rollback_zookeeper(hosts: str) -> list[str]:
    """KIP-866's last rollback step, after the brokers run in ZooKeeper mode again and the
    KRaft quorum was shut down cleanly, as Kafka's procedure does it: delete the persistent
    /controller the KRaft controller wrote, so ZooKeeper brokers elect a controller, and
    /migration, so that a later migration can be attempted (a fresh quorum starts at epoch
    1, and /migration naming an older quorum's higher epoch would fence it for good).
    /controller_epoch stays: controller epochs only grow, and brokers refuse an older one
    (STALE_CONTROLLER_EPOCH), so whoever controls next counts on from it."""
    client = KazooClient(hosts=hosts, timeout=10.0)
    client.start(timeout=15.0)
    try:
        lines = []
        try:
            data, stat = client.get(zp.CONTROLLER_PATH)
        except NoNodeError:
            return ["/controller is absent: nothing to roll back"]
        controller = zp.ControllerZnode.decode(data)
        if not controller.is_kraft:
            raise CommandError(f"/controller belongs to ZooKeeper broker {controller.broker_id}, not a KRaft "
                               "controller: nothing to roll back")
        client.delete(zp.CONTROLLER_PATH, version=stat.version)
        lines.append(f"deleted /controller (KRaft controller {controller.broker_id}, "
                     f"epoch {controller.kraft_controller_epoch})")
        try:
            client.delete(zp.MIGRATION_PATH)
            lines.append("deleted /migration (a later migration can be attempted)")
        except NoNodeError:
            pass
        lines.append("ZooKeeper brokers can elect a controller again; /controller_epoch is kept (epochs only grow)")
        return lines
    finally:
        client.stop()
        client.close()


def cmd_probe_matrix(args) -> int:
    return run_probe_matrix(args)


def cmd_migration(args) -> int:
    if args.migration_command == "status":
        for line in trio.run(describe_migration, args):
            print(line)
        return EXIT_OK
    if args.migration_command == "rollback":
        for line in rollback_zookeeper(args.zookeeper):
            print(line)
        return EXIT_OK
    raise CommandError(f"unknown migration command {args.migration_command}")


# --------------------------------------------------------------------------
# demo: a local controller and a short upgrade story
# --------------------------------------------------------------------------

def _wait_for_interrupt(processes) -> None:
    """Blocks until Ctrl-C or until every node has exited.

    A controller that dies (or is killed to try a failover) is reported once; the
    others keep running, as they would in a real cluster."""
    # Ctrl-C (or `kill -INT`) and SIGTERM both stop it: a shell that starts this command in
    # the background leaves SIGINT ignored, and `docker stop`, systemd and CI send SIGTERM.
    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.signal(signal.SIGTERM, _interrupt_on_sigterm)
    print("Press Ctrl-C to stop.", flush=True)
    reported: set[int] = set()
    try:
        while any(p.alive() for p in processes):
            for p in processes:
                if not p.alive() and p.spec.node_id not in reported:
                    reported.add(p.spec.node_id)
                    print(f"{p.spec.role} {p.spec.node_id} exited ({p.process.returncode}); see {p.spec.log_path}",
                          file=sys.stderr, flush=True)
            time.sleep(0.5)
    except KeyboardInterrupt:
        pass


def _interrupt_on_sigterm(signum, frame) -> None:
    raise KeyboardInterrupt


def _check_ports_free(args) -> None:
    """Refuses, before anything is formatted or deleted, ports of the cluster that another
    process listens on (a `cluster up` already running, a compose cluster): one line naming
    the address, instead of a node that exits half-way through start-up."""
    ports = [("controller", args.base_port + i) for i in range(args.controllers)]
    ports += [("broker", args.broker_base_port + i) for i in range(args.brokers)]
    if args.zookeeper:
        ports.append(("ZooKeeper", args.zookeeper_port))
    for role, port in ports:
        if not lc.port_is_free(port):
            raise CommandError(f"cannot listen on 127.0.0.1:{port} (a {role} of this cluster): address already "
                               "in use; another process listens there (is this cluster already up?), or choose "
                               "other ports (--base-port, --broker-base-port)")


def _stop_local_nodes(processes, work: Path, added_controllers: bool = True, then=None) -> None:
    """`cluster up`'s stop path: the brokers together, then the controllers together (with
    those `cluster add-controller` started), then `then()` (ZooKeeper), then any node of the
    cluster in `work` that a start interrupted half-way left unrecorded. A second Ctrl-C or
    SIGTERM meanwhile kills what is left at once; it never abandons a node."""
    with StopSignals() as again:
        def hurry() -> bool:
            return bool(again.received)

        if processes:
            print(f"Stopping {len(processes)} node(s)", flush=True)
        added = tuple(lc.added_controller_pids(work)) if added_controllers else ()
        try:
            lc.stop_nodes(processes, hurry, also_controllers=added)
            if added_controllers:
                stop_added_controllers(work, hurry)
            if then is not None:
                then()
        finally:
            lc.stop_children(work, hurry)


def cmd_cluster_up(args) -> int:
    # Ctrl-C (or `kill -INT`) and SIGTERM stop it, from the first moment: the nodes run in
    # sessions of their own and would outlive a `kill`, a shell that starts this command in
    # the background leaves SIGINT ignored, and `docker stop`, systemd and CI send SIGTERM.
    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.signal(signal.SIGTERM, _interrupt_on_sigterm)
    if args.zookeeper:
        if args.secure:
            raise CommandError("--secure and --zookeeper cannot be combined (the migration runs on PLAINTEXT)")
        _check_ports_free(args)
        return _cluster_up_zookeeper(args)
    if not 1 <= args.controllers <= 9:
        raise CommandError("--controllers must be between 1 and 9 (3 or 5 are the usual quorums)")
    if not 0 <= args.brokers <= 50:
        raise CommandError("--brokers must be between 0 and 50")
    _check_ports_free(args)
    work = Path(args.dir).resolve()
    if work.exists() and not args.keep:
        shutil.rmtree(work)
    if args.standalone and (args.secure or args.release):
        raise CommandError("--standalone cannot be combined with --secure or --release yet")
    if args.secure:
        try:
            cluster = SecureLocalCluster(work, args.controllers, args.brokers, args.base_port,
                                         args.broker_base_port, release=args.release,
                                         metadata_version=args.metadata_version)
        except LocalClusterError as exc:
            raise CommandError(str(exc)) from None
    else:
        cluster = LocalCluster(work, args.controllers, args.brokers, args.base_port, args.broker_base_port,
                               release=args.release, metadata_version=args.metadata_version,
                               standalone=args.standalone)
    try:
        print(f"Formatting {args.controllers} controller(s) and {args.brokers} broker(s) in {work} "
              f"(cluster id {cluster.cluster_id})", flush=True)
        cluster.format()
        for spec in cluster.specs:
            process = cluster.start(spec.node_id)
            print(f"  {spec.role} {spec.node_id} listening on {process.address} (pid {process.process.pid}, "
                  f"logs {spec.log_path})", flush=True)
        cluster.wait_bootstrapped()
        print("  the quorum elected a leader and wrote the bootstrap records", flush=True)
        if cluster.brokers:
            cluster.wait_unfenced([b.node_id for b in cluster.brokers])
            print(f"  brokers {', '.join(str(b.node_id) for b in cluster.brokers)} registered and unfenced",
                  flush=True)
        first = (cluster.brokers or cluster.controllers)[0].address
        if args.secure:
            _print_secure_access(cluster, first)
        else:
            print("\nReach it with:")
            print(f"  kraftwerk features describe --bootstrap-server {first}")
            print(f"  kraftwerk metadata-quorum describe --status --bootstrap-controller "
                  f"{cluster.controllers[0].address}")
            print(f"  kcat -L -b {first}")
            print(f"  python -m kafka.admin -b {first} cluster describe-features", flush=True)
            if args.standalone:
                print("\nThe quorum is dynamic (KIP-853): controller 1 is its only voter"
                      + (f", controllers {', '.join(str(c.node_id) for c in cluster.controllers[1:])} observe it"
                         if len(cluster.controllers) > 1 else "") + ". Grow it, one controller at a time:")
                for controller in cluster.controllers[1:]:
                    print(f"  kraftwerk metadata-quorum --bootstrap-controller {cluster.controllers[0].address} "
                          f"--command-config {controller.config_path} add-controller")
                print(f"  kraftwerk cluster add-controller --dir {args.dir}    # a new controller process, added",
                      flush=True)
        if not args.exit:
            _wait_for_interrupt(list(cluster.processes.values()))
        return EXIT_OK
    except KeyboardInterrupt:
        print("Stopped before the cluster was up (Ctrl-C or SIGTERM)", file=sys.stderr, flush=True)
        return EXIT_OK
    except (LocalClusterError, StoryError) as exc:
        raise CommandError(str(exc)) from None
    finally:
        _stop_local_nodes(cluster.processes, work)


def cmd_cluster_add_controller(args) -> int:
    """`kraftwerk cluster add-controller`: one more controller for a running local cluster
    with a dynamic quorum, started in the background and added as a voter (KIP-853)."""
    try:
        spec, answer = grow_quorum(Path(args.dir).resolve())
    except LocalClusterError as exc:
        raise CommandError(str(exc)) from None
    print(f"controller {spec.node_id} listening on {spec.address} (logs {spec.log_path}); `cluster up` stops it")
    print(answer)
    return EXIT_OK


def _print_secure_access(cluster, first: str) -> None:
    """How an operator reaches a `cluster up --secure` cluster (no secret is printed)."""
    material = cluster.material
    config = material.command_config_path
    print(f"\nEvery listener is SASL_SSL (CA: {material.ca_path}), with the StandardAuthorizer: the nodes "
          f"log in with {NODE_MECHANISM}")
    print(f"as User:{CONTROLLER_USER} and User:{BROKER_USER}, super users like User:{OPERATOR_USER}; any other "
          "principal needs ACLs")
    print("and cannot send Vote, BeginQuorumEpoch or Fetch to the controllers.")
    print(f"Reach it as User:{OPERATOR_USER} ({OPERATOR_MECHANISM}; password in {config}, mode 0600):")
    print(f"  kraftwerk features describe --bootstrap-server {first} --command-config {config}")
    print(f"  kraftwerk metadata-quorum describe --status --bootstrap-controller "
          f"{cluster.controllers[0].address} --command-config {config}")
    print(f"  kcat -L -b {first} -F {material.librdkafka_config_path}")
    print(f"  kafka-python: KafkaAdminClient(bootstrap_servers='{first}', security_protocol='SASL_SSL', "
          f"sasl_mechanism='{OPERATOR_MECHANISM}', sasl_plain_username='{OPERATOR_USER}', "
          f"sasl_plain_password=<from {config.name}>, ssl_cafile='{material.ca_path}')", flush=True)


def _cluster_up_zookeeper(args) -> int:
    """`kraftwerk cluster up --zookeeper`: a ZooKeeper-mode cluster with its migration to
    KRaft (KIP-866) switched on, left at MigrationActive for the operator to continue."""
    if not 1 <= args.controllers <= 9:
        raise CommandError("--controllers must be between 1 and 9 (3 or 5 are the usual quorums)")
    if not 1 <= args.brokers <= 50:
        raise CommandError("--brokers must be between 1 and 50 with --zookeeper (a ZooKeeper-mode cluster "
                           "to migrate has brokers)")
    reason = zookeeper_missing()
    if reason is not None:
        raise CommandError(f"cannot start ZooKeeper: {reason}")
    work = Path(args.dir).resolve()
    if work.exists() and not args.keep:
        shutil.rmtree(work)
    broker_ids = tuple(range(1, args.brokers + 1))
    seed = SeedSpec(cluster_id=random_uuid_string(), broker_ids=broker_ids, topics=5, partitions_per_topic=3,
                    replication_factor=min(3, len(broker_ids)), topic_configs={"retention.ms": "604800000"},
                    broker_configs={"<default>": {"log.retention.hours": "168"}})
    # Every node serves Prometheus metrics on a free port (printed below): the migration's
    # state and ZooKeeper write-behind lag are what an operator watches.
    metrics = {"kraftwerk.metrics.port": "0"}
    controller_extra = dict(metrics)
    if args.release:
        controller_extra["kraftwerk.release"] = args.release
    cluster = MigrationCluster(work, zk_brokers=args.brokers, controllers=args.controllers, seed=seed,
                               metadata_version=args.metadata_version or "3.7-IV4", broker_release=args.release,
                               controller_extra=controller_extra, broker_extra=metrics,
                               controller_base_port=args.base_port, broker_base_port=args.broker_base_port,
                               zookeeper_port=args.zookeeper_port)

    def metrics_url(node_id: int) -> str:
        port = cluster.metrics_port(node_id)
        return f"http://127.0.0.1:{port}/metrics" if port else "(none)"

    def kw(*argv) -> str:
        return "kraftwerk " + " ".join(shlex.quote(str(a)) for a in argv)

    try:
        print(f"Starting a ZooKeeper-mode cluster to migrate in {work} (cluster id {cluster.cluster_id})",
              flush=True)
        cluster.start_zookeeper()
        print(f"  ZooKeeper on {cluster.zk_hosts} (logs {cluster.zookeeper.log_path}), seeded with "
              f"{seed.topics} topics x {seed.partitions_per_topic} partitions (replication factor "
              f"{seed.replication_factor}), topic and broker configs, /cluster/id", flush=True)
        for broker_id in broker_ids:
            process = cluster.start_zk_broker(broker_id)
            spec = process.spec
            print(f"  ZooKeeper-mode broker {broker_id} listening on {process.address} (pid "
                  f"{process.process.pid}, config {spec.config_path}, logs {spec.log_path}, metrics "
                  f"{metrics_url(broker_id)})", flush=True)
        cluster.wait_until(f"{len(broker_ids)} brokers registered in ZooKeeper",
                           lambda: len(cluster.zookeeper_image().brokers) == len(broker_ids))
        cluster.format_controllers()
        for spec in cluster.controllers:
            process = cluster.start_controller(spec.node_id)
            print(f"  KRaft controller {spec.node_id} (kafka.metadata.migration.enable=true) listening on "
                  f"{process.address} (pid {process.process.pid}, config {spec.config_path}, logs "
                  f"{spec.log_path}, metrics {metrics_url(spec.node_id)})", flush=True)
        view = cluster.wait_state("MigrationActive")
        view = cluster.wait_caught_up()
        print(f"  the migration is MigrationActive: controller {view.controller_id} copied ZooKeeper's metadata "
              f"into the log and writes every change back to ZooKeeper (caught up at offset "
              f"{view.zk_last_offset}); ZooKeeper brokers {list(view.zk_brokers)}", flush=True)

        kraft_dir = work / "kraft"
        first_controller = cluster.controllers[0].address
        print("\nWatch the migration:")
        print(f"  {kw('migration', 'status', '--bootstrap-server', first_controller)}")
        print(f"  curl -s {metrics_url(view.controller_id)} | grep -E "
              "'kafka_controller_(migration_state|zookeeper_write_behind_lag)'")
        print(f"  {kw('features', 'describe', '--bootstrap-server', first_controller)}")
        print("\nMove the brokers to KRaft mode, one at a time (configs ready in "
              f"{kraft_dir}; same ids and ports):")
        for broker_id in broker_ids:
            config = cluster.write_kraft_broker_config(broker_id, kraft_dir)
            pid = cluster.processes[broker_id].process.pid
            print(f"  # broker {broker_id}")
            print(f"  kill -TERM {pid}    # stop the ZooKeeper-mode broker (its registration goes with it)")
            fmt = kw("storage", "format", "--cluster-id", cluster.cluster_id, "--metadata-version",
                     cluster.metadata_version, "--config", config)
            print(f"  {fmt}")
            print(f"  {kw('broker', '--config', config)}")
        print("  `migration status` then lists the broker under KRaftBrokers; with every broker moved the "
              "state is MigrationFinished.")
        print("\nFinalize once MigrationFinished (no way back to ZooKeeper after this): restart the controllers "
              "one at a time without the switch:")
        for spec in cluster.controllers:
            pid = cluster.processes[spec.node_id].process.pid
            print(f"  # controller {spec.node_id}")
            print(f"  kill -TERM {pid}    # and wait until it has exited")
            print(f"  sed -i -e '/^kafka.metadata.migration.enable=/d' -e '/^zookeeper.connect=/d' "
                  f"{shlex.quote(str(spec.config_path))}")
            print(f"  {kw('controller', '--config', spec.config_path)}")
        print("  `migration status` then says KRaft.")
        print("\nRoll back instead (any time before finalizing):")
        zk_broker = kw("broker", "--zookeeper", cluster.zk_hosts, "--config", cluster.spec(broker_ids[0]).config_path)
        print(f"  restart every KRaft-mode broker in ZooKeeper mode again, e.g. {zk_broker}")
        print("  stop every controller with kill -TERM (a clean stop first writes what ZooKeeper still lacks)")
        print(f"  {kw('migration', 'rollback', '--zookeeper', cluster.zk_hosts)}", flush=True)
        if not args.exit:
            _wait_for_interrupt(list(cluster.processes.values()))
        return EXIT_OK
    except KeyboardInterrupt:
        print("Stopped before the cluster was up (Ctrl-C or SIGTERM)", file=sys.stderr, flush=True)
        return EXIT_OK
    except (LocalClusterError, MigrationStoryError, ZooKeeperStartError) as exc:
        raise CommandError(f"{exc} (logs in {work})") from None
    finally:
        # ZooKeeper last: a controller's clean stop writes what ZooKeeper still lacks.
        _stop_local_nodes(cluster.processes, work, added_controllers=False, then=cluster.stop_all)


def cmd_demo_upgrade(args) -> int:
    """`kraftwerk cluster demo-upgrade`: the KIP-778 story on 3 controllers and 3 brokers."""
    story = UpgradeStory(Path(args.dir).resolve(), say=lambda text: print(text, flush=True),
                         base_port=args.base_port, broker_base_port=args.broker_base_port)
    try:
        story.run()
        print("\nThe story is done: every node runs 3.7, metadata.version went up step by step, brokers "
              "renegotiated without restarts, and the downgrades did what they said.", flush=True)
        if not args.exit:
            _wait_for_interrupt(list(story.cluster.processes.values()))
        return EXIT_OK
    except (LocalClusterError, StoryError) as exc:
        raise CommandError(f"{exc} (logs in {args.dir})") from None
    finally:
        story.cluster.stop_all()


def cmd_demo(args) -> int:
    """A local 3-controller quorum and a short upgrade story, as an operator would run it."""
    work = Path(args.dir).resolve()
    specs = lc.plan(work, args.controllers, args.port)
    for spec in specs:
        if spec.metadata_dir.exists() and not args.keep:
            shutil.rmtree(spec.metadata_dir)

    def step(title: str, argv: list[str], expect_ok: bool = True) -> str:
        print(f"\n$ kraftwerk {' '.join(argv)}    # {title}", flush=True)
        result = lc.run_cli(*argv)
        sys.stdout.write(result.stdout)
        if result.returncode != 0 and expect_ok:
            sys.stdout.write(result.stderr)
            raise CommandError(f"demo step failed: kraftwerk {' '.join(argv)}")
        return result.stdout

    cluster_id = random_uuid_string()
    for spec in specs:
        lc.write_config(spec, specs)
        if not (spec.metadata_dir / "meta.properties").exists():
            step(f"format controller {spec.node_id} at 3.7-IV4",
                 ["storage", "format", "--cluster-id", cluster_id, "--metadata-version", "3.7-IV4",
                  "--config", str(spec.config_path)])
    processes: dict[int, lc.ControllerProcess] = {}
    try:
        for spec in specs:
            processes[spec.node_id] = lc.start_controller(spec)
    except lc.LocalClusterError as exc:
        for process in processes.values():
            lc.stop_controller(process)
        raise CommandError(str(exc)) from None
    try:
        servers = ",".join(p.address for p in processes.values())
        first = processes[specs[0].node_id].address
        print()
        for process in processes.values():
            print(f"Controller {process.spec.node_id} is running on {process.address} "
                  f"(pid {process.process.pid}, logs in {process.spec.log_path}).")
        deadline = time.monotonic() + 30  # the quorum elects a leader, which writes the bootstrap records
        while time.monotonic() < deadline:
            probe = lc.run_cli("features", "describe", "--bootstrap-server", first)
            mv_line = next((line for line in probe.stdout.splitlines() if "metadata.version" in line), "")
            if mv_line and "FinalizedVersionLevel: -" not in mv_line:
                break
            time.sleep(0.1)
        step("what does the cluster support and run?", ["features", "describe", "--bootstrap-server", first])
        step("would an upgrade to 3.9-IV0 work? (dry run)",
             ["features", "upgrade", "--metadata", "3.9-IV0", "--dry-run", "--bootstrap-server", servers])
        step("upgrade metadata.version online", ["features", "upgrade", "--metadata", "3.9-IV0",
                                                 "--bootstrap-server", servers])
        step("the finalized level and epoch moved", ["features", "describe", "--bootstrap-server", first])
        step("a safe downgrade across metadata changes is refused",
             ["features", "downgrade", "--metadata", "3.6-IV2", "--bootstrap-server", servers], expect_ok=False)
        step("a lossless downgrade is allowed", ["features", "downgrade", "--metadata", "3.8-IV0",
                                                  "--bootstrap-server", servers])
        quorum = step("the quorum", ["metadata-quorum", "describe", "--status", "--bootstrap-server", first])
        if len(processes) > 1:
            leader_id = int(next(line.split(":")[1] for line in quorum.splitlines() if line.startswith("LeaderId")))
            print(f"\n# kill -9 the active controller (node {leader_id}): a survivor takes over", flush=True)
            lc.stop_controller(processes[leader_id], kill=True)
            survivors = ",".join(p.address for n, p in processes.items() if n != leader_id)
            step("writes go on, on the new leader", ["features", "upgrade", "--metadata", "4.0-IV0",
                                                     "--bootstrap-server", survivors])
            step("a new leader and epoch", ["metadata-quorum", "describe", "--status", "--bootstrap-server",
                                            survivors.split(",")[0]])
            processes[leader_id] = lc.start_controller(processes[leader_id].spec)
            print(f"\n# controller {leader_id} restarted: it catches up from the quorum", flush=True)
            deadline = time.monotonic() + 15  # it replays what it missed within moments
            while time.monotonic() < deadline:
                probe = lc.run_cli("features", "describe", "--bootstrap-server", processes[leader_id].address)
                if "FinalizedVersionLevel: 4.0-IV0" in probe.stdout:
                    break
                time.sleep(0.1)
            step(f"controller {leader_id} has the upgrade it missed",
                 ["features", "describe", "--bootstrap-server", processes[leader_id].address])
        print(f"\nTalk to it with real Kafka clients:\n"
              f"  python -m kafka.admin -b {first} cluster describe-features\n"
              f"  kcat -L -b {first}\n"
              f"  kraftwerk features describe --bootstrap-server {first}\n")
        if not args.exit:
            _wait_for_interrupt(list(processes.values()))
        return EXIT_OK
    except lc.LocalClusterError as exc:
        raise CommandError(str(exc)) from None
    finally:
        for process in processes.values():
            lc.stop_controller(process)


# --------------------------------------------------------------------------
# pipeline (needs the spark extra: pip install kraftwerk[spark])
# --------------------------------------------------------------------------

def cmd_pipeline(args) -> int:
    try:
        if args.pipeline_command == "fake-fleet":
            # Segment rolls and snapshots are logged at info, once per file: too chatty here.
            configure_logging("warning")
            fake_fleet_command(args.clusters, args.records, Path(args.out), args.seed,
                               lambda line: print(line, flush=True))
            return EXIT_OK
        # deferred import: PySpark is an optional extra (kraftwerk[spark]); every other
        # command must run without it.
        from pipeline.jobs import run_command
    except ImportError as exc:
        raise CommandError(f"the pipeline needs PySpark: pip install 'kraftwerk[spark]' ({exc})") from None
    run_command(Path(args.fleet), Path(args.out), args.master)
    return EXIT_OK


# --------------------------------------------------------------------------
# parser
# --------------------------------------------------------------------------

def _add_bootstrap(parser: argparse.ArgumentParser) -> None:
    group = parser.add_mutually_exclusive_group()
    group.add_argument("--bootstrap-server", help="host:port of a node to talk to")
    group.add_argument("--bootstrap-controller", help="host:port of a controller to talk to")
    parser.add_argument("--timeout-s", type=float, default=30.0, help="give up after this many seconds")
    parser.add_argument("--command-config", metavar="FILE",
                        help="Kafka client properties (security.protocol, ssl.*, sasl.*) for the connection")


def _add_config(parser: argparse.ArgumentParser, required: bool) -> None:
    parser.add_argument("--config", required=required, help="Kafka-style properties file")
    parser.add_argument("--node-id", type=int)
    parser.add_argument("--listener", help="HOST:PORT or NAME://HOST:PORT")
    parser.add_argument("--log-dir", help="metadata log directory")
    parser.add_argument("--override", action="append", metavar="KEY=VALUE", help="set any property")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="kraftwerk", description="A Kafka-compatible KRaft controller.")
    sub = parser.add_subparsers(dest="command", required=True)

    controller = sub.add_parser("controller", help="run a controller")
    _add_config(controller, required=False)
    controller.add_argument("--port-file", help="write the bound port here once listening")
    controller.add_argument("--release", help="act as this Apache Kafka release (e.g. 3.6): its feature ranges")
    controller.set_defaults(func=cmd_controller)

    broker = sub.add_parser("broker", help="run a broker agent (no topic data; registers, heartbeats, serves "
                                           "metadata)")
    _add_config(broker, required=False)
    broker.add_argument("--port-file", help="write the bound port here once listening")
    broker.add_argument("--release", help="act as this Apache Kafka release (e.g. 3.6): its feature ranges")
    # --zookeeper HOST:PORT (or zookeeper.connect without process.roles) runs a ZooKeeper-mode
    # broker instead (KIP-866's starting point).
    add_zk_broker_arguments(broker)
    broker.set_defaults(func=cmd_broker)

    storage = sub.add_parser("storage", help="format a metadata directory, or recover a damaged log")
    storage_sub = storage.add_subparsers(dest="storage_command", required=True)
    fmt = storage_sub.add_parser("format", help="write meta.properties and the bootstrap records")
    _add_config(fmt, required=False)
    fmt.add_argument("--cluster-id", "-t", required=True)
    fmt.add_argument("--metadata-version", "--release-version", "-r", help="e.g. 3.7-IV4 (default: latest production)")
    fmt.add_argument("--feature", "-f", action="append", metavar="NAME=LEVEL")
    fmt.add_argument("--ignore-formatted", "-g", action="store_true")
    fmt.add_argument("--add-scram", "-S", action="append", metavar="'SCRAM-SHA-256=[name=N,password=P]'",
                     help="a SCRAM credential for the new cluster (repeatable; iterations=, salt=, "
                          "saltedpassword= as in Kafka)")
    sf.add_quorum_flags(fmt)
    fmt.set_defaults(func=cmd_storage_format)
    # kafka-storage.sh has the same two lookups as kafka-features.sh, printing the same lines.
    add_feature_subcommands(storage_sub)
    uuid_parser = storage_sub.add_parser("random-uuid", help="print a new cluster id")
    uuid_parser.set_defaults(func=cmd_storage_random_uuid)
    recover = storage_sub.add_parser("recover", help="truncate a damaged metadata log to its last good batch "
                                                     "(the node must be stopped)")
    _add_config(recover, required=False)
    recover.add_argument("--yes", "-y", action="store_true", help="truncate without asking")
    recover.set_defaults(func=cmd_storage_recover)

    features = sub.add_parser("features", help="describe and change finalized features")
    features_sub = features.add_subparsers(dest="features_command", required=True)
    describe = features_sub.add_parser("describe")
    _add_bootstrap(describe)
    for name in ("upgrade", "downgrade", "disable"):
        op = features_sub.add_parser(name)
        _add_bootstrap(op)
        if name != "disable":
            op.add_argument("--metadata", help="metadata.version name (3.7-IV4) or level")
            op.add_argument("--release-version", metavar="R",
                            help="every feature at the level release R implies (3.9 or 3.9-IV0; see "
                                 "`features version-mapping`)")
            op.add_argument("--feature", action="append", metavar="NAME=LEVEL")
        else:
            op.add_argument("--feature", action="append", metavar="NAME", required=True)
        if name != "upgrade":
            op.add_argument("--unsafe", action="store_true", help="allow a downgrade that may lose metadata")
        op.add_argument("--dry-run", action="store_true", help="validate only; change nothing")
    features.set_defaults(func=cmd_features)
    add_feature_subcommands(features_sub)

    # describe, add-controller, remove-controller (cli/quorum_tools.py).
    add_quorum_parsers(sub)

    probe = sub.add_parser("probe-matrix", help="KIP-268's upgrade matrix for Kafka Streams' rebalance metadata, "
                                                "each cell measured by the in-process group runner")
    add_probe_arguments(probe)
    probe.set_defaults(func=cmd_probe_matrix)

    migration = sub.add_parser("migration", help="the ZooKeeper -> KRaft migration (KIP-866)")
    migration_sub = migration.add_subparsers(dest="migration_command", required=True)
    mstatus = migration_sub.add_parser("status", help="the migration's state, write-behind lag and blockers")
    _add_bootstrap(mstatus)
    mrollback = migration_sub.add_parser(
        "rollback", help="after a clean shutdown of the KRaft quorum: hand ZooKeeper's controller role back")
    mrollback.add_argument("--zookeeper", required=True, help="zookeeper.connect of the cluster")
    migration.set_defaults(func=cmd_migration)

    cluster = sub.add_parser("cluster", help="run a local cluster of real processes")
    cluster_sub = cluster.add_subparsers(dest="cluster_command", required=True)
    up = cluster_sub.add_parser("up", help="format and start local controllers and brokers on 127.0.0.1")
    up.add_argument("--controllers", type=int, default=3)
    up.add_argument("--brokers", type=int, default=3, help="broker agents, ids 101, 102, ... (with --zookeeper: "
                                                           "ZooKeeper-mode brokers, ids 1, 2, ...)")
    up.add_argument("--base-port", type=int, default=9093, help="controller N listens on base-port + N - 1")
    up.add_argument("--broker-base-port", type=int, default=9192, help="broker 10N listens on this + N - 1")
    up.add_argument("--dir", default="var/cluster")
    up.add_argument("--keep", action="store_true", help="keep an existing directory (default: start fresh)")
    up.add_argument("--release", help="run every node as this Apache Kafka release (e.g. 3.6)")
    up.add_argument("--metadata-version", default=None, help="format at this metadata.version")
    up.add_argument("--exit", action="store_true", help="stop again once everything is up (for scripts)")
    up.add_argument("--zookeeper", action="store_true",
                    help="a ZooKeeper-mode cluster (real ZooKeeper, seeded) with KRaft controllers migrating it "
                         "(KIP-866); stops at MigrationActive and prints the next steps")
    up.add_argument("--zookeeper-port", type=int, default=2181, help="with --zookeeper: ZooKeeper's client port")
    up.add_argument("--secure", action="store_true",
                    help="SASL_SSL on every listener (a generated CA, PLAIN users for the nodes, a SCRAM user "
                         "admin for you), the StandardAuthorizer with the nodes as super users; prints a "
                         "--command-config file (docs/security.md)")
    up.add_argument("--standalone", action="store_true",
                    help="a dynamic quorum (KIP-853): controller 1 formatted --standalone, the other controllers "
                         "as observers to add with `metadata-quorum add-controller` or `cluster add-controller`")
    up.set_defaults(func=cmd_cluster_up)
    grow = cluster_sub.add_parser("add-controller", help="start one more controller for a running `cluster up "
                                                         "--standalone` cluster and add it to the voters")
    grow.add_argument("--dir", default="var/cluster")
    grow.set_defaults(func=cmd_cluster_add_controller)
    story = cluster_sub.add_parser("demo-upgrade", help="3 controllers + 3 brokers: roll 3.5 -> 3.7, upgrade "
                                                        "metadata.version online, downgrade safe and unsafe")
    story.add_argument("--dir", default="var/demo-upgrade")
    story.add_argument("--base-port", type=int, default=9093)
    story.add_argument("--broker-base-port", type=int, default=9192)
    story.add_argument("--exit", action="store_true", help="stop the cluster after the story")
    story.set_defaults(func=cmd_demo_upgrade)

    pipeline = sub.add_parser("pipeline", help="the PySpark pipeline over a fleet's metadata logs")
    pipeline_sub = pipeline.add_subparsers(dest="pipeline_command", required=True)
    run = pipeline_sub.add_parser("run", help="audit, readiness and broker timeline of a fleet: Parquet + report")
    run.add_argument("--fleet", required=True, help="a directory of <cluster>/<node>/ metadata log directories")
    run.add_argument("--out", required=True, help="where the Parquet tables and report.html go")
    run.add_argument("--master", default="local[*]", help="Spark master (local[*], spark://host:7077, yarn, k8s://...)")
    fake = pipeline_sub.add_parser("fake-fleet", help="write a realistic fleet by driving the real controller code")
    fake.add_argument("--clusters", type=int, default=10)
    fake.add_argument("--records", type=int, default=100_000, help="records in the whole fleet, split over the clusters")
    fake.add_argument("--out", required=True)
    fake.add_argument("--seed", type=int, default=1)
    pipeline.set_defaults(func=cmd_pipeline)

    # dump-log and metadata-shell: the metadata log read offline (cli/metadata_tools.py).
    add_metadata_tool_parsers(sub)

    demo = sub.add_parser("demo", help="start a local controller and walk through an upgrade")
    demo.add_argument("--dir", default="var/demo")
    demo.add_argument("--port", type=int, default=9093, help="controller N listens on port + N - 1")
    demo.add_argument("--controllers", type=int, default=3, help="quorum size (1 skips the failover step)")
    demo.add_argument("--keep", action="store_true", help="keep an existing demo directory")
    demo.add_argument("--exit", action="store_true", help="stop the controller after the story")
    demo.set_defaults(func=cmd_demo)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return args.func(args)
    except CommandError as exc:
        print(f"Error: {exc}", file=sys.stderr)
        return EXIT_FAILED
    except KeyboardInterrupt:
        return EXIT_FAILED


if __name__ == "__main__":
    sys.exit(main())
