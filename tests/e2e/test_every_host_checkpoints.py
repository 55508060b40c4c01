"""Every host's checkpoint folder reaches checkpoint_s3_uri, as SageMaker syncs every instance's:
real 2-host jobs on ddpjob's runtime (torchrun, gloo), S3 on a moto server. A sharded
torch.distributed.checkpoint saved by a job loads on every rank of the next one; two hosts
writing one name with different bytes are warned about once."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import boto3
import pytest
from ddpjob import LocalSession, PyTorch

from tests.conftest import GROUP_TEARDOWN
from tests.e2e.conftest import FORKED_WORKERS, JOB_TIMEOUT_S, log_lines, wait_until_ended
from tests.local.conftest import assert_no_processes

pytestmark = pytest.mark.slow

JOBS = Path(__file__).parent / "sync_jobs"
CLASH = "wrote different bytes"


def keys(bucket: str, prefix: str) -> list[str]:
    listed = boto3.client("s3").list_objects_v2(Bucket=bucket, Prefix=prefix)
    return sorted(item["Key"][len(prefix):] for item in listed.get("Contents", []))


def _run(session: LocalSession, bucket: str, name: str, workers: int,
         **hyperparameters: Any) -> list[str]:
    """A 2-host job of every_host.py checkpointing to s3://bucket/ckpt/run (torchrun and the
    ranks' checkpoints, its workers forked: `FORKED_WORKERS`); both hosts' log lines once it
    Completed."""
    est = PyTorch(entry_point="every_host.py", source_dir=str(JOBS),
                  dependencies=[str(GROUP_TEARDOWN)], instance_type="local",
                  instance_count=2, hyperparameters=hyperparameters,
                  distribution={"torch_distributed": {"enabled": True},
                                "processes_per_host": workers},
                  output_path=f"s3://{bucket}/output", code_location=f"s3://{bucket}/code",
                  checkpoint_s3_uri=f"s3://{bucket}/ckpt/run", max_run=JOB_TIMEOUT_S,
                  environment=FORKED_WORKERS, session=session)
    est.fit(wait=False, job_name=name)
    job = wait_until_ended(session, name)
    lines = [line for host in ("algo-1", "algo-2") for line in log_lines(session, name, host)]
    assert job["TrainingJobStatus"] == "Completed", (job.get("FailureReason"), lines[-30:])
    assert_no_processes(session.home)
    return lines


def test_every_hosts_files_reach_the_checkpoint_uri(session: LocalSession,
                                                     s3_bucket: str) -> None:
    lines = _run(session, s3_bucket, "files", 2, mode="files")
    assert keys(s3_bucket, "ckpt/run/") == [
        "algo-1-rank0.json", "algo-1-rank1.json", "algo-2-rank2.json", "algo-2-rank3.json",
        "config.json"]
    assert not [line for line in lines if CLASH in line]  # config.json: the same bytes


def test_a_sharded_dcp_checkpoint_resumes_on_every_rank(session: LocalSession,
                                                        s3_bucket: str) -> None:
    """2 hosts x 2 processes: each rank saves its shard (FSDP-style DTensor); the next job
    with the same checkpoint_s3_uri loads every shard back with dcp.load on every rank."""
    saved = _run(session, s3_bucket, "dcp-save", 2, mode="dcp-save", token=0.5)
    assert sum("dcp saved rank=" in line for line in saved) == 4
    loaded = _run(session, s3_bucket, "dcp-load", 2, mode="dcp-load", token=0.5)
    for rank in range(4):
        assert any(f"dcp loaded rank={rank}" in line for line in loaded), loaded[-30:]
    listed = keys(s3_bucket, "ckpt/run/dcp/")
    assert ".metadata" in listed and len([k for k in listed if k.endswith(".distcp")]) == 4


@pytest.mark.parametrize("mode", ["clash", "same"])
def test_two_hosts_writing_one_name_warn_once_when_the_bytes_differ(
        session: LocalSession, s3_bucket: str, mode: str) -> None:
    lines = _run(session, s3_bucket, f"write-{mode}", 1, mode=mode,
                 uri=f"s3://{s3_bucket}/ckpt/run")
    warnings = [line for line in lines if CLASH in line]
    kept = boto3.client("s3").get_object(Bucket=s3_bucket, Key="ckpt/run/same.txt")
    if mode == "same":
        assert warnings == []
        assert kept["Body"].read() == b"same"
        return
    assert len(warnings) == 1, warnings
    assert (f"hosts algo-1 and algo-2 wrote different bytes to s3://{s3_bucket}/ckpt/run/"
            f"same.txt; the last upload (algo-2's) is kept there") in warnings[0]
    assert kept["Body"].read() == b"from algo-2"
    assert kept["Metadata"]["ddpjob-host"] == "algo-2"
