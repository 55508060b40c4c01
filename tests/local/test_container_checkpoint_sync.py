"""A request's own container command (as ModelTrainer sends one) on 2 local hosts: every host's
checkpoint folder reaches CheckpointConfig.S3Uri, as SageMaker syncs every instance's. S3 on a
moto server. The hosts' rendezvous port is fixed (7777): run under
`flock /tmp/ddpjob-port7777.lock`."""

from __future__ import annotations

import boto3
import pytest
from ddpjob.local.isolation import sandbox
from ddpjob.local.session import LocalSession

from tests.conftest import FIXED_PORT
from tests.e2e.test_every_host_checkpoints import CLASH, JOBS, keys
from tests.local.conftest import (
    assert_no_processes,
    log_text,
    training_request,
    wait_until_ended,
)

pytestmark = [pytest.mark.slow, FIXED_PORT]


def test_every_hosts_checkpoint_folder_reaches_s3(session: LocalSession, s3_bucket: str) -> None:
    if (reason := sandbox.available()) is not None:
        pytest.skip(f"container commands need host namespaces: {reason}")
    boto3.client("s3").upload_file(str(JOBS / "every_host.py"), s3_bucket, "src/every_host.py")
    request = training_request(
        session, "command-hosts", "unused", "unused", hosts=2,
        InputDataConfig=[{"ChannelName": "code", "DataSource": {"S3DataSource": {
            "S3DataType": "S3Prefix", "S3Uri": f"s3://{s3_bucket}/src/",
            "S3DataDistributionType": "FullyReplicated"}}}],
        CheckpointConfig={"S3Uri": f"s3://{s3_bucket}/ckpt/run"})
    request["HyperParameters"] = {}
    request["ResourceConfig"]["InstanceType"] = "ml.m5.xlarge"
    request["AlgorithmSpecification"].update(
        ContainerEntrypoint=["python"],
        ContainerArguments=["/opt/ml/input/data/code/every_host.py", "--mode", "files"])
    session.sagemaker_client.create_training_job(**request)
    job = wait_until_ended(session, "command-hosts")
    logs = [log_text(session, "command-hosts", host) for host in ("algo-1", "algo-2")]
    assert job["TrainingJobStatus"] == "Completed", (job.get("FailureReason"), logs)
    assert keys(s3_bucket, "ckpt/run/") == ["algo-1-rank0.json", "algo-2-rank0.json",
                                            "config.json"]
    assert not [log for log in logs if CLASH in log]  # config.json: the same bytes from both
    assert_no_processes(session.home)
