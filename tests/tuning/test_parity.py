"""The parity check (`ddpjob.tuning.parity`): one line per member a trial lost against the plain
training job, and what a request from any client shows alone (a v3 ModelTrainer definition
without its drivers, spot without checkpoints, one checkpoint URI for every trial)."""

from __future__ import annotations

import copy
import logging
from typing import Any

from ddpjob import CategoricalParameter, HyperparameterTuner
from ddpjob.tuning import parity

PLAIN: dict[str, Any] = {
    "TrainingJobName": "plain",
    "AlgorithmSpecification": {"TrainingImage": "img", "TrainingInputMode": "File",
                               "EnableSageMakerMetricsTimeSeries": True,
                               "MetricDefinitions": [{"Name": "loss", "Regex": "loss=(.*)"}]},
    "RoleArn": "arn:aws:iam::000000000000:role/r",
    "InputDataConfig": [
        {"ChannelName": "train", "ContentType": "text/csv",
         "DataSource": {"S3DataSource": {"S3Uri": "s3://b/train", "S3DataType": "S3Prefix"}}},
        {"ChannelName": "code",
         "DataSource": {"S3DataSource": {"S3Uri": "s3://b/code", "S3DataType": "S3Prefix"}}}],
    "OutputDataConfig": {"S3OutputPath": "s3://b/out", "KmsKeyId": "k"},
    "ResourceConfig": {"InstanceType": "ml.g5.xlarge", "InstanceCount": 2, "VolumeSizeInGB": 30},
    "StoppingCondition": {"MaxRuntimeInSeconds": 3600, "MaxWaitTimeInSeconds": 7200},
    "EnableManagedSpotTraining": True,
    "CheckpointConfig": {"S3Uri": "s3://b/ckpt"},
    "RetryStrategy": {"MaximumRetryAttempts": 2},
    "Environment": {"MODE": "fast", "SEED": "1"},
    "TensorBoardOutputConfig": {"S3OutputPath": "s3://b/tb"},
    "HyperParameters": {"epochs": "3", "lr": "0.1", "sagemaker_program": '"train.py"'},
    "Tags": [{"Key": "team", "Value": "ml"}],
}


def _definition(plain: dict[str, Any]) -> dict[str, Any]:
    """The definition a faithful tuner makes of `plain` (lr tuned)."""
    definition = {k: copy.deepcopy(v) for k, v in plain.items()
                  if k not in ("TrainingJobName", "HyperParameters", "Tags",
                               "TensorBoardOutputConfig")}
    definition["StaticHyperParameters"] = {k: v for k, v in plain["HyperParameters"].items()
                                           if k != "lr"}
    return definition


def test_a_faithful_definition_lost_nothing_but_what_the_api_cannot_carry() -> None:
    lines = parity.lost_members(PLAIN, _definition(PLAIN), tuned=["lr"])
    assert lines == [line for line in lines if line.startswith("TensorBoardOutputConfig: ")]
    assert len(lines) == 1


def test_each_member_a_trial_lost_is_one_line_naming_it() -> None:
    """What the official tuners' bugs dropped (research/tuning.md), each one line."""
    definition = _definition(PLAIN)
    for member in ("CheckpointConfig", "RetryStrategy", "EnableManagedSpotTraining"):
        del definition[member]
    definition["InputDataConfig"] = [{k: v for k, v in definition["InputDataConfig"][0].items()
                                      if k != "ContentType"}]  # content type and code dropped
    definition["Environment"] = {"MODE": "fast"}
    definition["OutputDataConfig"] = {"S3OutputPath": "s3://b/out"}
    definition["StoppingCondition"] = {"MaxRuntimeInSeconds": 3600}
    definition["AlgorithmSpecification"] = {"TrainingImage": "img", "TrainingInputMode": "File"}
    del definition["StaticHyperParameters"]["epochs"]
    lines = parity.lost_members(PLAIN, definition, tuned=["lr"])
    named = sorted(line.split(": ")[0] for line in lines)
    assert named == ["CheckpointConfig", "EnableManagedSpotTraining", "Environment.SEED",
                     "HyperParameters", "InputDataConfig", "InputDataConfig",
                     "OutputDataConfig", "RetryStrategy", "StoppingCondition.MaxWaitTimeInSeconds",
                     "TensorBoardOutputConfig"], lines
    assert any("no channel 'code'" in line for line in lines)
    assert any("channel 'train' lost its ContentType 'text/csv'" in line for line in lines)
    assert any(line.startswith("HyperParameters: a trial lost the plain training job's epochs")
               for line in lines)
    assert all("\n" not in line for line in lines)


def test_v2s_resource_shape_and_the_tuners_metric_definitions_are_no_loss() -> None:
    definition = _definition(PLAIN)
    definition["HyperParameterTuningResourceConfig"] = definition.pop("ResourceConfig")
    definition["AlgorithmSpecification"]["MetricDefinitions"] = [{"Name": "acc",
                                                                  "Regex": "acc=(.*)"}]
    lines = parity.lost_members(PLAIN, definition, tuned=["lr"])
    assert [line.split(":")[0] for line in lines] == ["TensorBoardOutputConfig"]


def _request(definition: dict[str, Any], jobs: int = 4) -> dict[str, Any]:
    return {"HyperParameterTuningJobName": "t", "TrainingJobDefinition": definition,
            "HyperParameterTuningJobConfig": {"Strategy": "Random", "ResourceLimits": {
                "MaxNumberOfTrainingJobs": jobs, "MaxParallelTrainingJobs": 2}}}


def _modeltrainer_definition(**static: str) -> dict[str, Any]:
    """A definition as sagemaker-train's tuner builds it for a ModelTrainer: its values as they
    are (not JSON-quoted), `sagemaker_program` set (`_build_driver_and_code_channels`)."""
    return {"AlgorithmSpecification": {"TrainingImage": "img", "TrainingInputMode": "File"},
            "RoleArn": "r", "OutputDataConfig": {"S3OutputPath": "s3://b/out"},
            "ResourceConfig": {"InstanceType": "ml.g5.xlarge", "InstanceCount": 2},
            "StoppingCondition": {"MaxRuntimeInSeconds": 60},
            "StaticHyperParameters": {"sagemaker_program": "train.py", **static}}


def test_a_modeltrainer_definition_runs_python_not_its_command_with_or_without_drivers() -> None:
    lines = parity.request_warnings(_request(_modeltrainer_definition()))
    assert len(lines) == 2
    assert lines[0].startswith("InputDataConfig: no 'sm_drivers' channel")
    assert "`python train.py` instead of the ModelTrainer's command" in lines[0]
    assert "#5508" in lines[0]
    assert lines[1].startswith("InputDataConfig: no 'code' channel and no "
                               "sagemaker_submit_directory")
    fixed = _modeltrainer_definition(sagemaker_submit_directory="s3://b/sourcedir.tar.gz")
    fixed["InputDataConfig"] = [{"ChannelName": "sm_drivers", "DataSource": {}}]
    # With its drivers too, its command is not what runs: the image's own program is.
    (line,) = parity.request_warnings(_request(fixed))
    assert line.startswith("AlgorithmSpecification: the tuning API carries no "
                           "ContainerEntrypoint") and "`python train.py` alone" in line
    v2 = _modeltrainer_definition(sagemaker_program='"train.py"')  # v2 and ddpjob quote theirs
    assert parity.request_warnings(_request(v2)) == []


def test_spot_without_checkpoints_and_a_shared_checkpoint_uri_are_named() -> None:
    spot = _modeltrainer_definition(sagemaker_program='"train.py"')
    spot["EnableManagedSpotTraining"] = True
    assert [line.split(":")[0] for line in parity.request_warnings(_request(spot))] == [
        "CheckpointConfig"]
    spot["CheckpointConfig"] = {"S3Uri": "s3://b/ckpt"}
    shared = parity.request_warnings(_request(spot))
    assert len(shared) == 1 and shared[0].startswith("CheckpointConfig.S3Uri s3://b/ckpt is every "
                                                     "trial's")
    assert "$TRAINING_JOB_NAME" in shared[0]  # the fix
    assert parity.request_warnings(_request(spot, jobs=1)) == []  # one trial shares nothing


def test_ddpjobs_tuner_names_each_lost_member_when_it_builds_the_request(
        local_estimator: Any, caplog: Any) -> None:
    estimator = local_estimator(tensorboard_output_config={"S3OutputPath": "file:///tmp/tb"},
                                checkpoint_s3_uri="file:///tmp/ckpt")
    tuner = HyperparameterTuner(estimator, "loss", {"lr": CategoricalParameter([0.1, 0.2])},
                                objective_type="Minimize", strategy="Grid")
    with caplog.at_level(logging.WARNING, logger="ddpjob.tuning.tuner"):
        tuner.tuning_job_request(job_name="tune-lost")
    assert sorted(r.getMessage().split(" ")[0] for r in caplog.records) == [
        "CheckpointConfig.S3Uri", "TensorBoardOutputConfig:"]
