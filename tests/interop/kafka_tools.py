"""Runs Apache Kafka's own command-line tools (their public main classes) as the
operator's shell scripts would: `kafka-features.sh` is `FeatureCommand`, and so on.

Nothing of Kafka's is in this repository: `scripts/setup --test` resolves the pinned
`org.apache.kafka:kafka-tools` (interop/pom.xml, profile `kafka-tools`) into ~/.m2 and
writes its classpath to interop/target/tools-classpath.txt. Each run is one JVM with a
bounded heap and a bounded time; nothing is retried. Kafka's own logging goes to stderr
at WARN (slf4j-simple), so stdout carries what the tool prints for the operator.

Usable from a shell too:
    .venv/bin/python -m tests.interop.kafka_tools FeatureCommand --bootstrap-controller HOST:PORT describe
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]
TOOLS_CLASSPATH_FILE = REPO_ROOT / "interop" / "target" / "tools-classpath.txt"
SETUP = "run scripts/setup --test"

# The main classes behind Kafka 4.4.0's bin/ scripts (all in kafka-tools since 4.x).
TOOLS_PACKAGE = "org.apache.kafka.tools"
FEATURES = f"{TOOLS_PACKAGE}.FeatureCommand"              # kafka-features.sh
METADATA_QUORUM = f"{TOOLS_PACKAGE}.MetadataQuorumCommand"  # kafka-metadata-quorum.sh
TOPICS = f"{TOOLS_PACKAGE}.TopicCommand"                  # kafka-topics.sh
CONFIGS = f"{TOOLS_PACKAGE}.ConfigCommand"                # kafka-configs.sh
ACLS = f"{TOOLS_PACKAGE}.AclCommand"                      # kafka-acls.sh
CLUSTER = f"{TOOLS_PACKAGE}.ClusterTool"                  # kafka-cluster.sh

HEAP = "-Xmx256m"
DEFAULT_TIMEOUT_S = 30.0


@dataclass(frozen=True)
class ToolRun:
    """One tool run: what was run and what it printed. `returncode` is None when the run
    was stopped at its time limit."""
    argv: tuple[str, ...]
    returncode: int | None
    stdout: str
    stderr: str

    @property
    def lines(self) -> list[str]:
        return [line.rstrip() for line in self.stdout.splitlines() if line.strip()]

    def describe(self) -> str:
        """The run as a person reads it in a failed assertion."""
        shown = " ".join(self.argv[self.argv.index("-cp") + 2:]) if "-cp" in self.argv else " ".join(self.argv)
        return f"$ {shown}\nexit: {self.returncode}\n--- stdout\n{self.stdout}--- stderr\n{self.stderr}"


def classpath_missing(classpath_file: Path, component: str) -> str | None:
    """Why `component` (Kafka's jars whose classpath a scripts/setup.d part writes to
    `classpath_file`) cannot run here, naming it, or None. Tests skip with this reason;
    under CI=true tests/conftest.py turns the skip into a failure."""
    if not shutil.which("java"):
        return f"Java (java) is not installed, needed for {component}: {SETUP}"
    if not classpath_file.is_file() or not classpath_file.read_text().strip():
        return f"{component}: not resolved ({classpath_file.relative_to(REPO_ROOT)} is missing): {SETUP}"
    return None


def tools_missing() -> str | None:
    """Why Kafka's tools cannot run here (a reason naming the component), or None."""
    return classpath_missing(TOOLS_CLASSPATH_FILE, "Kafka's CLI tools (org.apache.kafka:kafka-tools)")


def command(main_class: str, *args: str) -> list[str]:
    classpath = TOOLS_CLASSPATH_FILE.read_text().strip()
    return ["java", HEAP, "-Dorg.slf4j.simpleLogger.defaultLogLevel=warn", "-cp", classpath, main_class, *args]


def run_tool(main_class: str, *args: str, timeout_s: float = DEFAULT_TIMEOUT_S,
             stdin: str = "") -> ToolRun:
    """Runs one tool to its end, or stops it after `timeout_s` (the JVM is killed, never
    left behind). Standard input is given (empty by default) so that a tool that asks for
    confirmation reads end-of-file instead of waiting."""
    argv = command(main_class, *args)
    try:
        done = subprocess.run(argv, input=stdin, capture_output=True, text=True, timeout=timeout_s, cwd=REPO_ROOT)
    except subprocess.TimeoutExpired as expired:
        # subprocess.run kills the child before raising; keep what it had printed.
        def text(value: bytes | str | None) -> str:
            return value.decode(errors="replace") if isinstance(value, bytes) else (value or "")
        return ToolRun(tuple(argv), None, text(expired.stdout),
                       text(expired.stderr) + f"\n(stopped after {timeout_s} s)\n")
    return ToolRun(tuple(argv), done.returncode, done.stdout, done.stderr)


def main(argv: list[str]) -> int:
    if len(argv) < 1:
        print("usage: python -m tests.interop.kafka_tools MainClass [args...]", file=sys.stderr)
        return 2
    missing = tools_missing()
    if missing is not None:
        print(missing, file=sys.stderr)
        return 2
    main_class = argv[0] if "." in argv[0] else f"{TOOLS_PACKAGE}.{argv[0]}"
    run = run_tool(main_class, *argv[1:])
    sys.stdout.write(run.stdout)
    sys.stderr.write(run.stderr)
    return 124 if run.returncode is None else run.returncode


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
