"""DescribeTrainingJob and ListTrainingJobs response shapes from a local job's request and state."""

from __future__ import annotations

import datetime as dt
from typing import Any

from ddpjob.local.base import interruptions
from ddpjob.local.base.arns import job_arn
from ddpjob.local.base.jobstate import JobState

# The request fields that DescribeTrainingJob echoes back unchanged.
_ECHOED = (
    "HyperParameters", "AlgorithmSpecification", "RoleArn", "InputDataConfig", "OutputDataConfig",
    "ResourceConfig", "VpcConfig", "StoppingCondition", "EnableNetworkIsolation",
    "EnableInterContainerTrafficEncryption", "EnableManagedSpotTraining", "CheckpointConfig",
    "DebugHookConfig", "ExperimentConfig", "TensorBoardOutputConfig", "ProfilerConfig",
    "Environment", "RetryStrategy")


def _time(seconds: float | None) -> dt.datetime | None:
    # boto3 answers timezone-aware datetimes in local time.
    return None if seconds is None else dt.datetime.fromtimestamp(seconds).astimezone()


def model_artifacts_uri(request: dict[str, Any]) -> str:
    """`<S3OutputPath>/<job>/output/model.tar.gz`, where SageMaker puts the model."""
    output = request["OutputDataConfig"]["S3OutputPath"].rstrip("/")
    return f"{output}/{request['TrainingJobName']}/output/model.tar.gz"


def describe(request: dict[str, Any], state: JobState) -> dict[str, Any]:
    name = request["TrainingJobName"]
    status = state.status
    response: dict[str, Any] = {
        "TrainingJobName": name,
        "TrainingJobArn": job_arn(name),
        "ModelArtifacts": {"S3ModelArtifacts": model_artifacts_uri(request)},
        "TrainingJobStatus": status.primary.value,
        "SecondaryStatus": status.value,
    }
    response.update({key: request[key] for key in _ECHOED if key in request})
    response.setdefault("StoppingCondition", {})
    # SageMaker answers an output config without a key with an empty KmsKeyId (the official
    # SDK v2's `attach`, and so `best_estimator()`, reads it).
    response["OutputDataConfig"] = {"KmsKeyId": "", **response["OutputDataConfig"]}
    if state.failure_reason:
        response["FailureReason"] = state.failure_reason
    if state.tuning_job_arn:
        response["TuningJobArn"] = state.tuning_job_arn
    times = {
        "CreationTime": state.creation_time,
        "TrainingStartTime": state.training_start_time,
        "TrainingEndTime": state.training_end_time,
        "LastModifiedTime": state.last_modified_time,
    }
    response.update({key: _time(value) for key, value in times.items() if value is not None})
    response["SecondaryStatusTransitions"] = [
        {key: _time(value) if key.endswith("Time") else value for key, value in t.items()}
        for t in state.transitions
    ]
    if state.training_start_time is not None and state.training_end_time is not None:
        # the seconds every attempt trained; a spot job's bill is discounted (docs/spot.md)
        response["TrainingTimeInSeconds"], response["BillableTimeInSeconds"] = \
            interruptions.billed(state.training_seconds, interruptions.is_spot(request))
    return response


def summary(request: dict[str, Any], state: JobState) -> dict[str, Any]:
    full = describe(request, state)
    keys = ("TrainingJobName", "TrainingJobArn", "CreationTime", "TrainingEndTime",
            "LastModifiedTime", "TrainingJobStatus", "SecondaryStatus")  # fmt: skip
    return {key: full[key] for key in keys if key in full}
