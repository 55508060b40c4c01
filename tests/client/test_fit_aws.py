"""fit(wait=False) and attach() against SageMaker and S3 on the moto server (real HTTP).

End-to-end runs that wait for a job to finish are the local backend's tests (tests/local).
"""

from __future__ import annotations

import io
import json
import tarfile
import uuid
from pathlib import Path
from typing import Any

import boto3
from ddpjob import PyTorch, image_uris
from ddpjob.sagemaker.session import Session

ROLE = "arn:aws:iam::123456789012:role/SageMakerRole"
IMAGE = "123456789012.dkr.ecr.us-east-1.amazonaws.com/ddpjob:cuda"


def test_fit_uploads_code_and_inputs_then_submits(src: Path, tmp_path: Path, aws_session: Any,
                                                  s3_bucket: str) -> None:
    data = tmp_path / "data"
    data.mkdir()
    (data / "part-0.csv").write_text("1,2\n")
    estimator = PyTorch(entry_point="train.py", source_dir=src, instance_type="ml.g5.xlarge",
                        instance_count=2, role=ROLE, image_uri=IMAGE, session=aws_session,
                        distribution={"torch_distributed": {"enabled": True}},
                        hyperparameters={"epochs": 2},
                        output_path=f"s3://{s3_bucket}/out",
                        checkpoint_s3_uri=f"s3://{s3_bucket}/ckpt/run-1")
    estimator.fit({"train": str(data), "test": f"s3://{s3_bucket}/test"}, wait=False,
                  job_name="fit-aws-1")
    assert estimator.latest_training_job.job_name == "fit-aws-1"

    s3 = boto3.client("s3")
    code = s3.get_object(Bucket=s3_bucket, Key="out/fit-aws-1/source/sourcedir.tar.gz")
    with tarfile.open(fileobj=io.BytesIO(code["Body"].read())) as tar:
        assert sorted(tar.getnames()) == ["helper.py", "train.py"]
    assert "sha256" in code["Metadata"]
    default_bucket = aws_session.default_bucket()
    uploaded = s3.get_object(Bucket=default_bucket, Key="fit-aws-1/input/train/part-0.csv")
    assert uploaded["Body"].read() == b"1,2\n"

    described = estimator.describe()
    assert described["TrainingJobName"] == "fit-aws-1"
    channels = {c["ChannelName"]: c["DataSource"]["S3DataSource"]["S3Uri"]
                for c in described["InputDataConfig"]}
    assert channels == {"train": f"s3://{default_bucket}/fit-aws-1/input/train/",
                        "test": f"s3://{s3_bucket}/test"}
    assert json.loads(described["HyperParameters"]["epochs"]) == 2


def test_attach_rebuilds_the_estimator(src: Path, aws_session: Any, s3_bucket: str) -> None:
    original = PyTorch(entry_point="train.py", source_dir=src, instance_type="ml.g5.xlarge",
                       instance_count=1, role=ROLE, image_uri=IMAGE, session=aws_session,
                       distribution={"mpi": {"enabled": True, "processes_per_host": 4}},
                       hyperparameters={"lr": 0.1, "name": "x"},
                       output_path=f"s3://{s3_bucket}/out",
                       checkpoint_s3_uri=f"s3://{s3_bucket}/ckpt/run-2")
    original.fit(wait=False, job_name="fit-aws-attach")
    attached = PyTorch.attach("fit-aws-attach", sagemaker_session=aws_session, wait=False)
    assert attached.latest_training_job.name == "fit-aws-attach"
    assert (attached.instance_type, attached.instance_count) == ("ml.g5.xlarge", 1)
    assert attached.entry_point == "train.py"
    assert attached.hyperparameters() == {"lr": "0.1", "name": '"x"'}
    assert attached.distribution == {"mpi": {"enabled": True, "processes_per_host": 4}}
    assert attached.checkpoint_s3_uri == f"s3://{s3_bucket}/ckpt/run-2"
    assert attached.checkpoints() == []


def test_fit_on_the_dlc_submits_the_official_image(src: Path, aws_session: Any,
                                                   s3_bucket: str) -> None:
    """No image_uri: the job moto receives names SageMaker's PyTorch container."""
    estimator = PyTorch(entry_point="train.py", source_dir=src, instance_type="ml.m5.xlarge",
                        instance_count=2, role=ROLE, sagemaker_session=aws_session,
                        distribution={"torch_distributed": {"enabled": True}},
                        output_path=f"s3://{s3_bucket}/out")
    estimator.fit(wait=False, logs="None", job_name="fit-aws-dlc")
    code = boto3.client("s3").get_object(Bucket=s3_bucket,
                                         Key="out/fit-aws-dlc/source/sourcedir.tar.gz")
    with tarfile.open(fileobj=io.BytesIO(code["Body"].read())) as tar:
        names = tar.getnames()  # the DLC lacks ddpjob: its runtime travels with the code
    assert {"train.py", "ddpjob_runtime/__init__.py", "ddpjob_runtime/checkpoints.py"} <= set(names)
    described = estimator.describe()
    version, py_version = image_uris.default_versions()
    assert described["AlgorithmSpecification"]["TrainingImage"] == \
        f"763104351884.dkr.ecr.us-east-1.amazonaws.com/pytorch-training:{version}-cpu-{py_version}"
    assert estimator.uses_dlc
    attached = PyTorch.attach("fit-aws-dlc", sagemaker_session=aws_session, wait=False)
    assert attached.uses_dlc
    assert attached.distribution == {"torch_distributed": {"enabled": True}}


def test_the_dry_run_names_the_default_bucket_and_creates_nothing(src: Path, aws_env: str,
                                                                  moto_probe: Any) -> None:
    session = Session(default_bucket=f"ddpjob-dry-{uuid.uuid4().hex[:12]}")
    buckets_before = moto_probe.buckets()
    request = PyTorch(entry_point="train.py", source_dir=src, instance_type="ml.m5.xlarge",
                      role=ROLE, sagemaker_session=session).training_job_request(
        str(src), job_name="dry-1")
    root = session.default_output_path()
    assert request["OutputDataConfig"]["S3OutputPath"] == root
    assert request["InputDataConfig"][0]["DataSource"]["S3DataSource"]["S3Uri"] == \
        f"{root}dry-1/input/training/"
    assert moto_probe.buckets() == buckets_before
