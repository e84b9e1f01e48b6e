"""Import paths for the fuzz tests.

The fuzzers reuse helpers that live next to other test directories and are
imported there by plain name: the protocol value strategies
(tests/protocol/strategies.py) and the in-process node harness
(tests/server/node_harness.py). Neither directory is a package (tests/server
would shadow kraftwerk's `server`), so their directories go on sys.path, as
tests/protocol/conftest.py does for its own.

Hypothesis settings are NOT loaded as a global profile here: every fuzz test
carries its own `settings` (tests/fuzz/budget.py), so running this directory
together with tests/protocol changes nothing for either.
"""

from __future__ import annotations

import sys
from pathlib import Path

_TESTS = Path(__file__).resolve().parent.parent
for _helper_dir in (_TESTS / "protocol", _TESTS / "server"):
    if str(_helper_dir) not in sys.path:
        sys.path.insert(0, str(_helper_dir))
