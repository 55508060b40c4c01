"""Fixtures of the client tests: a source folder, a LocalSession home, a Session on moto."""

from __future__ import annotations

from pathlib import Path

import pytest


@pytest.fixture
def src(tmp_path: Path) -> Path:
    """A source folder with an entry point and a helper module."""
    folder = tmp_path / "src"
    folder.mkdir()
    (folder / "train.py").write_text("import helper\nprint(helper.VALUE)\n")
    (folder / "helper.py").write_text("VALUE = 1\n")
    return folder


@pytest.fixture
def local_session(tmp_path: Path):
    """A LocalSession whose home is a fresh folder (so 'nothing happened' is checkable)."""
    from ddpjob.local.session import LocalSession

    return LocalSession(home=tmp_path / "home")


@pytest.fixture
def aws_session(aws_env: str):
    """A SageMaker Session talking to the moto server."""
    from ddpjob.sagemaker.session import Session

    return Session()


class MotoProbe:
    """Looks at what the moto server holds (to assert that nothing was uploaded or started)."""

    @staticmethod
    def s3_keys(bucket: str) -> list[str]:
        """Every key in a moto bucket."""
        import boto3

        pages = boto3.client("s3").get_paginator("list_objects_v2").paginate(Bucket=bucket)
        return sorted(item["Key"] for page in pages for item in page.get("Contents", []))

    @staticmethod
    def training_jobs() -> list[str]:
        """Names of the training jobs moto knows."""
        import boto3

        response = boto3.client("sagemaker").list_training_jobs()
        return [job["TrainingJobName"] for job in response["TrainingJobSummaries"]]

    @staticmethod
    def buckets() -> list[str]:
        """Every bucket on the moto server."""
        import boto3

        return [bucket["Name"] for bucket in boto3.client("s3").list_buckets()["Buckets"]]


@pytest.fixture
def moto_probe(aws_env: str) -> MotoProbe:
    """What the moto server holds."""
    return MotoProbe()
