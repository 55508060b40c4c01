"""Two multi-host jobs on SageMaker's PyTorch container submitted together: the toolkit's
rendezvous port 7777 is fixed, so the second waits, Starting and naming the first, then runs."""

from __future__ import annotations

import json
from pathlib import Path

import boto3
import pytest

from tests.conftest import FIXED_PORT
from tests.dlc.test_dlc_jobs import TARGET, TIMEOUT_S, dlc_image, dlc_request, upload_code
from tests.local.conftest import assert_no_processes, local_session_at, wait_until_ended

pytestmark = [pytest.mark.slow, FIXED_PORT]


def test_two_dlc_jobs_submitted_together_both_complete_one_after_the_other(
        s3_bucket: str, tmp_path: Path, dlc_python: str, monkeypatch) -> None:
    monkeypatch.setenv("DDPJOB_DLC_PYTHON", dlc_python)
    boto3.client("s3").put_object(Bucket=s3_bucket, Key="data/target.json",
                                  Body=json.dumps(TARGET).encode())
    code, image = upload_code(s3_bucket, tmp_path), dlc_image()
    with local_session_at(tmp_path / "home") as session:
        client = session.sagemaker_client
        for name in ("port-first", "port-second"):
            client.create_training_job(**dlc_request(
                name, s3_bucket, code, image, steps=2,
                CheckpointConfig={"S3Uri": f"s3://{s3_bucket}/ckpt/{name}"}))
        jobs = {name: wait_until_ended(session, name, timeout_s=2 * TIMEOUT_S)
                for name in ("port-first", "port-second")}
        for name, job in jobs.items():
            assert job["TrainingJobStatus"] == "Completed", (name, job.get("FailureReason"))
        waited = [(name, t["StatusMessage"]) for name, job in jobs.items()
                  for t in job["SecondaryStatusTransitions"] if "waiting for port" in
                  t.get("StatusMessage", "")]
        assert len(waited) == 1, waited  # whichever supervisor came second waited
        name, message = waited[0]
        other = ({"port-first", "port-second"} - {name}).pop()
        assert message.endswith(f"waiting for port 7777, held by job {other}"), message
        assert jobs[name]["TrainingStartTime"] >= jobs[other]["TrainingEndTime"]
        assert_no_processes(session.home)
