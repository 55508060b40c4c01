"""Issues 4 and 5 end to end: the public estimator API, local hosts, S3 on a moto server.

Code, input data, checkpoints and the model all live in moto's S3; the hosts reach it over HTTP
through AWS_ENDPOINT_URL, which they inherit from the test's environment.
"""

from __future__ import annotations

import hashlib
import io
import json
import math
import random
import tarfile
import uuid
from pathlib import Path

import boto3
import pytest
import torch
from ddpjob import LocalSession, PyTorch

from tests.e2e.conftest import (
    JOB_TIMEOUT_S,
    STEPS,
    assert_loss_curve,
    assert_resumed,
    estimator,
    interrupt_when_checkpointed,
    interruptible,
    log_lines,
    losses,
    wait_until_ended,
)
from tests.local.conftest import assert_no_processes

pytestmark = pytest.mark.slow


def _object(bucket: str, key: str) -> bytes:
    return boto3.client("s3").get_object(Bucket=bucket, Key=key)["Body"].read()


def _sha256(weight: torch.Tensor) -> str:
    return hashlib.sha256(weight.detach().numpy().tobytes()).hexdigest()


def test_two_hosts_train_from_s3_and_checkpoint_to_s3(session: LocalSession, s3_bucket: str,
                                                      tmp_path: Path) -> None:
    """2 hosts x 1 worker; input, code, checkpoints and model on S3; the client gets them back."""
    token = uuid.uuid4().hex
    rng = random.Random(token)
    target = tuple(round(rng.uniform(-5, 5), 3) for _ in range(4))
    boto3.client("s3").put_object(Bucket=s3_bucket, Key="data/train/data.json",
                                  Body=json.dumps({"target": target, "token": token}))
    steps = 6
    est = estimator(session, s3_bucket, instance_count=2, hyperparameters={"steps": steps},
                    checkpoint_s3_uri=f"s3://{s3_bucket}/ckpt/two-hosts")
    est.fit({"train": f"s3://{s3_bucket}/data/train"}, wait=False, job_name="two-hosts")
    job = wait_until_ended(session, "two-hosts")
    logs = {host: log_lines(session, "two-hosts", host) for host in ("algo-1", "algo-2")}
    assert job["TrainingJobStatus"] == "Completed", (job.get("FailureReason"), logs)
    assert_no_processes(session.home)

    # The code went to code_location and the hosts ran it from there.
    code = f"s3://{s3_bucket}/code/two-hosts/source/sourcedir.tar.gz"
    assert json.loads(job["HyperParameters"]["sagemaker_submit_directory"]) == code
    with tarfile.open(fileobj=io.BytesIO(_object(s3_bucket, code.split("/", 3)[3]))) as tar:
        assert "linreg.py" in tar.getnames()
    # Every rank, one per host, read the channel staged from S3.
    assert f"rank=0 token={token}" in logs["algo-1"]
    assert f"rank=1 token={token}" in logs["algo-2"]
    found = losses(logs["algo-1"])
    assert sorted(found) == list(range(steps))
    assert_loss_curve(found, target)

    # model.tar.gz at model_data, in moto.
    assert est.model_data == f"s3://{s3_bucket}/output/two-hosts/output/model.tar.gz"
    archive = _object(s3_bucket, "output/two-hosts/output/model.tar.gz")
    with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
        report = json.loads(tar.extractfile("report.json").read())
        model = torch.load(io.BytesIO(tar.extractfile("model.pt").read()), weights_only=True)
    assert report == {"token": token, "params_sha256": report["params_sha256"], "steps": steps,
                      "world": 2, "first_step": 0}
    assert _sha256(model["weight"]) == report["params_sha256"]
    # Both ranks (hosts) ended with the same weights: DDP kept them in step over the network.
    assert f"final rank=1 step={steps - 1} params_sha256={report['params_sha256']}" \
        in logs["algo-2"]

    # checkpoints(): the complete ones kept in S3 (3 by default), with their steps.
    listed = est.checkpoints()
    assert [c.step for c in listed] == [steps - 3, steps - 2, steps - 1]
    assert all(c.uri == f"s3://{s3_bucket}/ckpt/two-hosts/step-{c.step:09d}/" for c in listed)
    # download_checkpoint(): the latest, loadable on the client with weights_only=True.
    folder = est.download_checkpoint(tmp_path / "downloaded")
    assert folder == tmp_path / "downloaded" / f"step-{steps - 1:09d}"
    state = torch.load(folder / "state.pt", weights_only=True)
    assert state["step"] == steps - 1
    assert _sha256(state["model"]["weight"]) == report["params_sha256"]
    # The weights learned the channel's targets: w* (1 - 2**-steps), as linreg.py derives.
    for got, want in zip(state["model"]["weight"][0].tolist(), target, strict=True):
        assert math.isclose(got, want * (1 - 2.0**-steps), rel_tol=1e-12), (got, want)


def test_stopped_job_resumes_from_latest_checkpoint(session: LocalSession,
                                                    s3_bucket: str) -> None:
    """2 hosts: estimator.stop() mid-training; a second job with the same checkpoint_s3_uri
    continues from the latest complete checkpoint on every host: first step latest+1, loss
    carried on."""
    first = interruptible(session, s3_bucket, instance_count=2)
    first.fit(wait=False, job_name="resume-1")
    interrupted = interrupt_when_checkpointed(session, first, "resume-1", stop=first.stop)

    second = interruptible(session, s3_bucket, instance_count=2)
    second.fit(wait=False, job_name="resume-2")
    assert_resumed(session, second, "resume-2", interrupted)


def test_spot_request_and_interruption_resume(session: LocalSession, s3_bucket: str) -> None:
    """Managed spot: the request carries SageMaker's spot fields (botocore accepts them); an
    interruption — the container ends, a new one starts from the same request with the
    checkpoints synced down — resumes from the latest complete checkpoint."""
    import botocore.session
    from botocore.validate import ParamValidator

    est = interruptible(session, s3_bucket, use_spot_instances=True,
                        max_wait=2 * JOB_TIMEOUT_S, max_retry_attempts=2)
    request = est.training_job_request(job_name="spot-1")
    shape = botocore.session.get_session().get_service_model("sagemaker") \
        .operation_model("CreateTrainingJob").input_shape
    report = ParamValidator().validate(request, shape)
    assert not report.has_errors(), report.generate_report()
    assert request["EnableManagedSpotTraining"] is True
    assert request["StoppingCondition"] == {"MaxRuntimeInSeconds": JOB_TIMEOUT_S,
                                            "MaxWaitTimeInSeconds": 2 * JOB_TIMEOUT_S}
    assert request["RetryStrategy"] == {"MaximumRetryAttempts": 2}
    assert request["CheckpointConfig"] == {"S3Uri": f"s3://{s3_bucket}/ckpt/run"}

    est.fit(wait=False, job_name="spot-1")
    described = session.describe("spot-1").raw
    for key in ("EnableManagedSpotTraining", "StoppingCondition", "RetryStrategy",
                "CheckpointConfig", "HyperParameters"):
        assert described[key] == request[key], key  # fit submitted that very request
    interrupted = interrupt_when_checkpointed(
        session, est, "spot-1", stop=lambda: session.stop("spot-1"))

    # SageMaker restarts the job's container with the same request; here: a new job from it.
    session.submit({**request, "TrainingJobName": "spot-1-restart"})
    restarted = PyTorch.attach("spot-1-restart", session=session, wait=False)
    assert (restarted.use_spot_instances, restarted.max_retry_attempts,
            restarted.checkpoint_s3_uri) == (True, 2, est.checkpoint_s3_uri)
    assert_resumed(session, restarted, "spot-1-restart", interrupted)
    assert json.loads(restarted.hyperparameters()["steps"]) == STEPS
