"""`kraftwerk ARGV` run in the test's own process (fast: no interpreter start-up).

`main()` configures structlog for the command it runs; the runner undoes that, so the
next test in this process logs as before. An argparse refusal (SystemExit) is an exit
status like any other.
"""

from __future__ import annotations

import structlog

from cli.main import main


def run_main(capsys, argv: list[str]) -> tuple[int, str, str]:
    """(exit status, stdout, stderr) of `kraftwerk ARGV`."""
    try:
        try:
            status = main(argv)
        except SystemExit as exited:
            status = exited.code
    finally:
        structlog.reset_defaults()
    out, err = capsys.readouterr()
    return status, out, err
