"""TrainingInput: the official signature and channel config; fit()/dry run accept it."""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any

import pytest
from ddpjob import PyTorch, TrainingInput

ROLE = "arn:aws:iam::123456789012:role/SageMakerRole"
IMAGE = "123456789012.dkr.ecr.us-east-1.amazonaws.com/ddpjob:cuda"

CASES: list[dict[str, Any]] = [
    {},
    {"distribution": "ShardedByS3Key"},
    {"content_type": "application/x-parquet", "input_mode": "FastFile"},
    {"compression": "Gzip", "record_wrapping": "RecordIO", "s3_data_type": "ManifestFile"},
    {"attribute_names": ["source-ref", "label"], "s3_data_type": "AugmentedManifestFile",
     "target_attribute_name": "label"},
    {"instance_groups": ["workers"], "distribution": "FullyReplicated"},
]


@pytest.mark.parametrize("kwargs", CASES, ids=lambda k: ",".join(k) or "defaults")
def test_config_is_the_official_one(kwargs: dict[str, Any]) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        from sagemaker.inputs import TrainingInput as Official

    uri = "s3://bucket/train/"
    assert TrainingInput(uri, **kwargs).config == Official(uri, **kwargs).config


def test_fit_takes_training_inputs(src: Path, aws_session: Any, s3_bucket: str,
                                   tmp_path: Path) -> None:
    data = tmp_path / "data"
    data.mkdir()
    estimator = PyTorch(entry_point="train.py", source_dir=str(src), role=ROLE, image_uri=IMAGE,
                        instance_type="ml.c5.xlarge", instance_count=2, session=aws_session,
                        output_path=f"s3://{s3_bucket}/out")
    request = estimator.training_job_request(
        {"train": TrainingInput(f"s3://{s3_bucket}/train", distribution="ShardedByS3Key",
                                content_type="text/csv"),
         "local": TrainingInput(str(data), input_mode="FastFile")}, job_name="ti-1")
    train, local = request["InputDataConfig"]
    assert train == {"DataSource": {"S3DataSource": {
        "S3DataType": "S3Prefix", "S3Uri": f"s3://{s3_bucket}/train",
        "S3DataDistributionType": "ShardedByS3Key"}},
        "ContentType": "text/csv", "ChannelName": "train"}
    # local data of a SageMaker job: uploaded under the default bucket (named, not created)
    assert local["DataSource"]["S3DataSource"]["S3Uri"] == \
        "s3://sagemaker-us-east-1-123456789012/ti-1/input/local/"
    assert local["InputMode"] == "FastFile"


def test_local_job_reads_sharded_channels_in_place(src: Path, local_session: Any,
                                                   tmp_path: Path) -> None:
    data = tmp_path / "data"
    data.mkdir()
    request = PyTorch(entry_point="train.py", source_dir=str(src), session=local_session,
                      ).training_job_request(
        {"train": TrainingInput(str(data), distribution="ShardedByS3Key")}, job_name="ti-2")
    source = request["InputDataConfig"][0]["DataSource"]["S3DataSource"]
    assert source == {"S3DataType": "S3Prefix", "S3Uri": data.as_uri(),
                      "S3DataDistributionType": "ShardedByS3Key"}
