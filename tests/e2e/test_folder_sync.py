"""CheckpointConfig and TensorBoardOutputConfig on ddpjob's runtime, as SageMaker syncs them:
the whole checkpoint folder mirrored (plain `torch.save` files included) and brought back down
by the next job, the TensorBoard folder uploaded. Real local jobs, S3 on a moto server."""

from __future__ import annotations

import io
import uuid
from pathlib import Path

import boto3
import pytest
import torch
from ddpjob import LocalSession, PyTorch

from tests.e2e.conftest import FORKED_WORKERS, JOB_TIMEOUT_S, log_lines, wait_until_ended
from tests.local.conftest import assert_no_processes

pytestmark = pytest.mark.slow

JOBS = Path(__file__).parent / "sync_jobs"


def _keys(bucket: str, prefix: str) -> list[str]:
    listed = boto3.client("s3").list_objects_v2(Bucket=bucket, Prefix=prefix)
    return sorted(item["Key"][len(prefix):] for item in listed.get("Contents", []))


def _object(bucket: str, key: str) -> bytes:
    return boto3.client("s3").get_object(Bucket=bucket, Key=key)["Body"].read()


def _run(session: LocalSession, bucket: str, name: str, epoch: int, token: str) -> list[str]:
    """plain_save.py on 2 hosts under torchrun (its workers forked: `FORKED_WORKERS`); both
    hosts' log lines once it Completed."""
    est = PyTorch(entry_point="plain_save.py", source_dir=str(JOBS), instance_type="local",
                  instance_count=2, distribution={"torch_distributed": {"enabled": True}},
                  hyperparameters={"epoch": epoch, "token": token},
                  output_path=f"s3://{bucket}/output", code_location=f"s3://{bucket}/code",
                  checkpoint_s3_uri=f"s3://{bucket}/ckpt/run",
                  tensorboard_output_config={"S3OutputPath": f"s3://{bucket}/tb/{name}"},
                  max_run=JOB_TIMEOUT_S, environment=FORKED_WORKERS, session=session)
    est.fit(wait=False, job_name=name)
    job = wait_until_ended(session, name)
    lines = [line for host in ("algo-1", "algo-2") for line in log_lines(session, name, host)]
    assert job["TrainingJobStatus"] == "Completed", (job.get("FailureReason"), lines[-30:])
    assert_no_processes(session.home)
    return lines


def test_plain_checkpoint_files_and_tensorboard_reach_s3_and_come_back(
        session: LocalSession, s3_bucket: str) -> None:
    token = uuid.uuid4().hex
    first = _run(session, s3_bucket, "plain-1", 1, token)
    assert any("nothing found rank=0" in line for line in first), first[-30:]
    # The whole folder reached S3Uri by the time the job was Completed, step folder included
    # (uploaded by checkpoints.save with its manifest, and only by it).
    assert _keys(s3_bucket, "ckpt/run/") == [
        "logs/notes.txt", "model_epoch1.pt",
        "step-000000001/manifest.json", "step-000000001/state.pt"]
    saved = torch.load(io.BytesIO(_object(s3_bucket, "ckpt/run/model_epoch1.pt")))
    assert saved == {"epoch": 1, "token": token}
    assert _object(s3_bucket, "ckpt/run/logs/notes.txt").decode() == token
    assert _keys(s3_bucket, "tb/plain-1/") == ["train/events.out.tfevents.1"]
    assert _object(s3_bucket, "tb/plain-1/train/events.out.tfevents.1").decode() == token

    second = _run(session, s3_bucket, "plain-2", 2, "other")
    # Every host found the first job's plain file in its checkpoint folder at start.
    for rank in (0, 1):
        assert any(f"found rank={rank} token={token}" in line for line in second), second[-30:]
    assert "model_epoch2.pt" in _keys(s3_bucket, "ckpt/run/")
    assert _keys(s3_bucket, "tb/plain-2/") == ["train/events.out.tfevents.1"]


@pytest.mark.parametrize("member", ["CheckpointConfig", "TensorBoardOutputConfig"])
def test_a_request_built_elsewhere_cannot_sync_a_folder_outside_the_host(
        session: LocalSession, s3_bucket: str, tmp_path: Path, member: str) -> None:
    """A request sent straight to the local client (the estimator refuses the same): a
    LocalPath that leaves the host's /opt/ml fails the job with one line naming it, and
    nothing outside the host is written or uploaded."""
    from tests.local.conftest import JOBS as LOCAL_JOBS
    from tests.local.conftest import source_tar, training_request

    name = f"escape-{member[:4].lower()}"
    local_path = "/opt/ml/../../../.." if member == "CheckpointConfig" else "/home"
    config = ({"S3Uri": f"s3://{s3_bucket}/ckpt", "LocalPath": local_path}
              if member == "CheckpointConfig"
              else {"S3OutputPath": f"s3://{s3_bucket}/tb", "LocalPath": local_path})
    session.sagemaker_client.create_training_job(**training_request(
        session, name, source_tar(tmp_path / "src", LOCAL_JOBS / "noop.py"), "noop.py",
        workers=1, **{member: config}))
    job = wait_until_ended(session, name)
    assert job["TrainingJobStatus"] == "Failed"
    assert f"{member}.LocalPath '{local_path}' refused" in job["FailureReason"]
    assert _keys(s3_bucket, "") == []
    assert_no_processes(session.home)
