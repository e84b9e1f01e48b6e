"""How much fuzzing a run does: the CI budget and the nightly knob.

Owns: `fuzz_settings(ci_examples)`, the Hypothesis settings every fuzz test
uses, and `scaled(count)`, the same scaling for the plain seeded loops (the
live-server test).

Rules kept here:
- CI (no environment variable): each test runs the `ci_examples` it asks for,
  derandomized, so a failure reproduces on every run and the whole
  tests/fuzz directory stays within about a minute on the 2-core VM.
- `FUZZ_EXAMPLES=N` (a nightly-style run): N is a multiplier applied to
  every test's CI count (FUZZ_EXAMPLES=50 runs 50x the CI examples), and
  Hypothesis explores with fresh randomness (not derandomized), so every night
  looks at new inputs. A failure prints the reproduction blob
  (`print_blob=True`) for `@reproduce_failure`.
- The live-server test draws its hostile connections from `random.Random`
  seeded by `FUZZ_SEED` (default fixed); `FUZZ_EXAMPLES` multiplies how many.
- No deadline: the inputs are bounded, so "terminates" is what is checked,
  not how fast; a loaded machine must not turn into a flaky failure.
- No example database: the fuzzers must not write under the repository.
"""

from __future__ import annotations

import os

from hypothesis import HealthCheck, settings

_MULTIPLIER_ENV = "FUZZ_EXAMPLES"


def multiplier() -> int:
    raw = os.environ.get(_MULTIPLIER_ENV, "").strip()
    if not raw:
        return 1
    value = int(raw)
    if value < 1:
        raise ValueError(f"{_MULTIPLIER_ENV} must be a positive integer, got {raw!r}")
    return value


def nightly() -> bool:
    return bool(os.environ.get(_MULTIPLIER_ENV, "").strip())


def scaled(count: int) -> int:
    return count * multiplier()


def fuzz_settings(ci_examples: int) -> settings:
    return settings(
        max_examples=scaled(ci_examples),
        deadline=None,
        derandomize=not nightly(),
        database=None,
        print_blob=True,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.filter_too_much],
    )
