"""Fixtures for the SageMaker backend: CloudWatch log streams and training jobs on moto."""

from __future__ import annotations

import contextlib
import time
import uuid
from collections.abc import Callable

import boto3
import pytest
from ddpjob_runtime.shared.contract import CLOUDWATCH_LOG_GROUP as LOG_GROUP

ACCOUNT = "123456789012"  # moto's default account
REGION = "us-east-1"


@pytest.fixture
def logs(aws_env: str):
    """A CloudWatch Logs client on the moto server, with SageMaker's log group present."""
    client = boto3.client("logs", region_name=REGION)
    with contextlib.suppress(client.exceptions.ResourceAlreadyExistsException):
        client.create_log_group(logGroupName=LOG_GROUP)
    return client


@pytest.fixture
def put_lines(logs) -> Callable[[str, list[tuple[int, str]]], None]:
    """`put_lines(stream, [(timestamp_ms, message), ...])`: what SageMaker's log agent does."""

    def put(stream: str, events: list[tuple[int, str]]) -> None:
        with contextlib.suppress(logs.exceptions.ResourceAlreadyExistsException):
            logs.create_log_stream(logGroupName=LOG_GROUP, logStreamName=stream)
        logs.put_log_events(
            logGroupName=LOG_GROUP, logStreamName=stream,
            logEvents=[{"timestamp": ts, "message": msg} for ts, msg in events],
        )

    return put


@pytest.fixture
def now_ms() -> int:
    """A recent timestamp in ms (CloudWatch rejects events that are too old)."""
    return int(time.time() * 1000) - 60_000


def _training_request(name: str, role: str | None = f"arn:aws:iam::{ACCOUNT}:role/SageMakerRole",
                      instance_count: int = 2) -> dict:
    request = {
        "TrainingJobName": name,
        "AlgorithmSpecification": {
            "TrainingImage": f"{ACCOUNT}.dkr.ecr.{REGION}.amazonaws.com/ddpjob:cpu",
            "TrainingInputMode": "File",
        },
        "OutputDataConfig": {"S3OutputPath": "s3://some-bucket/output"},
        "ResourceConfig": {"InstanceType": "ml.m5.xlarge", "InstanceCount": instance_count,
                           "VolumeSizeInGB": 30},
        "StoppingCondition": {"MaxRuntimeInSeconds": 3600},
        "HyperParameters": {"sagemaker_program": '"train.py"'},
    }
    if role is not None:
        request["RoleArn"] = role
    return request


@pytest.fixture
def training_request() -> Callable[..., dict]:
    """`training_request(name, role=..., instance_count=2)`: a minimal valid CreateTrainingJob."""
    return _training_request


@pytest.fixture
def job_name() -> str:
    return f"ddpjob-test-{uuid.uuid4().hex[:10]}"


@pytest.fixture
def set_job_status() -> Callable[[str, str], None]:
    """Move a moto training job to a status (moto creates every job already Completed)."""
    from moto.sagemaker.models import sagemaker_backends

    def set_status(name: str, status: str) -> None:
        job = sagemaker_backends[ACCOUNT][REGION].training_jobs[name]
        job.training_job_status = status
        job.secondary_status = "Training" if status == "InProgress" else status

    return set_status
