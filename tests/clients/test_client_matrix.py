"""The client matrix: every real admin client (tests/clients/drivers.py) through the
brokers and through the controllers, on one client object across a metadata.version
upgrade and downgrade and a kill -9 of the controller leader (tests/clients/harness.py).

Each test records its per-call outcomes; the last test renders docs/client-matrix.md
from them (tools/gen_client_matrix.py) and fails when the committed table differs."""

from __future__ import annotations

import importlib.util
import os

import pytest

from .conftest import RESULTS_PATH
from .drivers import DRIVERS, by_name
from .harness import PATHS, REPO_ROOT, DriverProcess, Scenario, problems

pytestmark = pytest.mark.e2e

DOC_PATH = REPO_ROOT / "docs" / "client-matrix.md"
WRITE_ENV = "KRAFTWERK_WRITE_CLIENT_MATRIX"
REGENERATE = f"regenerate: {WRITE_ENV}=1 .venv/bin/pytest tests/clients"


def _load_generator():
    spec = importlib.util.spec_from_file_location("gen_client_matrix", REPO_ROOT / "tools" / "gen_client_matrix.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize(("driver_name", "path"), [(d.name, p) for d in DRIVERS for p in PATHS],
                         ids=[f"{d.name}-{p}" for d in DRIVERS for p in PATHS])
def test_client(driver_name, path, matrix_cluster, matrix_results, tmp_path):
    driver = by_name(driver_name)
    entry = matrix_results.entry(driver_name, path)
    if path in driver.no_path:
        entry.update(status="not applicable", reason=driver.no_path[path])
        matrix_results.write()
        return
    reason = driver.missing()
    if reason is not None:
        entry.update(status="skipped", reason=reason)
        matrix_results.write()
        pytest.skip(reason)

    def record(outcome) -> None:
        entry["outcomes"].append(outcome.as_json())
        matrix_results.write()

    matrix_cluster.reset()
    process = DriverProcess(driver.command(matrix_cluster.bootstrap(path), path),
                            tmp_path / f"{driver_name}-{path}.stderr")
    try:
        ready = process.wait_ready()
        matrix_results.set_client(driver_name, ready.get("client", driver_name), ready.get("version", ""))
        scenario = Scenario(driver_name, path, matrix_cluster, process, driver.unsupported_on(path), record,
                            driver.absent_fields)
        no_failover = driver.no_failover.get(path)
        if no_failover is not None:
            entry["skipped_phases"] = {"after failover": no_failover}
        scenario.run(failover=no_failover is None)
        entry["status"] = "ran"
    finally:
        process.close()
        matrix_results.write()
        # The killed controller comes back and metadata.version returns to the base level
        # before the next client starts.
        matrix_cluster.reset()
    found = problems(scenario.outcomes, driver.unsupported_on(path))
    if found:
        pytest.fail(f"{driver_name} through the {path}s ({len(found)} problems; stderr {process.stderr_path}):\n"
                    + "\n".join(found), pytrace=False)


def test_docs_client_matrix_is_current(matrix_results):
    """docs/client-matrix.md is the table of this run (once every driver ran)."""
    generator = _load_generator()
    data = matrix_results.data
    incomplete = [f"{d.name} ({p})" for d in DRIVERS for p in PATHS
                  if data["drivers"].get(d.name, {}).get("paths", {}).get(p, {}).get("status")
                  not in ("ran", "not applicable")]
    if os.environ.get(WRITE_ENV) == "1":
        if incomplete:
            pytest.fail(f"not writing {DOC_PATH.name}: these did not run: {', '.join(incomplete)}")
        DOC_PATH.write_text(generator.render(data))
        return
    if incomplete:
        pytest.skip(f"the client matrix table needs every driver; did not run: {', '.join(incomplete)} "
                    f"(results in {RESULTS_PATH})")
    committed = DOC_PATH.read_text() if DOC_PATH.exists() else ""
    if generator.comparable(committed) != generator.comparable(generator.render(data)):
        pytest.fail(f"{DOC_PATH.relative_to(REPO_ROOT)} differs from this run's results; {REGENERATE}",
                    pytrace=False)
