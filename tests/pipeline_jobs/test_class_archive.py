"""The job's class archive plan (pipeline/jobs.py): which JVM options a run gets with
and without an archive, where the archive lives, and that only a complete dump of a
JVM that exited cleanly is moved into place."""

from __future__ import annotations

import subprocess
import sys

import pytest

pytest.importorskip("pyspark")

from pipeline import jobs  # noqa: E402


def test_an_existing_archive_is_used_and_a_missing_one_is_dumped(tmp_path):
    path = tmp_path / "cache" / "spark.jsa"
    plan = jobs.plan_class_archive(path)
    assert plan.dump is not None and plan.dump.parent == path.parent and plan.dump != path
    assert f"-XX:ArchiveClassesAtExit={plan.dump}" in plan.java_options
    path.write_bytes(b"archive")
    plan = jobs.plan_class_archive(path)
    assert plan.dump is None and f"-XX:SharedArchiveFile={path}" in plan.java_options
    assert jobs.plan_class_archive(None) is None


def test_the_archive_path_follows_the_cache_home_and_can_be_switched_off(tmp_path, monkeypatch):
    monkeypatch.delenv(jobs.CLASS_ARCHIVE_ENV, raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    path = jobs.class_archive_path()
    assert path.parent == tmp_path / "kraftwerk" and path.suffix == ".jsa"
    assert jobs.class_archive_path() == path  # the same JVM and jars, the same archive
    monkeypatch.setenv(jobs.CLASS_ARCHIVE_ENV, "off")
    assert jobs.class_archive_path() is None
    monkeypatch.setenv(jobs.CLASS_ARCHIVE_ENV, str(tmp_path / "mine.jsa"))
    assert jobs.class_archive_path() == tmp_path / "mine.jsa"


def _process(code: int) -> subprocess.Popen:
    # Stands in for the JVM: exits with `code` once its stdin closes.
    script = f"import sys; sys.stdin.read(); sys.exit({code})"
    return subprocess.Popen([sys.executable, "-c", script], stdin=subprocess.PIPE)


def test_only_a_clean_exits_dump_becomes_the_archive(tmp_path):
    path = tmp_path / "spark.jsa"
    plan = jobs.plan_class_archive(path)
    plan.dump.write_bytes(b"dump")
    jobs.finish_class_archive(plan, _process(1))
    assert not path.exists() and not plan.dump.exists()
    plan.dump.write_bytes(b"dump")
    jobs.finish_class_archive(plan, _process(0))
    assert path.read_bytes() == b"dump" and not plan.dump.exists()
