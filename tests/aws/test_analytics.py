"""training_job_analytics of a SageMaker job: CloudWatch's one-minute averages (moto server)."""

from __future__ import annotations

import datetime as dt
import sys

import boto3
import pytest
from ddpjob import analytics
from ddpjob.sagemaker.session import Session

NAMESPACE = "/aws/sagemaker/TrainingJobs"


def _put(job: str, name: str, value: float, at: dt.datetime) -> None:
    boto3.client("cloudwatch").put_metric_data(Namespace=NAMESPACE, MetricData=[{
        "MetricName": name, "Value": value, "Timestamp": at,
        "Dimensions": [{"Name": "TrainingJobName", "Value": job}]}])


def _trained_for(job: str, seconds: int) -> dt.datetime:
    """Give moto's job (created already Completed) a training that lasted `seconds`."""
    from moto.sagemaker.models import sagemaker_backends

    from tests.aws.conftest import ACCOUNT, REGION

    record = sagemaker_backends[ACCOUNT][REGION].training_jobs[job]
    record.training_end_time = record.training_start_time + dt.timedelta(seconds=seconds)
    return record.training_start_time


def test_the_series_comes_from_cloudwatch(aws_env, training_request, job_name, monkeypatch):
    session = Session()
    session.submit(training_request(job_name))
    start = _trained_for(job_name, 300)
    _put(job_name, "train:loss", 0.5, start + dt.timedelta(seconds=1))
    _put("another-job", "train:loss", 9.0, start + dt.timedelta(seconds=1))
    _put(job_name, "train:loss", 0.25, start + dt.timedelta(seconds=150))  # a later minute
    frame = analytics.metrics_for_job(session, job_name, metric_names=["train:loss"])
    assert list(frame.columns) == ["timestamp", "metric_name", "value"]
    assert frame.metric_name.tolist() == ["train:loss", "train:loss"]
    assert frame.value.tolist() == [0.5, 0.25]
    # CloudWatch's one-minute periods: each point at the start of its minute.
    first, second = frame.timestamp.tolist()
    assert -60 < first <= 1 and 90 < second <= 150 and second - first in (120, 180)
    assert session.metric_series(job_name, ["val:loss"]) == []
    monkeypatch.setitem(sys.modules, "pandas", None)
    with pytest.raises(ModuleNotFoundError, match="needs pandas"):
        analytics.metrics_for_job(session, job_name, metric_names=["val:loss"])


def test_the_estimators_training_job_analytics(aws_env, training_request, job_name):
    """The official SDK's property: the series of the estimator's latest job, its metrics."""
    from ddpjob import PyTorch

    session = Session()
    request = training_request(job_name)
    request["AlgorithmSpecification"]["MetricDefinitions"] = [
        {"Name": "train:loss", "Regex": "loss=([0-9.]+)"}]
    request["HyperParameters"]["sagemaker_submit_directory"] = \
        '"s3://some-bucket/code/sourcedir.tar.gz"'
    session.submit(request)
    # moto describes every job with a MetricDefinitions of its own: use the name it answers
    [metric] = [d["Name"] for d in
                session.describe(job_name).raw["AlgorithmSpecification"]["MetricDefinitions"]]
    _put(job_name, metric, 0.5, _trained_for(job_name, 120) + dt.timedelta(seconds=1))
    estimator = PyTorch.attach(job_name, sagemaker_session=session, wait=False)
    analytics_of_job = estimator.training_job_analytics
    assert analytics_of_job.name == job_name
    frame = analytics_of_job.dataframe()
    assert frame.metric_name.tolist() == [metric] and frame.value.tolist() == [0.5]
