"""The ``schedulers`` set: real schedulers started by the tests (a single-node SLURM).

Where Debian's slurm-wlm is not installed the set skips, saying how to get it; under
``ACCEL_TEST_SCHEDULERS=require`` (``.ci/run``'s schedulers block) it fails instead, so
CI never passes a set that did not run.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from slurm_cluster import cluster, missing


@pytest.fixture(scope="session")
def slurm(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, str]]:
    """The environment of a real SLURM cluster's clients (``SLURM_CONF``)."""
    why = missing()
    if why is not None:
        if os.environ.get("ACCEL_TEST_SCHEDULERS") == "require":
            pytest.fail(f"ACCEL_TEST_SCHEDULERS=require, but {why}")
        pytest.skip(why)
    with cluster(Path(tmp_path_factory.mktemp("slurm"))) as env:
        yield env
