"""Hypothesis profiles for the protocol tests.

`ci` (the default here) is derandomized, so a failure reproduces on every
run; `dev` explores with fresh randomness and more examples. Select with
`HYPOTHESIS_PROFILE=dev`. The per-test `max_examples` keep the whole
protocol suite within about a minute.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

from hypothesis import HealthCheck, settings

# The helper modules here (strategies.py) are imported by plain name.
sys.path.insert(0, str(Path(__file__).parent))

settings.register_profile(
    "ci",
    derandomize=True,
    deadline=None,
    print_blob=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
settings.register_profile(
    "dev",
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))
