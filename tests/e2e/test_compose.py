"""docker-compose.yml and deploy/*.properties: the local topology, checked without a Docker engine.

Owns: the checks that the compose file describes 3 controllers and 3 broker
agents, that every `kraftwerk ...` command line in it (commands and health
checks) is one our CLI accepts, that every mounted properties file exists and
loads, and that all nodes agree on one voter set; and the same for
deploy/docker-compose.migration.yml, that topology as a KIP-866 migration
(ZooKeeper, ZooKeeper-mode brokers, controllers with the switch, the brokers' KRaft
mode under a profile).

Rules kept here:
- `docker-compose config` is the authority on the file's syntax; where it is not
  installed that one test is skipped (with the reason) and the rest still run.
- The file is read with PyYAML when it is importable, else with the small reader
  below, which knows only the YAML this file uses and raises on anything else
  (so a new construct fails loudly instead of being misread).
"""

from __future__ import annotations

import argparse
import shlex
import shutil
import subprocess
from pathlib import Path

import pytest

from cli.main import build_parser
from cli.zk_broker import build_config
from server.config import load_config

pytestmark = pytest.mark.e2e

REPO = Path(__file__).resolve().parents[2]
COMPOSE_FILE = REPO / "docker-compose.yml"
DEPLOY = REPO / "deploy"
COMPOSE_TIMEOUT_S = 60.0

CONTROLLER_IDS = (1, 2, 3)
BROKER_IDS = (101, 102, 103)
CONTROLLER_PORT = 9093
BROKER_PORT = 9092


# --------------------------------------------------------------------------
# a reader for the YAML subset docker-compose.yml uses
# --------------------------------------------------------------------------

class YamlSubsetError(ValueError):
    """The file uses YAML this reader does not know; teach it, or install PyYAML."""


def _strip_comment(text: str) -> str:
    quote = None
    for index, char in enumerate(text):
        if quote:
            if char == quote:
                quote = None
        elif char in "\"'":
            quote = char
        elif char == "#" and (index == 0 or text[index - 1] in " \t"):
            return text[:index].rstrip()
    return text.rstrip()


def _split_flow(text: str, line_no: int) -> list[str]:
    """The items of a one-line flow sequence `[a, "b", 'c']` (no nesting)."""
    inner = text[1:-1]
    items, current, quote = [], "", None
    for char in inner:
        if quote:
            current += char
            if char == quote:
                quote = None
        elif char in "\"'":
            quote = char
            current += char
        elif char == ",":
            items.append(current.strip())
            current = ""
        elif char in "[]{}":
            raise YamlSubsetError(f"line {line_no}: nested flow collections are not supported")
        else:
            current += char
    if quote:
        raise YamlSubsetError(f"line {line_no}: unterminated quote in {text!r}")
    if current.strip():
        items.append(current.strip())
    return items


def _scalar(text: str, line_no: int):
    if text[:1] == '"':
        if len(text) < 2 or text[-1] != '"' or "\\" in text:
            raise YamlSubsetError(f"line {line_no}: unsupported double-quoted scalar {text!r}")
        return text[1:-1]
    if text[:1] == "'":
        if len(text) < 2 or text[-1] != "'":
            raise YamlSubsetError(f"line {line_no}: unsupported single-quoted scalar {text!r}")
        return text[1:-1].replace("''", "'")
    if text[:1] in "{|>!%@`&*":
        raise YamlSubsetError(f"line {line_no}: unsupported value {text!r}")
    # YAML 1.1 resolution, as PyYAML does, for the plain scalars a compose file has.
    if text in ("", "~", "null", "Null", "NULL"):
        return None
    if text in ("true", "True", "TRUE", "yes", "Yes", "on", "On"):
        return True
    if text in ("false", "False", "FALSE", "no", "No", "off", "Off"):
        return False
    if text.lstrip("-").isdigit():
        return int(text)
    return text


def _split_key(text: str, line_no: int) -> tuple[str, str]:
    quote = None
    for index, char in enumerate(text):
        if quote:
            if char == quote:
                quote = None
        elif char in "\"'":
            quote = char
        elif char == ":" and (index + 1 == len(text) or text[index + 1] == " "):
            key = text[:index].strip()
            if key[:1] in "\"'":
                key = _scalar(key, line_no)
            return key, text[index + 1 :].strip()
    raise YamlSubsetError(f"line {line_no}: expected `key: value`, got {text!r}")


class _Reader:
    def __init__(self, text: str) -> None:
        # (line number, indent, content) of every line that carries content.
        self.lines: list[tuple[int, int, str]] = []
        self.anchors: dict[str, object] = {}
        for line_no, raw in enumerate(text.splitlines(), start=1):
            if "\t" in raw[: len(raw) - len(raw.lstrip())]:
                raise YamlSubsetError(f"line {line_no}: tabs in indentation")
            content = _strip_comment(raw)
            if content.strip():
                self.lines.append((line_no, len(content) - len(content.lstrip()), content.strip()))
        # Block scalars keep their raw lines (a `#` inside them is text, not a comment).
        self.raw = text.splitlines()

    def document(self):
        if not self.lines:
            return None
        value, index = self.block(0, self.lines[0][1])
        if index != len(self.lines):
            line_no = self.lines[index][0]
            raise YamlSubsetError(f"line {line_no}: unexpected indentation")
        return value

    def block(self, index: int, indent: int):
        if self.lines[index][2] == "-" or self.lines[index][2].startswith("- "):
            return self.sequence(index, indent)
        return self.mapping(index, indent)

    def mapping(self, index: int, indent: int):
        result: dict = {}
        merged: dict = {}
        while index < len(self.lines):
            line_no, line_indent, content = self.lines[index]
            if line_indent < indent:
                break
            if line_indent > indent or content.startswith("- "):
                raise YamlSubsetError(f"line {line_no}: unexpected indentation or sequence item")
            key, rest = _split_key(content, line_no)
            value, index = self.value(rest, index, indent, line_no)
            if key == "<<":
                if not isinstance(value, dict):
                    raise YamlSubsetError(f"line {line_no}: `<<` merges a mapping alias only")
                merged.update(value)
            elif key in result:
                raise YamlSubsetError(f"line {line_no}: duplicate key {key!r}")
            else:
                result[key] = value
        # Merge keys never override keys written in the mapping itself.
        return {**merged, **result}, index

    def sequence(self, index: int, indent: int):
        result: list = []
        while index < len(self.lines):
            line_no, line_indent, content = self.lines[index]
            if line_indent < indent:
                break
            if line_indent > indent or not (content == "-" or content.startswith("- ")):
                raise YamlSubsetError(f"line {line_no}: unexpected indentation in a sequence")
            rest = content[1:].strip()
            if rest and rest[0] not in "\"'[>|*&" and _looks_like_key(rest):
                raise YamlSubsetError(f"line {line_no}: mappings inside sequences are not supported")
            value, index = self.value(rest, index, indent, line_no)
            result.append(value)
        return result, index

    def value(self, rest: str, index: int, indent: int, line_no: int):
        """The value that follows `key:` or `-` on line `index`; returns it and the next line index."""
        anchor = None
        if rest.startswith("&"):
            anchor, _, rest = rest.partition(" ")
            anchor = anchor[1:]
            rest = rest.strip()
        if rest.startswith("*"):
            name = rest[1:]
            if name not in self.anchors:
                raise YamlSubsetError(f"line {line_no}: unknown alias *{name}")
            value, index = self.anchors[name], index + 1
        elif rest in (">", ">-", "|", "|-"):
            value, index = self.block_scalar(rest, index, indent)
        elif rest.startswith("["):
            if not rest.endswith("]"):
                raise YamlSubsetError(f"line {line_no}: multi-line flow sequences are not supported")
            value = [_scalar(item, line_no) for item in _split_flow(rest, line_no)]
            index += 1
        elif rest:
            value, index = _scalar(rest, line_no), index + 1
        elif index + 1 < len(self.lines) and self.lines[index + 1][1] > indent:
            value, index = self.block(index + 1, self.lines[index + 1][1])
        else:
            value, index = None, index + 1
        if anchor is not None:
            self.anchors[anchor] = value
        return value, index

    def block_scalar(self, style: str, index: int, indent: int):
        line_no = self.lines[index][0]
        parts: list[str] = []
        index += 1
        while index < len(self.lines) and self.lines[index][1] > indent:
            raw = self.raw[self.lines[index][0] - 1]
            parts.append(raw.strip())
            index += 1
        if not parts:
            raise YamlSubsetError(f"line {line_no}: empty block scalar")
        # Blank or comment-only lines inside would be text (or line breaks) there; not handled.
        if self.lines[index - 1][0] - line_no != len(parts):
            raise YamlSubsetError(f"line {line_no}: blank or comment lines inside a block scalar")
        text = (" " if style.startswith(">") else "\n").join(parts)
        return (text if style.endswith("-") else text + "\n"), index


def _looks_like_key(text: str) -> bool:
    try:
        _split_key(text, 0)
    except YamlSubsetError:
        return False
    return True


def read_yaml_subset(text: str):
    return _Reader(text).document()


def load_compose() -> dict:
    text = COMPOSE_FILE.read_text()
    try:
        import yaml
    except ImportError:
        return read_yaml_subset(text)
    return yaml.safe_load(text)


# --------------------------------------------------------------------------
# what the compose file says
# --------------------------------------------------------------------------

def _interpolate(text: str) -> str:
    # Compose turns `$$` into a literal `$` before the shell sees the command.
    return text.replace("$$", "$")


def command_lines(service: dict) -> list[str]:
    """The shell command lines a service runs (entrypoint is `/bin/sh -c`)."""
    command = service.get("command")
    if command is None:
        return []
    return [_interpolate(command)] if isinstance(command, str) else [_interpolate(str(c)) for c in command]


def kraftwerk_invocations(line: str) -> list[list[str]]:
    """Every `kraftwerk ...` argv in a shell line, split on `&&`."""
    found = []
    for part in line.split("&&"):
        if any(token in part for token in (";", "||", "|", "`", "$(")):
            raise AssertionError(f"command part {part!r} uses shell syntax this check does not follow")
        argv = shlex.split(part)
        if argv[:1] == ["exec"]:
            argv = argv[1:]
        if argv[:1] == ["kraftwerk"]:
            found.append(argv)
    return found


def healthcheck_invocation(service: dict) -> list[str] | None:
    test = (service.get("healthcheck") or {}).get("test")
    if test is None:
        return None
    if isinstance(test, str):
        argv = shlex.split(test)
    elif test[0] == "CMD":
        argv = [str(item) for item in test[1:]]
    elif test[0] == "CMD-SHELL":
        argv = shlex.split(test[1])
    else:
        raise AssertionError(f"unknown healthcheck test form {test!r}")
    return argv if argv[:1] == ["kraftwerk"] else None


def mounts(service: dict) -> dict[str, str]:
    """Container path -> host path (or named volume) of a service's volumes."""
    result = {}
    for entry in service.get("volumes", []):
        source, target = entry.split(":")[:2]
        result[target] = source
    return result


def config_file(service: dict, container_path: str) -> Path:
    source = mounts(service).get(container_path)
    assert source is not None, f"{container_path} is not mounted into the service"
    assert source.startswith("./deploy/"), f"{container_path} comes from {source}, not deploy/"
    return REPO / source


def role_of(service: dict) -> str:
    """`controller` or `broker`: the kraftwerk process the service's command runs."""
    roles = {argv[1] for line in command_lines(service) for argv in kraftwerk_invocations(line)
             if argv[1] in ("controller", "broker")}
    assert len(roles) == 1, f"a service runs exactly one kraftwerk process, found {roles or 'none'}"
    return roles.pop()


@pytest.fixture(scope="module")
def compose() -> dict:
    return load_compose()


@pytest.fixture(scope="module")
def services(compose) -> dict[str, dict]:
    return compose["services"]


def services_by_role(services: dict[str, dict], role: str) -> dict[str, dict]:
    return {name: service for name, service in services.items() if role_of(service) == role}


# --------------------------------------------------------------------------
# the tests
# --------------------------------------------------------------------------

def _compose_command() -> list[str] | None:
    if shutil.which("docker-compose"):
        return ["docker-compose"]
    if shutil.which("docker"):
        probe = subprocess.run(["docker", "compose", "version"], capture_output=True, timeout=COMPOSE_TIMEOUT_S)
        if probe.returncode == 0:
            return ["docker", "compose"]
    return None


def test_docker_compose_accepts_the_file():
    command = _compose_command()
    if command is None:
        pytest.skip("neither docker-compose nor `docker compose` is on PATH (apt-get install docker-compose)")
    result = subprocess.run([*command, "-f", str(COMPOSE_FILE), "config"], cwd=REPO, capture_output=True,
                            text=True, timeout=COMPOSE_TIMEOUT_S)
    assert result.returncode == 0, result.stderr
    listed = subprocess.run([*command, "-f", str(COMPOSE_FILE), "config", "--services"], cwd=REPO,
                            capture_output=True, text=True, timeout=COMPOSE_TIMEOUT_S)
    assert listed.returncode == 0, listed.stderr
    expected = {f"controller-{n}" for n in CONTROLLER_IDS} | {f"broker-{n}" for n in BROKER_IDS}
    assert set(listed.stdout.split()) == expected


def test_the_subset_reader_agrees_with_pyyaml():
    yaml = pytest.importorskip("yaml", reason="PyYAML is not installed; nothing to compare the reader with")
    assert read_yaml_subset(COMPOSE_FILE.read_text()) == yaml.safe_load(COMPOSE_FILE.read_text())


def test_the_subset_reader_refuses_what_it_does_not_know():
    with pytest.raises(YamlSubsetError):
        read_yaml_subset("a:\n  - b: c\n")  # a mapping inside a sequence
    with pytest.raises(YamlSubsetError):
        read_yaml_subset("a: {b: c}\n")  # a flow mapping
    with pytest.raises(YamlSubsetError):
        read_yaml_subset("a: *missing\n")


def test_the_subset_reader_reads_anchors_merges_and_folded_commands():
    text = (
        "x: &base\n"
        "  image: kraftwerk  # a comment\n"
        "  ports: [\"9093:9093\", '1']\n"
        "s:\n"
        "  one:\n"
        "    <<: *base\n"
        "    image: other\n"
        "    command:\n"
        "      - >-\n"
        "        kraftwerk a --x \"#1\" &&\n"
        "        exec kraftwerk b\n"
        "v:\n"
        "  data:\n"
    )
    assert read_yaml_subset(text) == {
        "x": {"image": "kraftwerk", "ports": ["9093:9093", "1"]},
        "s": {"one": {"image": "other", "ports": ["9093:9093", "1"],
                      "command": ['kraftwerk a --x "#1" && exec kraftwerk b']}},
        "v": {"data": None},
    }


def test_the_topology_is_three_controllers_and_three_brokers(compose, services):
    controllers = services_by_role(services, "controller")
    brokers = services_by_role(services, "broker")
    assert sorted(controllers) == [f"controller-{n}" for n in CONTROLLER_IDS]
    assert sorted(brokers) == [f"broker-{n}" for n in BROKER_IDS]
    assert len(services) == len(controllers) + len(brokers)

    for name, service in services.items():
        # Peers and clients reach a node by the name it advertises: its hostname.
        assert service["hostname"] == name
        data = mounts(service).get("/var/lib/kraftwerk")
        assert data == f"{name}-data", f"{name} must keep its metadata in its own volume"
        assert data in compose["volumes"]
        assert service["environment"]["KRAFTWERK_CLUSTER_ID"] == services["controller-1"]["environment"][
            "KRAFTWERK_CLUSTER_ID"], "every node of one cluster shares its cluster id"

    for name, broker in brokers.items():
        depends = broker["depends_on"]
        assert set(depends) == set(controllers), f"{name} waits for every controller"
        assert all(depends[c]["condition"] == "service_healthy" for c in controllers)

    host_ports = [str(port).split(":")[0] for service in services.values() for port in service["ports"]]
    assert len(host_ports) == len(set(host_ports)) == len(services), "one distinct host port per node"
    assert {str(p).split(":")[1] for b in brokers.values() for p in b["ports"]} == {str(BROKER_PORT)}
    assert {str(p).split(":")[1] for c in controllers.values() for p in c["ports"]} == {str(CONTROLLER_PORT)}


def strict_parser():
    """The CLI's parser, refusing abbreviated flags: argparse would take `--timeout` for
    `--timeout-s`, and a deployment file should spell the flags the CLI documents."""
    parser = build_parser()
    pending = [parser]
    while pending:
        current = pending.pop()
        current.allow_abbrev = False
        for action in current._actions:
            if isinstance(action, argparse._SubParsersAction):
                pending.extend(action.choices.values())
    return parser


def test_every_kraftwerk_command_line_is_one_the_cli_accepts(services):
    parser = strict_parser()
    checked = 0
    for name, service in services.items():
        invocations = [argv for line in command_lines(service) for argv in kraftwerk_invocations(line)]
        health = healthcheck_invocation(service)
        assert health is not None, f"{name}'s health check asks kraftwerk itself"
        assert [argv[1:3] for argv in invocations][:1] == [["storage", "format"]], \
            f"{name} formats its metadata directory before it starts"
        for argv in [*invocations, health]:
            try:
                args = parser.parse_args(argv[1:])
            except SystemExit as exc:  # argparse's way of refusing a command line
                pytest.fail(f"{name}: `{shlex.join(argv)}` is not a valid kraftwerk command line (exit {exc.code})")
            checked += 1
            if getattr(args, "config", None):
                # The file the command names is mounted from deploy/ and is for this role.
                config = load_config(config_file(service, args.config))
                assert config.process_roles == (role_of(service),), f"{name}: {args.config} has the wrong role"
    # 3 controllers and 3 brokers, each: format, run, health check.
    assert checked == 3 * len(services) == 18


def test_health_checks_ask_the_nodes_own_listener(services):
    for name, service in services.items():
        args = strict_parser().parse_args(healthcheck_invocation(service)[1:])
        config_path = "/etc/kraftwerk/controller.properties" if role_of(service) == "controller" \
            else "/etc/kraftwerk/broker.properties"
        config = load_config(config_file(service, config_path))
        if config.is_broker:
            address = args.bootstrap_server
        else:
            address = args.bootstrap_controller
        assert address == f"127.0.0.1:{config.listener.port}", name
        assert args.timeout_s < 5, f"{name}: the CLI gives up before Docker's health-check timeout"


def test_every_deploy_file_is_used_and_all_nodes_agree_on_the_voters(services):
    referenced = {
        config_file(service, target).name
        for service in services.values()
        for target, source in mounts(service).items()
        if source.startswith("./deploy/")
    }
    on_disk = {path.name for path in DEPLOY.glob("*.properties")}
    assert referenced == on_disk, "every deploy/ file is mounted, every mounted file exists"

    controllers = [load_config(DEPLOY / f"controller-{n}.properties") for n in CONTROLLER_IDS]
    brokers = [load_config(DEPLOY / f"broker-{n}.properties") for n in BROKER_IDS]
    assert [c.node_id for c in controllers] == list(CONTROLLER_IDS)
    assert [b.node_id for b in brokers] == list(BROKER_IDS)
    ids = [config.node_id for config in controllers + brokers]
    assert len(ids) == len(set(ids)), "a broker id must not name a controller"
    assert all(c.process_roles == ("controller",) for c in controllers)
    assert all(b.process_roles == ("broker",) for b in brokers)

    (voters,) = {config.quorum_voters for config in controllers + brokers}
    assert [(v.node_id, v.host, v.port) for v in voters] == [
        (n, f"controller-{n}", CONTROLLER_PORT) for n in CONTROLLER_IDS]
    for config in controllers + brokers:
        name = f"{'broker' if config.is_broker else 'controller'}-{config.node_id}"
        assert (config.advertised_listener.host, config.advertised_listener.port) == (name, config.listener.port)
        assert config.listener.host == "0.0.0.0", f"{name} binds every interface of its container"
        assert config.listener.port == (BROKER_PORT if config.is_broker else CONTROLLER_PORT)
        # The metadata directory lies inside the node's own volume.
        assert config.metadata_log_dir == Path("/var/lib/kraftwerk") / name
    assert {b.listener.name for b in brokers} == {"PLAINTEXT"}
    assert {c.listener.name for c in controllers} == {"CONTROLLER"}


def test_the_cluster_id_is_a_kafka_uuid(services):
    from server.storage.meta_properties import parse_uuid_string

    parse_uuid_string(services["controller-1"]["environment"]["KRAFTWERK_CLUSTER_ID"])


# --------------------------------------------------------------------------
# deploy/docker-compose.migration.yml: the same topology as a KIP-866 migration
# --------------------------------------------------------------------------

MIGRATION_FILE = DEPLOY / "docker-compose.migration.yml"
ZK_BROKER_IDS = (1, 2, 3)
MIGRATION_CONTROLLER_IDS = (3000, 3001, 3002)
ZOOKEEPER_CONNECT = "zookeeper:2181"


@pytest.fixture(scope="module")
def migration_services() -> dict[str, dict]:
    text = MIGRATION_FILE.read_text()
    try:
        import yaml
    except ImportError:
        return read_yaml_subset(text)["services"]
    return yaml.safe_load(text)["services"]


def migration_config(service: dict, container_path: str, overrides: dict[str, str] | None = None):
    source = mounts(service).get(container_path)
    assert source is not None and source.startswith("./migration/"), f"{container_path} comes from {source}"
    return load_config(DEPLOY / source, overrides or {})


def test_docker_compose_accepts_the_migration_file():
    command = _compose_command()
    if command is None:
        pytest.skip("neither docker-compose nor `docker compose` is on PATH (apt-get install docker-compose)")
    result = subprocess.run([*command, "-f", str(MIGRATION_FILE), "--profile", "kraft", "config", "--services"],
                            cwd=REPO, capture_output=True, text=True, timeout=COMPOSE_TIMEOUT_S)
    assert result.returncode == 0, result.stderr
    expected = ({"zookeeper", "zookeeper-init"} | {f"zk-broker-{n}" for n in ZK_BROKER_IDS}
                | {f"controller-{n}" for n in MIGRATION_CONTROLLER_IDS} | {f"broker-{n}" for n in ZK_BROKER_IDS})
    assert set(result.stdout.split()) == expected


def test_the_migration_topology_migrates_the_same_brokers(migration_services):
    services = migration_services
    parser = strict_parser()
    kraftwerk_services = {name: s for name, s in services.items() if name not in ("zookeeper", "zookeeper-init")}
    cluster_ids = {services["zookeeper-init"]["environment"]["KRAFTWERK_CLUSTER_ID"]}
    referenced = set()
    for name, service in kraftwerk_services.items():
        assert service["hostname"] == name
        cluster_ids.add(service["environment"]["KRAFTWERK_CLUSTER_ID"])
        referenced |= {Path(source).name for source in mounts(service).values() if source.startswith("./")}
        invocations = [argv for line in command_lines(service) for argv in kraftwerk_invocations(line)]
        for argv in [*invocations, healthcheck_invocation(service)]:
            try:
                parser.parse_args(argv[1:])
            except SystemExit as exc:
                pytest.fail(f"{name}: `{shlex.join(argv)}` is not a valid kraftwerk command line (exit {exc.code})")
    # One cluster: zookeeper-init writes the controllers' cluster id into /cluster/id.
    assert len(cluster_ids) == 1
    assert "/cluster/id" in command_lines(services["zookeeper-init"])[0]
    assert referenced == {path.name for path in (DEPLOY / "migration").glob("*.properties")}

    voters = set()
    for n in ZK_BROKER_IDS:
        zk_broker, kraft_broker = services[f"zk-broker-{n}"], services[f"broker-{n}"]
        (argv,) = kraftwerk_invocations(command_lines(zk_broker)[0])
        args = parser.parse_args(argv[1:])
        assert args.zookeeper == ZOOKEEPER_CONNECT
        args.config = str(DEPLOY / mounts(zk_broker)[args.config])
        zk_config = build_config(args)
        assert zk_config.node_id == n and zk_config.migration_enabled
        assert zk_config.advertised_listener.host == f"zk-broker-{n}"
        assert "profiles" not in zk_broker
        # In KRaft mode: the same id on the same host port, started only with --profile kraft.
        kraft_config = migration_config(kraft_broker, "/etc/kraftwerk/broker.properties")
        assert kraft_config.node_id == n and kraft_config.process_roles == ("broker",)
        assert kraft_broker["ports"] == zk_broker["ports"]
        assert kraft_broker["profiles"] == ["kraft"]
        voters.add(kraft_config.quorum_voters)
    for n in MIGRATION_CONTROLLER_IDS:
        controller = services[f"controller-{n}"]
        invocations = kraftwerk_invocations(command_lines(controller)[0])
        assert [argv[1:3] for argv in invocations][0] == ["storage", "format"]
        run = parser.parse_args(invocations[-1][1:])
        # The switch comes from KRAFTWERK_MIGRATION: true unless the host sets it (finalizing).
        assert run.override == ["kafka.metadata.migration.enable=$KRAFTWERK_MIGRATION"]
        assert controller["environment"]["KRAFTWERK_MIGRATION"] == "${KRAFTWERK_MIGRATION:-true}"
        for switch, enabled in (("true", True), ("false", False)):
            config = migration_config(controller, run.config, {"kafka.metadata.migration.enable": switch})
            assert config.migration_enabled is enabled
            assert config.node_id == n and config.zookeeper_connect == ZOOKEEPER_CONNECT
        voters.add(config.quorum_voters)
    (voters,) = voters
    assert [(v.node_id, v.host, v.port) for v in voters] == [
        (n, f"controller-{n}", CONTROLLER_PORT) for n in MIGRATION_CONTROLLER_IDS]


def test_the_migration_files_operator_commands_parse():
    """The kraftwerk commands in the file's header (status, rollback) are ones the CLI accepts."""
    commands = []
    for line in MIGRATION_FILE.read_text().splitlines():
        if line.startswith("#") and "kraftwerk migration" in line:
            text = line.lstrip("#").strip().split("#")[0]
            commands.append(shlex.split(text[text.index("kraftwerk migration"):].rstrip('"')))
    assert [argv[1:3] for argv in commands] == [["migration", "status"], ["migration", "rollback"]]
    parser = strict_parser()
    for argv in commands:
        parser.parse_args(argv[1:])
