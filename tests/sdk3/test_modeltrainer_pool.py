"""A v3 ModelTrainer job with `Compute(keep_alive_period_in_seconds=...)` runs on a local warm
pool like any other: its own captured request (ModelTrainer's `sm_train.sh` and drivers on the
host) leaves the pool Available, the next one reuses it and finds what the first left in
SageMaker's persistent cache; the pool holds no template (a fresh container on SageMaker)."""

from __future__ import annotations

import copy
import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import boto3
import pytest
from ddpjob.local.session import LocalSession

from tests.conftest import FIXED_PORT, HOST_NAMESPACES
from tests.local.conftest import assert_no_processes, local_session_at, processes_under, wait_for
from tests.local.test_pool_cache import stop_pools
from tests.sdk3.test_modeltrainer_local import _source, modeltrainer_request, run_job

pytestmark = [
    pytest.mark.slow,
    FIXED_PORT,
    HOST_NAMESPACES,
]

PROBE = Path(__file__).parents[1] / "local" / "jobs" / "pool_cache_probe.py"


@pytest.fixture
def session(tmp_path: Path) -> Iterator[LocalSession]:
    """A session whose pools are stopped after the test, whatever happened."""
    with local_session_at(tmp_path / "home") as local:
        try:
            yield local
        finally:
            stop_pools(local)


def _renamed(request: dict[str, Any], name: str) -> dict[str, Any]:
    request = copy.deepcopy(request)
    request["TrainingJobName"] = name
    request["ResourceConfig"]["InstanceType"] = "local"
    return request


def test_a_modeltrainer_job_with_keep_alive_runs_on_a_pool_with_its_cache(
    sdk3_python: Path, s3_bucket: str, tmp_path: Path, session: LocalSession
) -> None:
    boto3.client("s3").put_object(Bucket=s3_bucket, Key="data/values.txt", Body=b"1 2")
    sent = modeltrainer_request(sdk3_python, s3_bucket, _source(tmp_path, PROBE), hosts=1,
                                processes=None, keep_alive=60, path="hard", tag="first")
    assert sent["ResourceConfig"]["KeepAlivePeriodInSeconds"] == 60
    first, logs = run_job(session, _renamed(sent, "mt-pool-1"))
    assert first["TrainingJobStatus"] == "Completed", (first.get("FailureReason"), logs[-3000:])
    assert first["WarmPoolStatus"]["Status"] == "Available"
    assert "algo-1 cache found: {}" in logs
    pool = session.warm_pools()[0]
    keeper = processes_under(session.home / "pools" / pool["Name"])
    assert len(keeper) == 1  # the keeper alone: no template for an image's own program
    second, logs = run_job(session, _renamed(sent, "mt-pool-2"))
    assert second["TrainingJobStatus"] == "Completed", (second.get("FailureReason"), logs[-3000:])
    assert second["SecondaryStatusTransitions"][0]["StatusMessage"].endswith(
        f"reusing the warm pool {pool['Name']} of training job mt-pool-1")
    found = re.search(r"algo-1 cache found: (.*)", logs).group(1)
    assert json.loads(found) == {"from-algo-1": "first"}
    described = session.describe("mt-pool-1").raw["WarmPoolStatus"]
    assert described["Status"] == "Reused" and described["ReusedByJob"] == "mt-pool-2"
    assert session.describe("mt-pool-2").raw["WarmPoolStatus"]["Status"] == "Available"
    cache = session.home / "pools" / pool["Name"] / "cache"
    assert cache.is_dir()
    session.stop_warm_pool(pool["Name"])
    wait_for(lambda: session.warm_pools()[0]["Status"] == "Terminated", 60, "the pool to end")
    wait_for(lambda: not cache.exists(), 30, "the pool's cache to be removed")
    assert_no_processes(session.home)
