"""The CreateTrainingJob request: shape checked by botocore, hyperparameters byte-for-byte."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from ddpjob import PyTorch
from ddpjob.local.session import LOCAL_IMAGE
from ddpjob.request import validate_request

ROLE = "arn:aws:iam::123456789012:role/SageMakerRole"
IMAGE = "123456789012.dkr.ecr.us-east-1.amazonaws.com/ddpjob:cuda"
TYPE = "ml.p4d.24xlarge"

# distribution -> the hyperparameters the official SDK (2.257) adds for it, JSON-encoded.
FORMS: list[tuple[str, dict, dict[str, str]]] = [
    ("torch_distributed", {"torch_distributed": {"enabled": True}},
     {"sagemaker_torch_distributed_enabled": "true", "sagemaker_instance_type": f'"{TYPE}"'}),
    ("pytorchddp", {"pytorchddp": {"enabled": True}},  # the SDK sends it as SMDDP
     {"sagemaker_distributed_dataparallel_enabled": "true",
      "sagemaker_instance_type": f'"{TYPE}"',
      "sagemaker_distributed_dataparallel_custom_mpi_options": '""'}),
    ("smdistributed", {"smdistributed": {"dataparallel": {"enabled": True}}},
     {"sagemaker_distributed_dataparallel_enabled": "true",
      "sagemaker_instance_type": f'"{TYPE}"',
      "sagemaker_distributed_dataparallel_custom_mpi_options": '""'}),
    ("smdistributed-options",
     {"smdistributed": {"dataparallel": {"enabled": True, "custom_mpi_options": "-v"}}},
     {"sagemaker_distributed_dataparallel_enabled": "true",
      "sagemaker_instance_type": f'"{TYPE}"',
      "sagemaker_distributed_dataparallel_custom_mpi_options": '"-v"'}),
    ("p5-form", {"torch_distributed": {"enabled": True},
                 "smdistributed": {"dataparallel": {"enabled": True}}},
     {"sagemaker_distributed_dataparallel_enabled": "true",
      "sagemaker_instance_type": f'"{TYPE}"',
      "sagemaker_distributed_dataparallel_custom_mpi_options": '""',
      "sagemaker_torch_distributed_enabled": "true"}),
    ("mpi", {"mpi": {"enabled": True, "processes_per_host": 4, "custom_mpi_options": "-x A"}},
     {"sagemaker_mpi_enabled": "true", "sagemaker_mpi_num_of_processes_per_host": "4",
      "sagemaker_mpi_custom_mpi_options": '"-x A"'}),
    ("mpi-disabled", {"mpi": {"enabled": False}},
     {"sagemaker_mpi_enabled": "false", "sagemaker_mpi_custom_mpi_options": '""'}),
    ("torch-disabled", {"torch_distributed": {"enabled": False}}, {}),
    ("processes-only", {"processes_per_host": 3},
     {"sagemaker_torch_distributed_enabled": "true", "sagemaker_instance_type": f'"{TYPE}"',
      "ddpjob_processes_per_host": "3"}),
    ("torchrun-with-processes", {"torch_distributed": {"enabled": True}, "processes_per_host": 2},
     {"sagemaker_torch_distributed_enabled": "true", "sagemaker_instance_type": f'"{TYPE}"',
      "ddpjob_processes_per_host": "2"}),
    ("torchrun-with-restarts", {"torch_distributed": {"enabled": True}, "max_restarts": 2},
     {"sagemaker_torch_distributed_enabled": "true", "sagemaker_instance_type": f'"{TYPE}"',
      "ddpjob_max_restarts": "2"}),
    ("none", None, {}),
]


def hosts_for(distribution: dict | None) -> int:
    """Two hosts, except for mpi, which runs on one."""
    return 1 if (distribution or {}).get("mpi", {}).get("enabled") else 2


@pytest.fixture
def estimator_for(src: Path, aws_session: Any, s3_bucket: str):
    def make(distribution: dict | None, **extra: Any) -> PyTorch:
        return PyTorch(entry_point="train.py", source_dir=str(src), instance_type=TYPE,
                       instance_count=hosts_for(distribution), distribution=distribution,
                       session=aws_session,
                       role=ROLE, image_uri=IMAGE, output_path=f"s3://{s3_bucket}/out",
                       hyperparameters={"lr": 0.01, "optimizer": "adam", "layers": [64, 32],
                                        "amp": True, "seed": None},
                       **extra)
    return make


@pytest.mark.parametrize(("form", "distribution", "expected"), FORMS, ids=[f[0] for f in FORMS])
def test_request_per_distribution_form(form: str, distribution: dict | None,
                                       expected: dict[str, str], estimator_for: Any,
                                       s3_bucket: str) -> None:
    request = estimator_for(distribution).training_job_request(
        inputs=f"s3://{s3_bucket}/train", job_name="job-1")
    validate_request(request)  # botocore's service model accepts it
    code = f"s3://{s3_bucket}/out/job-1/source/sourcedir.tar.gz"
    assert request["HyperParameters"] == {
        "lr": "0.01", "optimizer": '"adam"', "layers": "[64, 32]", "amp": "true",
        "seed": "null",
        "sagemaker_submit_directory": json.dumps(code),
        "sagemaker_program": '"train.py"',
        "sagemaker_container_log_level": "20",
        "sagemaker_job_name": '"job-1"',
        "sagemaker_region": '"us-east-1"',
        **expected,
    }
    assert request["InputDataConfig"] == [{
        "DataSource": {"S3DataSource": {"S3DataType": "S3Prefix",
                                        "S3Uri": f"s3://{s3_bucket}/train",
                                        "S3DataDistributionType": "FullyReplicated"}},
        "ChannelName": "training",
    }]
    assert request["ResourceConfig"] == {"VolumeSizeInGB": 30,
                                         "InstanceCount": hosts_for(distribution),
                                         "InstanceType": TYPE}
    assert request["AlgorithmSpecification"] == {"TrainingInputMode": "File",
                                                 "TrainingImage": IMAGE}
    assert request["RoleArn"] == ROLE
    assert request["OutputDataConfig"] == {"S3OutputPath": f"s3://{s3_bucket}/out"}
    assert request["StoppingCondition"] == {"MaxRuntimeInSeconds": 86400}
    assert s3_keys_of(s3_bucket) == []  # the dry run uploads nothing


def s3_keys_of(bucket: str) -> list[str]:
    import boto3

    return [o["Key"] for o in boto3.client("s3").list_objects_v2(Bucket=bucket).get("Contents", [])]


def test_optional_fields(estimator_for: Any, s3_bucket: str) -> None:
    request = estimator_for(
        None, use_spot_instances=True, max_run=3600, max_wait=7200, max_retry_attempts=3,
        environment={"NCCL_DEBUG": "INFO"}, tags={"team": "ml"},
        checkpoint_s3_uri=f"s3://{s3_bucket}/ckpt/run-1", checkpoint_local_path="/opt/ml/ckpt",
        code_location=f"s3://{s3_bucket}/code",
    ).training_job_request(job_name="job-2")
    assert request["StoppingCondition"] == {"MaxRuntimeInSeconds": 3600,
                                            "MaxWaitTimeInSeconds": 7200}
    assert request["EnableManagedSpotTraining"] is True
    assert request["RetryStrategy"] == {"MaximumRetryAttempts": 3}
    assert request["Environment"] == {"NCCL_DEBUG": "INFO"}
    assert request["Tags"] == [{"Key": "team", "Value": "ml"}]
    assert request["CheckpointConfig"] == {"S3Uri": f"s3://{s3_bucket}/ckpt/run-1",
                                           "LocalPath": "/opt/ml/ckpt"}
    assert json.loads(request["HyperParameters"]["sagemaker_submit_directory"]) == \
        f"s3://{s3_bucket}/code/job-2/source/sourcedir.tar.gz"
    assert "InputDataConfig" not in request


def test_generated_job_name_uses_base(estimator_for: Any) -> None:
    request = estimator_for(None, base_job_name="mnist").training_job_request()
    assert request["TrainingJobName"].startswith("mnist-")
    assert len(request["TrainingJobName"]) == len("mnist-2026-01-01-00-00-00-000-a1b2c3")


def test_local_request_placeholders(src: Path, local_session: Any, tmp_path: Path) -> None:
    data = tmp_path / "data"
    data.mkdir()
    estimator = PyTorch(entry_point="train.py", source_dir=src, instance_type="local",
                        session=local_session, checkpoint_s3_uri=str(tmp_path / "ckpt"),
                        distribution={"processes_per_host": 2})
    request = estimator.training_job_request({"train": str(data), "test": data.as_uri()},
                                             job_name="local-1")
    assert request["AlgorithmSpecification"]["TrainingImage"] == LOCAL_IMAGE
    assert request["RoleArn"].startswith("arn:aws:iam::")
    assert [c["DataSource"]["S3DataSource"]["S3Uri"] for c in request["InputDataConfig"]] == \
        [data.as_uri(), data.as_uri()]
    assert request["CheckpointConfig"] == {"S3Uri": (tmp_path / "ckpt").as_uri()}
    home_output = local_session.default_output_path()
    assert request["OutputDataConfig"]["S3OutputPath"] == home_output
    assert json.loads(request["HyperParameters"]["sagemaker_submit_directory"]) == \
        f"{home_output}/local-1/source/sourcedir.tar.gz"
    assert not (tmp_path / "home").exists()  # nothing written by the dry run


def test_botocore_errors_become_one_line() -> None:
    from ddpjob.errors import UserInputError

    with pytest.raises(UserInputError, match=r"nothing was sent: .*RoleArn") as excinfo:
        validate_request({"TrainingJobName": "x", "RoleArn": "short",
                          "AlgorithmSpecification": {"TrainingInputMode": "File"},
                          "OutputDataConfig": {"S3OutputPath": "s3://b/o"},
                          "ResourceConfig": {"VolumeSizeInGB": 30},
                          "StoppingCondition": {}})
    assert "\n" not in str(excinfo.value)


def test_limits_match_botocore_model() -> None:
    import botocore.session
    from ddpjob_runtime.shared import hyperparameters

    shape = botocore.session.get_session().get_service_model("sagemaker") \
        .operation_model("CreateTrainingJob").input_shape.members["HyperParameters"]
    assert shape.metadata["max"] == hyperparameters.MAX_ENTRIES
    assert shape.key.metadata["max"] == hyperparameters.MAX_NAME
    assert shape.value.metadata["max"] == hyperparameters.MAX_VALUE
