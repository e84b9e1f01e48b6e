"""Runs one of interop/'s fact-printing programs against Apache Kafka's own classes.

Shared by tools/gen_broker_configs.py and tools/gen_feature_catalog.py: build interop/
with the `broker-catalog` Maven profile (the pinned release's server jars on the
classpath; Maven resolves them into ~/.m2, nothing of Kafka's enters the repository),
run the program with a bounded heap and read the JSON document it prints.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
INTEROP = ROOT / "interop"
CLASSPATH_FILE = "target/broker-catalog-classpath.txt"
MAVEN_TIMEOUT_S = 540
JAVA_TIMEOUT_S = 120


def ask_kafka(main_class: str) -> dict:
    """Build the interop classes with the server jars and run `main_class`."""
    build = subprocess.run(
        ["mvn", "-q", "-B", "-Dstyle.color=never", "-f", str(INTEROP / "pom.xml"), "-P", "broker-catalog",
         "compile", "dependency:build-classpath", f"-Dmdep.outputFile={CLASSPATH_FILE}"],
        capture_output=True, text=True, timeout=MAVEN_TIMEOUT_S, cwd=ROOT)
    if build.returncode != 0:
        # Maven's own output only matters when the build fails.
        sys.stderr.write(build.stdout[-4000:] + build.stderr[-4000:])
        raise SystemExit(f"mvn failed (exit {build.returncode})")
    classpath = (INTEROP / CLASSPATH_FILE).read_text().strip()
    out = subprocess.run(
        ["java", "-Xmx256m", "-cp", f"{INTEROP / 'target' / 'classes'}:{classpath}", main_class],
        check=True, capture_output=True, text=True, timeout=JAVA_TIMEOUT_S, cwd=ROOT)
    return json.loads(out.stdout)


def check_or_write(target: Path, text: str, kafka_version: str, tool: str, check: bool, summary: str) -> int:
    """With `check`, 0 if `target` already holds `text` (else 1, naming `tool` to run);
    otherwise writes it, saying `summary`. The exit code of the generator."""
    where = target.relative_to(ROOT)
    if check:
        current = target.read_text() if target.exists() else ""
        if current != text:
            print(f"{where} differs from what Kafka {kafka_version} says; run {tool}", file=sys.stderr)
            return 1
        print(f"{where} matches Kafka {kafka_version}")
        return 0
    target.write_text(text)
    print(f"wrote {where}: {summary} from Kafka {kafka_version}")
    return 0
