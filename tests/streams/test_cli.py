"""`kraftwerk probe-matrix` through its `add_arguments`/`run` pair."""

from __future__ import annotations

import argparse

import pytest

from streams import cli


def parse(argv):
    parser = argparse.ArgumentParser(prog="kraftwerk probe-matrix")
    cli.add_arguments(parser)
    return parser.parse_args(argv)


def test_probe_matrix_prints_the_table_and_succeeds(capsys):
    assert cli.run(parse(["--members", "3", "--leader-position", "last", "--details"])) == 0
    out = capsys.readouterr().out
    assert "post-2.0 (v4)" in out
    assert "28/28 cells ok" in out
    # The 2.0 row: one bounce; the 0.10.0 row: two.
    row_2_0 = next(line for line in out.splitlines() if line.startswith("2.0 "))
    assert "1b/" in row_2_0 and "ok" in row_2_0
    row_0_10_0 = next(line for line in out.splitlines() if line.startswith("0.10.0 "))
    assert row_0_10_0.count("2b/") == 7


def test_bad_arguments_are_refused(capsys):
    assert cli.run(parse(["--members", "0"])) == 2
    assert cli.run(parse(["--members", "3", "--leader-position", "5"])) == 2
    with pytest.raises(SystemExit):
        parse(["--leader-position", "middle"])
