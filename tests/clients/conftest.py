"""Fixtures of the client matrix: the module's cluster (3 controllers, 2 brokers, the
StandardAuthorizer with ANONYMOUS as a super user so that every PLAINTEXT client may make
every call) and the results file the table in docs/client-matrix.md is rendered from."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from cli.local_cluster import STANDARD_AUTHORIZER
from cli.upgrade_story import LocalCluster

from .harness import BROKERS, REPO_ROOT, MatrixCluster

# Where the per-call outcomes go (build/ is ignored by git); KRAFTWERK_CLIENT_MATRIX_RESULTS moves it.
RESULTS_PATH = Path(os.environ.get("KRAFTWERK_CLIENT_MATRIX_RESULTS",
                                   REPO_ROOT / "build" / "client-matrix" / "results.json"))


@pytest.fixture(scope="module")
def matrix_cluster(tmp_path_factory):
    cluster = LocalCluster(tmp_path_factory.mktemp("matrix-cluster"), controllers=3, brokers=len(BROKERS),
                           metadata_version="3.7-IV4",
                           extra={"authorizer.class.name": STANDARD_AUTHORIZER, "super.users": "User:ANONYMOUS"})
    try:
        cluster.bring_up()
        yield MatrixCluster(cluster)
    finally:
        cluster.stop_all()


class Results:
    """The outcomes of this run, written to RESULTS_PATH after every change (a run cut
    short still leaves what it saw)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.data: dict = {"drivers": {}}
        self.write()

    def entry(self, driver: str, path: str) -> dict:
        paths = self.data["drivers"].setdefault(driver, {"client": driver, "version": "", "paths": {}})["paths"]
        return paths.setdefault(path, {"status": "pending", "reason": "", "outcomes": []})

    def set_client(self, driver: str, client: str, version: str) -> None:
        self.data["drivers"].setdefault(driver, {"paths": {}}).update(client=client, version=version)
        self.write()

    def write(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.path.write_text(json.dumps(self.data, indent=1, sort_keys=True) + "\n")


@pytest.fixture(scope="module")
def matrix_results() -> Results:
    return Results(RESULTS_PATH)
