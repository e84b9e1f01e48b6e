"""KIP-778 with a real quorum: a new metadata.version is accepted only if every
controller supports it, and the refusal names the one that does not."""

from __future__ import annotations

import re
import time

import pytest

from cli import local_cluster as lc
from server.storage.meta_properties import random_uuid_string

from .test_demo import free_ports

pytestmark = pytest.mark.e2e

DEADLINE_S = 60


def test_an_upgrade_no_controller_can_refuse_is_refused_naming_the_old_one(tmp_path):
    base = free_ports(3)
    specs = lc.plan(tmp_path, 3, base)
    cluster_id = random_uuid_string()
    processes = []
    try:
        for spec in specs:
            # Controllers 1 and 2 run "newer software" (unstable levels up to 4.5-IV0 = 34);
            # controller 3 is still on the production range (up to 4.4-IV2 = 33).
            extra = {"unstable.feature.versions.enable": "true"} if spec.node_id != 3 else {}
            lc.write_config(spec, specs, extra)
            lc.format_controller(spec, cluster_id, "3.7-IV4")
        processes = [lc.start_controller(spec) for spec in specs]
        bootstrap = ",".join(p.address for p in processes)
        # Wait (bounded) until the quorum serves writes: a validate-only upgrade answers.
        deadline = time.monotonic() + DEADLINE_S
        while True:
            check = lc.run_cli("features", "upgrade", "--metadata", "3.8-IV0", "--dry-run",
                               "--bootstrap-server", bootstrap, "--timeout-s", "10")
            if check.returncode == 0 or time.monotonic() > deadline:
                break
        assert check.returncode == 0, check.stdout + check.stderr

        refused = lc.run_cli("features", "upgrade", "--metadata", "4.5-IV0", "--bootstrap-server", bootstrap,
                             "--timeout-s", "30")
        assert refused.returncode == 1
        # Named as "Controller 3" by another leader, or "Local controller 3" if 3 leads.
        assert re.search(r"(Local c|C)ontroller 3 only supports versions 1-33", refused.stdout), refused.stdout

        accepted = lc.run_cli("features", "upgrade", "--metadata", "4.0-IV0", "--bootstrap-server", bootstrap,
                              "--timeout-s", "30")
        assert accepted.returncode == 0, accepted.stdout + accepted.stderr
        assert "metadata.version was upgraded to 4.0-IV0." in accepted.stdout
    finally:
        for process in processes:
            lc.stop_controller(process)
