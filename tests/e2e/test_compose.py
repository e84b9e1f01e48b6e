"""The compose files and their properties, checked without a Docker engine.

Owns: the checks that docker-compose.yml, with either network file
(docker-compose.override.yml: a bridge, ports published; deploy/docker-compose.host.yml:
host networking), describes 3 controllers and 3 broker agents; that every
`kraftwerk ...` command line in it (commands and health checks) is one our CLI accepts;
that every mounted properties file exists, loads and is for the node's role; that all
nodes agree on one voter set and advertise addresses their peers and the host's clients
reach; that each health check asks its own node; and the same for
deploy/docker-compose.migration.yml, that topology as a KIP-866 migration (ZooKeeper,
ZooKeeper-mode brokers, controllers with the switch, the brokers' KRaft mode under a
profile). tests/compose/ runs the files on a real engine.

Rules kept here:
- `docker-compose config` is the authority: each variant is checked as compose resolves
  it (anchors merged, the network file over docker-compose.yml, paths made absolute).
  Without docker-compose these tests skip, saying so (CI=true fails them).
"""

from __future__ import annotations

import argparse
import re
import shlex
import shutil
import subprocess
import tomllib
from pathlib import Path

import pytest
import yaml

from cli.main import build_parser
from cli.probe import build_parser as build_probe_parser
from cli.zk_broker import build_config
from server.config import load_config

pytestmark = pytest.mark.e2e

REPO = Path(__file__).resolve().parents[2]
COMPOSE_FILE = REPO / "docker-compose.yml"
DEPLOY = REPO / "deploy"
COMPOSE_TIMEOUT_S = 60.0

CONTROLLER_IDS = (1, 2, 3)
BROKER_IDS = (101, 102, 103)
# Where the host reaches each node, in both variants (bridge: published as these).
CONTROLLER_HOST_PORTS = {1: 9093, 2: 9094, 3: 9095}
BROKER_HOST_PORTS = {101: 9092, 102: 9192, 103: 9292}
# Inside a bridge network every controller listens on Kafka's usual port.
BRIDGE_CONTROLLER_PORT = 9093
BRIDGE_INTERNAL_BROKER_PORT = 19092
# The tests' local clusters take 20000-32767: fixed compose ports stay below.
LOCAL_CLUSTER_PORTS_LOW = 20_000
VARIANTS = {
    "bridge": (COMPOSE_FILE, REPO / "docker-compose.override.yml"),
    "host": (COMPOSE_FILE, DEPLOY / "docker-compose.host.yml"),
}


# --------------------------------------------------------------------------
# what a compose file says
# --------------------------------------------------------------------------

def _compose_command() -> list[str] | None:
    if shutil.which("docker-compose"):
        return ["docker-compose"]
    if shutil.which("docker"):
        probe = subprocess.run(["docker", "compose", "version"], capture_output=True, timeout=COMPOSE_TIMEOUT_S)
        if probe.returncode == 0:
            return ["docker", "compose"]
    return None


def compose_config(*files: Path, extra: tuple[str, ...] = ()) -> subprocess.CompletedProcess:
    command = _compose_command()
    if command is None:
        pytest.skip("neither docker-compose nor `docker compose` is on PATH (apt-get install docker-compose)")
    argv = [*command]
    for path in files:
        argv += ["-f", str(path)]
    return subprocess.run([*argv, "config", *extra], cwd=REPO, capture_output=True, text=True,
                          timeout=COMPOSE_TIMEOUT_S)


def resolved(*files: Path) -> dict:
    """The compose model of `files` as docker-compose resolves it."""
    result = compose_config(*files)
    assert result.returncode == 0, result.stderr
    return yaml.safe_load(result.stdout)


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


def healthcheck_probe(service: dict) -> argparse.Namespace:
    """The arguments of a service's healthcheck, which must be `python -m cli.probe ADDRESS
    [--timeout-s S]` (a healthcheck that loads the whole CLI costs a core on a small host)."""
    test = (service.get("healthcheck") or {}).get("test")
    assert test is not None and test[0] == "CMD", f"unknown healthcheck test form {test!r}"
    argv = [str(item) for item in test[1:]]
    assert argv[:3] == ["python", "-m", "cli.probe"], f"the healthcheck {shlex.join(argv)} is not cli.probe"
    try:
        return build_probe_parser().parse_args(argv[3:])
    except SystemExit as exc:  # argparse's way of refusing a command line
        pytest.fail(f"`{shlex.join(argv)}` is not a valid probe command line (exit {exc.code})")


def mounts(service: dict) -> dict[str, str]:
    """Container path -> host path (or named volume) of a service's volumes."""
    result = {}
    for entry in service.get("volumes", []):
        source, target = entry.split(":")[:2]
        result[target] = source
    return result


def role_of(service: dict) -> str:
    """`controller` or `broker`: the kraftwerk process the service's command runs."""
    roles = {argv[1] for line in command_lines(service) for argv in kraftwerk_invocations(line)
             if argv[1] in ("controller", "broker")}
    assert len(roles) == 1, f"a service runs exactly one kraftwerk process, found {roles or 'none'}"
    return roles.pop()


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


def container_config_path(service: dict) -> str:
    return f"/etc/kraftwerk/{role_of(service)}.properties"


def _published(entry) -> tuple[int, int]:
    """(host port, container port) of one `ports:` entry as `config` prints it."""
    if isinstance(entry, dict):
        return int(entry["published"]), int(entry["target"])
    host, container = str(entry).split("/")[0].split(":")[-2:]
    return int(host), int(container)


# --------------------------------------------------------------------------
# docker-compose.yml with each network file
# --------------------------------------------------------------------------

@pytest.fixture(scope="module", params=sorted(VARIANTS))
def variant(request) -> str:
    return request.param


@pytest.fixture(scope="module")
def compose(variant) -> dict:
    return resolved(*VARIANTS[variant])


@pytest.fixture(scope="module")
def services(compose) -> dict[str, dict]:
    return compose["services"]


def services_by_role(services: dict[str, dict], role: str) -> dict[str, dict]:
    return {name: service for name, service in services.items() if role_of(service) == role}


def node_config(variant: str, service: dict):
    """The node's properties: the file mounted at its config path, from deploy/<variant>/."""
    source = Path(mounts(service)[container_config_path(service)])
    assert source.parent == DEPLOY / variant, f"{source} is not one of deploy/{variant}/"
    return load_config(source)


def test_docker_compose_alone_and_with_each_network_file_names_the_same_six_services():
    expected = {f"controller-{n}" for n in CONTROLLER_IDS} | {f"broker-{n}" for n in BROKER_IDS}
    for files in [(COMPOSE_FILE,), *VARIANTS.values()]:
        listed = compose_config(*files, extra=("--services",))
        assert listed.returncode == 0, listed.stderr
        assert set(listed.stdout.split()) == expected, files


def test_the_topology_is_three_controllers_and_three_brokers(variant, compose, services):
    controllers = services_by_role(services, "controller")
    brokers = services_by_role(services, "broker")
    assert sorted(controllers) == [f"controller-{n}" for n in CONTROLLER_IDS]
    assert sorted(brokers) == [f"broker-{n}" for n in BROKER_IDS]
    assert len(services) == len(controllers) + len(brokers)
    for name, service in services.items():
        data = mounts(service).get("/var/lib/kraftwerk")
        assert data == f"{name}-data", f"{name} must keep its metadata in its own volume"
        assert data in compose["volumes"]
        assert service["environment"]["KRAFTWERK_CLUSTER_ID"] == services["controller-1"]["environment"][
            "KRAFTWERK_CLUSTER_ID"], "every node of one cluster shares its cluster id"
        assert service["image"] == "kraftwerk:0.1.0"
        assert service["build"]["network"] == "host", "a RUN step on an engine without a bridge needs the host's"
    for name, broker in brokers.items():
        depends = broker["depends_on"]
        assert set(depends) == set(controllers), f"{name} waits for every controller"
        assert all(depends[c]["condition"] == "service_healthy" for c in controllers)

    if variant == "host":
        for name, service in services.items():
            assert service.get("network_mode") == "host", name
            assert not service.get("ports"), f"{name}: compose refuses ports with host networking"
        return
    published = {name: [_published(entry) for entry in service["ports"]] for name, service in services.items()}
    for node_id, port in CONTROLLER_HOST_PORTS.items():
        assert published[f"controller-{node_id}"] == [(port, BRIDGE_CONTROLLER_PORT)]
    for node_id, port in BROKER_HOST_PORTS.items():
        # Published as itself: the address the broker advertises to the host's clients.
        assert published[f"broker-{node_id}"] == [(port, port)]
    for name, service in services.items():
        # Peers reach a node by the name it advertises inside the network: its hostname.
        assert service["hostname"] == name


def test_every_kraftwerk_command_line_is_one_the_cli_accepts(variant, services):
    parser = strict_parser()
    checked = 0
    for name, service in services.items():
        invocations = [argv for line in command_lines(service) for argv in kraftwerk_invocations(line)]
        healthcheck_probe(service)
        checked += 1
        assert [argv[1:3] for argv in invocations][:1] == [["storage", "format"]], \
            f"{name} formats its metadata directory before it starts"
        for argv in invocations:
            try:
                args = parser.parse_args(argv[1:])
            except SystemExit as exc:  # argparse's way of refusing a command line
                pytest.fail(f"{name}: `{shlex.join(argv)}` is not a valid kraftwerk command line (exit {exc.code})")
            checked += 1
            if getattr(args, "config", None):
                assert args.config == container_config_path(service)
                config = node_config(variant, service)
                assert config.process_roles == (role_of(service),), f"{name}: {args.config} has the wrong role"
    # 3 controllers and 3 brokers, each: format, run, health check.
    assert checked == 3 * len(services) == 18


def test_health_checks_ask_the_nodes_own_listener(variant, services):
    for name, service in services.items():
        args = healthcheck_probe(service)
        config = node_config(variant, service)
        address = args.address
        host, port = address.rsplit(":", 1)
        assert host == "127.0.0.1", name
        own_ports = {listener.port for listener in config.listeners} or {config.listener.port}
        assert int(port) in own_ports, f"{name} checks {address}, not one of its own listeners {own_ports}"
        node_id = config.node_id
        host_port = CONTROLLER_HOST_PORTS.get(node_id) or BROKER_HOST_PORTS[node_id]
        if variant == "host" or config.is_broker:
            # One network namespace (or the port the host's clients use): the node's own port.
            assert int(port) == host_port, name
        assert args.timeout_s < 5, f"{name}: the probe gives up before Docker's health-check timeout"


def test_every_properties_file_is_used_and_all_nodes_agree_on_the_voters(variant, services):
    referenced = {Path(source).name for service in services.values()
                  for target, source in mounts(service).items() if source.startswith(str(DEPLOY))}
    assert referenced == {path.name for path in (DEPLOY / variant).glob("*.properties")}, \
        "every deploy/<variant>/ file is mounted, every mounted file exists"
    configs = {config.node_id: config for config in (node_config(variant, s) for s in services.values())}
    assert sorted(configs) == sorted((*CONTROLLER_IDS, *BROKER_IDS)), "one id names one node"
    controllers = [configs[n] for n in CONTROLLER_IDS]
    brokers = [configs[n] for n in BROKER_IDS]
    assert all(c.process_roles == ("controller",) for c in controllers)
    assert all(b.process_roles == ("broker",) for b in brokers)

    (voters,) = {config.quorum_voters for config in controllers + brokers}
    if variant == "bridge":
        expected_voters = [(n, f"controller-{n}", BRIDGE_CONTROLLER_PORT) for n in CONTROLLER_IDS]
    else:
        expected_voters = [(n, "127.0.0.1", port) for n, port in CONTROLLER_HOST_PORTS.items()]
    assert [(v.node_id, v.host, v.port) for v in voters] == expected_voters
    for config in controllers + brokers:
        name = f"{'broker' if config.is_broker else 'controller'}-{config.node_id}"
        # The metadata directory lies inside the node's own volume.
        assert config.metadata_log_dir == Path("/var/lib/kraftwerk") / name
        advertised = {listener.name: (listener.host, listener.port) for listener in config.advertised_listeners}
        if variant == "host":
            port = CONTROLLER_HOST_PORTS.get(config.node_id) or BROKER_HOST_PORTS[config.node_id]
            assert (config.listener.host, config.listener.port) == ("127.0.0.1", port), name
            assert set(advertised.values()) == {("127.0.0.1", port)}, name
            assert port < LOCAL_CLUSTER_PORTS_LOW
        elif config.is_broker:
            host_port = BROKER_HOST_PORTS[config.node_id]
            assert advertised == {"INTERNAL": (name, BRIDGE_INTERNAL_BROKER_PORT),
                                  "EXTERNAL": ("localhost", host_port)}, name
            assert {(listener.host, listener.port) for listener in config.listeners} == {
                ("0.0.0.0", BRIDGE_INTERNAL_BROKER_PORT), ("0.0.0.0", host_port)}, name
        else:
            assert advertised == {"CONTROLLER": (name, BRIDGE_CONTROLLER_PORT)}, name
            assert (config.listener.host, config.listener.port) == ("0.0.0.0", BRIDGE_CONTROLLER_PORT), name


def test_the_cluster_id_is_a_kafka_uuid(services):
    from server.storage.meta_properties import parse_uuid_string

    parse_uuid_string(services["controller-1"]["environment"]["KRAFTWERK_CLUSTER_ID"])


def test_the_image_carries_every_package_the_project_installs():
    # `pip install .` in the image finds only what the Dockerfile copied in: a package left
    # out installs fine and fails at the first import (cli imports pipeline).
    packages = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"]["find"]["include"]
    copied = set(re.findall(r"^COPY (\w+) \./\1$", (REPO / "Dockerfile").read_text(), re.MULTILINE))
    assert {pattern.rstrip("*") for pattern in packages} == copied


# --------------------------------------------------------------------------
# deploy/docker-compose.migration.yml: the same topology as a KIP-866 migration
# --------------------------------------------------------------------------

MIGRATION_FILE = DEPLOY / "docker-compose.migration.yml"
ZK_BROKER_IDS = (1, 2, 3)
MIGRATION_CONTROLLER_IDS = (3000, 3001, 3002)
# Host networking on 127.0.0.1, one port per node, below the tests' local clusters
# (20000+); a broker keeps its port when it moves from ZooKeeper to KRaft mode.
ZOOKEEPER_CONNECT = "127.0.0.1:12181"
MIGRATION_BROKER_PORTS = {1: 12092, 2: 12192, 3: 12292}
MIGRATION_CONTROLLER_PORTS = {3000: 12093, 3001: 12094, 3002: 12095}
# Built by scripts/compose-images; nothing is pulled from a registry.
MIGRATION_IMAGES = {"kraftwerk:0.1.0", "kraftwerk-zookeeper:3.8"}


@pytest.fixture(scope="module")
def migration_services() -> dict[str, dict]:
    return yaml.safe_load(MIGRATION_FILE.read_text())["services"]


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
        cluster_ids.add(service["environment"]["KRAFTWERK_CLUSTER_ID"])
        referenced |= {Path(source).name for source in mounts(service).values() if source.startswith("./")}
        invocations = [argv for line in command_lines(service) for argv in kraftwerk_invocations(line)]
        healthcheck_probe(service)
        for argv in invocations:
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
        address = ("127.0.0.1", MIGRATION_BROKER_PORTS[n])
        assert (zk_config.listener.host, zk_config.listener.port) == address
        assert (zk_config.advertised_listener.host, zk_config.advertised_listener.port) == address
        assert "profiles" not in zk_broker
        # In KRaft mode: the same id on the same port, started only with --profile kraft.
        kraft_config = migration_config(kraft_broker, "/etc/kraftwerk/broker.properties")
        assert kraft_config.node_id == n and kraft_config.process_roles == ("broker",)
        assert (kraft_config.listener.host, kraft_config.listener.port) == address
        assert (kraft_config.advertised_listener.host, kraft_config.advertised_listener.port) == address
        assert kraft_config.metadata_log_dir == Path("/var/lib/kraftwerk") / f"broker-{n}"
        assert mounts(kraft_broker)["/var/lib/kraftwerk"] == f"broker-{n}-data"
        assert kraft_broker["profiles"] == ["kraft"]
        # The ZooKeeper-mode brokers know the quorum too (they register with it as migrating).
        voters.add(zk_config.quorum_voters)
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
        address = ("127.0.0.1", MIGRATION_CONTROLLER_PORTS[n])
        assert (config.listener.host, config.listener.port) == address
        assert (config.advertised_listener.host, config.advertised_listener.port) == address
        assert config.metadata_log_dir == Path("/var/lib/kraftwerk") / f"controller-{n}"
        assert mounts(controller)["/var/lib/kraftwerk"] == f"controller-{n}-data"
        voters.add(config.quorum_voters)
    (voters,) = voters
    assert [(v.node_id, v.host, v.port) for v in voters] == [
        (n, "127.0.0.1", MIGRATION_CONTROLLER_PORTS[n]) for n in MIGRATION_CONTROLLER_IDS]


def test_the_migration_files_operator_commands_parse():
    """The kraftwerk commands in the file's header (status, rollback) are ones the CLI accepts."""
    commands = []
    for line in MIGRATION_FILE.read_text().splitlines():
        if line.startswith("#") and "kraftwerk migration" in line:
            text = line.lstrip("#").strip().split("#")[0]
            commands.append(shlex.split(text[text.index("kraftwerk migration"):].rstrip('"')))
    assert [argv[1:3] for argv in commands] == [["migration", "status"], ["migration", "rollback"]]
    parser = strict_parser()
    status, rollback = (parser.parse_args(argv[1:]) for argv in commands)
    # From inside a container on the host's network: the controllers' own addresses.
    assert status.bootstrap_controller == f"127.0.0.1:{MIGRATION_CONTROLLER_PORTS[3000]}"
    assert rollback.zookeeper == ZOOKEEPER_CONNECT


def migration_header_commands() -> list[str]:
    """The docker-compose command lines of the migration file's header (continuation
    lines joined, a trailing `# comment` dropped)."""
    commands, current = [], ""
    for line in MIGRATION_FILE.read_text().splitlines():
        if not line.startswith("#"):
            break
        text = line[1:].strip()
        current = f"{current} {text}" if current else text
        if current.endswith("\\"):
            current = current[:-1].rstrip()
            continue
        if "docker-compose -f" in current:
            commands.append(current.split("  #")[0].strip())
        current = ""
    return commands


def test_the_migration_files_documented_commands_run_as_they_are(migration_services):
    """The header's commands name this file, services it has, and --no-deps wherever one
    service is brought up alone: a broker's move would otherwise start the stopped
    ZooKeeper-mode broker again (its dependency through the controllers), which takes the
    port back."""
    commands = migration_header_commands()
    services = set(migration_services)
    ups = []
    for line in commands:
        argv = shlex.split(line)
        while argv and "=" in argv[0]:  # KRAFTWERK_MIGRATION=false docker-compose ...
            argv = argv[1:]
        assert argv[:3] == ["docker-compose", "-f", "deploy/docker-compose.migration.yml"], line
        if "up" in argv:
            named = [arg for arg in argv[argv.index("up") + 1:] if not arg.startswith("-")]
            assert set(named) <= services, line
            if named:
                assert "--no-deps" in argv, f"`{line}` brings one service up without --no-deps"
                if any(name.startswith("broker-") for name in named):
                    assert argv[3:5] == ["--profile", "kraft"], line
            ups.append((argv, named))
    # The whole cluster, a broker's move and a controller's restart (finalizing).
    assert [named for _, named in ups] == [[], ["broker-1"], ["controller-3000"]]
    # The images are built first, without a registry.
    header = MIGRATION_FILE.read_text().split("\nx-", 1)[0]
    assert "scripts/compose-images kraftwerk zookeeper" in header


def test_the_migration_file_runs_on_host_networking_from_local_images(migration_services):
    for name, service in migration_services.items():
        assert service.get("network_mode") == "host", f"{name}: every node shares the host's 127.0.0.1"
        assert "ports" not in service, f"{name}: compose refuses ports: together with host networking"
        assert "build" not in service, f"{name}: scripts/compose-images builds the images"
        assert service["image"] in MIGRATION_IMAGES, f"{name}: {service['image']} would be pulled"
    for name in ("zookeeper", "zookeeper-init"):
        assert migration_services[name]["image"] == "kraftwerk-zookeeper:3.8"


def test_the_migration_health_checks_ask_each_nodes_own_port(migration_services):
    seen = set()
    for name, service in migration_services.items():
        if name == "zookeeper-init":
            assert "healthcheck" not in service  # it runs once and exits
            continue
        if name == "zookeeper":
            probe = " ".join(service["healthcheck"]["test"])
            assert f"/dev/tcp/{ZOOKEEPER_CONNECT.replace(':', '/')}" in probe and "srvr" in probe
            continue
        args = healthcheck_probe(service)
        node_id = int(name.rsplit("-", 1)[1])
        ports = MIGRATION_CONTROLLER_PORTS if name.startswith("controller-") else MIGRATION_BROKER_PORTS
        assert args.address == f"127.0.0.1:{ports[node_id]}", name
        assert args.timeout_s < 5, f"{name}: the probe gives up before Docker's health-check timeout"
        seen.add(name)
    assert len(seen) == 9


def test_the_migration_zookeeper_listens_where_everyone_looks(migration_services):
    zookeeper = migration_services["zookeeper"]
    source = mounts(zookeeper)["/etc/zookeeper/conf/zoo.cfg"]
    settings = load_properties_file(DEPLOY / source)
    host, _, port = ZOOKEEPER_CONNECT.partition(":")
    assert (settings["clientPortAddress"], settings["clientPort"]) == (host, port)
    assert {"srvr", "ruok"} <= set(settings["4lw.commands.whitelist"].split(","))
    assert settings["admin.enableServer"] == "false", "the admin server would take port 8080 of the host"
    assert settings["dataDir"] == "/var/lib/zookeeper" and mounts(zookeeper)["/var/lib/zookeeper"] == "zookeeper-data"
    init = command_lines(migration_services["zookeeper-init"])[0]
    assert init.count(f"zkCli.sh -server {ZOOKEEPER_CONNECT} ") == 3


def load_properties_file(path: Path) -> dict[str, str]:
    settings = {}
    for line in path.read_text().splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            key, _, value = line.partition("=")
            settings[key.strip()] = value.strip()
    return settings
