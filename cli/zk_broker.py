"""The command line of the ZooKeeper-mode broker agent.

    kraftwerk broker --zookeeper HOST:PORT --config FILE [--release R] [--port-file F]

`add_arguments(parser)` adds what is missing to a parser (`kraftwerk broker`'s
subparser already has --config, --release, ...; `python -m cli.zk_broker` starts
from an empty one); `run(args) -> int` runs the broker until SIGINT/SIGTERM
(exit 0, after closing the ZooKeeper session so the registration goes at once) or a
KIP-584 stop (exit 1, the reason on stderr). Bad usage exits 2.

Config: Kafka properties. `broker.id` (ZooKeeper-era name) or `node.id`; `listeners`
(the first one is served); `kafka.metadata.migration.enable`; `zookeeper.connect`
when --zookeeper is not given; `broker.rack`; `zookeeper.session.timeout.ms`.
"""

from __future__ import annotations

import argparse
import gc
import sys
from dataclasses import replace
from pathlib import Path

import trio

from cli.node_process import StopSignals, listener_refusal, refusal_message, serve_until_stopped
from server.collector import use_serving_thresholds
from server.config import config_from_properties, load_properties
from server.net.listener import ListenerBindError
from server.observability import configure_logging
from server.releases import release
from server.zk.client import ZkConnectionError

EXIT_OK = 0
EXIT_FAILED = 1
EXIT_USAGE = 2

DEFAULT_LISTENER = "PLAINTEXT://127.0.0.1:9092"
# The broker registers in ZooKeeper (visible to everyone) before it reports serving and
# writes its port file: a stop in between lets it finish starting, then leave as a serving
# broker does. Bounded: an unreachable ZooKeeper does not hold a stop up for longer.
FINISH_STARTING_S = 5.0


def _add(parser: argparse.ArgumentParser, flag: str, **kwargs) -> None:
    # A flag the caller's parser already has (kraftwerk's broker subparser) is kept.
    if flag not in parser._option_string_actions:  # noqa: SLF001 - argparse has no public query
        parser.add_argument(flag, **kwargs)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    _add(parser, "--zookeeper", metavar="HOST:PORT",
         help="run as a ZooKeeper-mode broker registered in this ZooKeeper (zookeeper.connect)")
    _add(parser, "--config", help="Kafka-style properties file")
    _add(parser, "--release", help="act as this Apache Kafka release (e.g. 3.6): its feature ranges")
    _add(parser, "--port-file", help="write the bound port here once registered")
    _add(parser, "--node-id", type=int, help="broker.id")
    _add(parser, "--listener", help="HOST:PORT or NAME://HOST:PORT")
    _add(parser, "--override", action="append", metavar="KEY=VALUE", help="set any property")


class UsageError(Exception):
    pass


def build_config(args):
    """The ServerConfig for a ZooKeeper-mode broker from the CLI arguments."""
    props: dict[str, str] = {}
    config_file = getattr(args, "config", None)
    if config_file:
        if not Path(config_file).exists():
            raise UsageError(f"config file {config_file} does not exist")
        props.update(load_properties(Path(config_file).read_text()))
    # broker.id is the ZooKeeper-era name of node.id.
    if "broker.id" in props and "node.id" not in props:
        props["node.id"] = props["broker.id"]
    if getattr(args, "node_id", None) is not None:
        props["node.id"] = str(args.node_id)
    listener = getattr(args, "listener", None)
    if listener:
        props["listeners"] = listener if "://" in listener else f"PLAINTEXT://{listener}"
    props.setdefault("listeners", DEFAULT_LISTENER)
    if getattr(args, "release", None):
        props["kraftwerk.release"] = args.release
    for item in getattr(args, "override", None) or []:
        key, sep, value = item.partition("=")
        if not sep:
            raise UsageError(f"--override expects key=value, got {item!r}")
        props[key] = value
    if getattr(args, "zookeeper", None):
        props["zookeeper.connect"] = args.zookeeper
    try:
        config = config_from_properties(props)
    except ValueError as exc:
        raise UsageError(f"bad configuration: {exc}") from None
    if not config.zookeeper_connect:
        raise UsageError("a ZooKeeper-mode broker needs --zookeeper HOST:PORT or zookeeper.connect")
    if config.release is not None:
        try:
            release(config.release)
        except ValueError as exc:
            raise UsageError(str(exc)) from None
    config.extra.pop("broker.id", None)
    return replace(config, process_roles=("broker",))


def run(args) -> int:
    # A stop signal from here on is noted, not fatal (cli/node_process.py): a broker stopped
    # while it loads or registers still closes its session and exits 0.
    with StopSignals() as early:
        return _run(args, early)


def _run(args, early: StopSignals) -> int:
    # deferred import: the broker node loads the whole request path (~0.3 s); every kraftwerk
    # command imports this module for its arguments, only this one runs the node.
    from server.nodes.zkbroker import ZkBrokerFatalError, ZkBrokerNode

    try:
        config = build_config(args)
    except UsageError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    configure_logging(config.log_level)
    node = ZkBrokerNode(config)
    port_file = getattr(args, "port_file", None)

    def started(port) -> None:
        gc.freeze()  # start-up's objects live as long as the process: see cli/main.py
        if port_file:
            Path(port_file).write_text(f"{port}\n")

    async def stop() -> None:
        node.request_stop()  # closes the ZooKeeper session, so the registration goes at once

    use_serving_thresholds()  # the collector as every serving process runs it: see server/collector.py
    try:
        trio.run(serve_until_stopped, node.run, stop, started, early, config.node_id, FINISH_STARTING_S)
    except BaseExceptionGroup as group:
        refusal = listener_refusal(group)
        if refusal is not None:
            print(f"error: {refusal_message(refusal)}", file=sys.stderr)
            return EXIT_FAILED
        fatal = group.subgroup((ZkBrokerFatalError, ZkConnectionError))
        if fatal is None:
            raise
        print(f"error: {_first_leaf(fatal)}", file=sys.stderr)
        return EXIT_FAILED
    except ListenerBindError as exc:
        print(f"error: {refusal_message(exc)}", file=sys.stderr)
        return EXIT_FAILED
    except (ZkBrokerFatalError, ZkConnectionError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_FAILED
    return EXIT_OK


def _first_leaf(group: BaseException) -> BaseException:
    while isinstance(group, BaseExceptionGroup):
        group = group.exceptions[0]
    return group


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="kraftwerk broker --zookeeper",
                                     description="A ZooKeeper-mode Kafka broker agent (KIP-866 migration).")
    add_arguments(parser)
    return run(parser.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
