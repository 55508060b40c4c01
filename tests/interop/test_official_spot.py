"""A managed spot job of the official SDK v2 through `LocalSession().official_session()`: its
own estimator arguments turn spot on, an interruption restarts the job from its checkpoints in
the local bucket, and the SDK's own `logs_for_job` prints its savings line from our description.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest
from ddpjob.local.base.interruptions import GRACE_ENV
from ddpjob.local.session import LOCAL_ROLE, LocalSession

from tests.conftest import GROUP_TEARDOWN
from tests.interop.conftest import IMAGE_URI
from tests.interop.test_official_session import no_account  # noqa: F401 - the fixture
from tests.local.conftest import JOBS, assert_no_processes, log_text, wait_for, wait_until_ended

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("no_account")]  # no request leaves


def test_a_v2_spot_job_is_interrupted_resumes_and_the_sdk_prints_its_savings(
    sdk_offline: Any, local_session: LocalSession, tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
) -> None:
    from sagemaker.pytorch import PyTorch

    monkeypatch.setenv(GRACE_ENV, "10")
    source = tmp_path / "src"
    source.mkdir()
    shutil.copy(JOBS / "spot_train.py", source)
    session = local_session.official_session()
    estimator = PyTorch(
        entry_point="spot_train.py", source_dir=str(source), image_uri=IMAGE_URI,
        dependencies=[str(GROUP_TEARDOWN)],
        instance_type="ml.m5.xlarge", instance_count=1, role=LOCAL_ROLE,
        sagemaker_session=session, distribution={"torch_distributed": {"enabled": True}},
        use_spot_instances=True, max_run=600, max_wait=900,
        checkpoint_s3_uri="s3://sagemaker-local/spot-checkpoints",
        hyperparameters={"hold-at": "0"})
    estimator.fit(wait=False)
    name = estimator.latest_training_job.name
    ready = local_session.job_dir(name) / "hosts" / "algo-1" / "output" / "data" / "ready-0"
    wait_for(ready.exists, 240, "the job to hold after checkpointing")
    local_session.interrupt(name)
    job = wait_until_ended(local_session, name)
    assert job["TrainingJobStatus"] == "Completed", job.get("FailureReason")
    assert "rank 0 loaded 1 first 2" in log_text(local_session, name, "algo-1")

    capsys.readouterr()
    session.logs_for_job(name, wait=True)  # the SDK's own lines, from our description
    printed = capsys.readouterr().out
    training, billable = job["TrainingTimeInSeconds"], job["BillableTimeInSeconds"]
    assert f"Training seconds: {training}\n" in printed
    assert f"Billable seconds: {billable}\n" in printed
    savings = (1 - billable / training) * 100
    assert f"Managed Spot Training savings: {savings:.1f}%\n" in printed
    assert 69.0 <= savings <= 100.0
    assert_no_processes(local_session.home)
