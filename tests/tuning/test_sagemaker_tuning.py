"""Tuning jobs on SageMaker, against the moto server over HTTP: `fit` uploads as
`estimator.fit` does and sends the request it built; describe, wait, best job and attach read
moto's answer. moto's tuning job is a stub (Completed at once, a made-up best job, no trials,
no StopHyperParameterTuningJob), so these tests check the requests and what moto answers."""

from __future__ import annotations

import datetime as dt
import io
import json
import tarfile
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import boto3
import pytest
from ddpjob import CategoricalParameter, ContinuousParameter, HyperparameterTuner, PyTorch
from ddpjob import request as training_request
from ddpjob.errors import JobNotFoundError, UserInputError
from ddpjob.sagemaker.errors import AwsError
from ddpjob.sagemaker.session import Session
from ddpjob.tuning import request as tuning_request
from ddpjob.tuning.job import TuningJob, TuningJobFailedError

from tests.tuning.conftest import T0, save_checkpoint

ACCOUNT = "123456789012"
REGION = "us-east-1"
ROLE = f"arn:aws:iam::{ACCOUNT}:role/SageMakerRole"
LOSS = [{"Name": "loss", "Regex": r"loss=([0-9.]+)"}]
RANGES = {"lr": ContinuousParameter(1e-4, 1e-1, "Logarithmic"),
          "optimizer": CategoricalParameter(["adam", "sgd"])}
SENT = ("HyperParameterTuningJobName", "HyperParameterTuningJobConfig", "TrainingJobDefinition")


def _tuner(src: Path, bucket: str, **changes: Any) -> HyperparameterTuner:
    estimator = PyTorch(entry_point="train.py", source_dir=str(src), instance_type="ml.m5.xlarge",
                        instance_count=2, role=ROLE, session=Session(),
                        hyperparameters={"epochs": 3, "lr": 0.1}, metric_definitions=LOSS,
                        distribution={"torch_distributed": {"enabled": True}},
                        output_path=f"s3://{bucket}/out", checkpoint_s3_uri=f"s3://{bucket}/ckpt",
                        use_spot_instances=True, max_wait=7200, max_run=3600,
                        max_retry_attempts=2, environment={"MODE": "fast"})
    return HyperparameterTuner(estimator, "loss", RANGES, objective_type="Minimize",
                               **{"strategy": "Random", "max_jobs": 4, "random_seed": 3,
                                  **changes})


def _keys(bucket: str) -> list[str]:
    listed = boto3.client("s3").list_objects_v2(Bucket=bucket)
    return sorted(item["Key"] for item in listed.get("Contents", []))


def _moto_job(name: str) -> Any:
    from moto.sagemaker.models import sagemaker_backends

    return sagemaker_backends[ACCOUNT][REGION].hyper_parameter_tuning_jobs[name]


def test_fit_uploads_then_sends_the_request_it_built(src: Path, tmp_path: Path,
                                                     s3_bucket: str) -> None:
    data = tmp_path / "data"
    data.mkdir()
    (data / "part-0.csv").write_text("1,2\n")
    tuner = _tuner(src, s3_bucket)
    inputs = {"train": str(data), "test": f"s3://{s3_bucket}/test"}
    built = tuner.tuning_job_request(inputs, job_name="tune-fit-1")
    tuner.fit(inputs, job_name="tune-fit-1")

    code = boto3.client("s3").get_object(Bucket=s3_bucket,
                                         Key="out/tune-fit-1/source/sourcedir.tar.gz")
    with tarfile.open(fileobj=io.BytesIO(code["Body"].read())) as tar:
        assert "train.py" in tar.getnames()
    session = tuner.estimator.session
    uploaded = boto3.client("s3").get_object(Bucket=session.default_bucket(),
                                             Key="tune-fit-1/input/train/part-0.csv")
    assert uploaded["Body"].read() == b"1,2\n"

    described = tuner.describe()
    received = {member: described[member] for member in SENT}
    assert received == {member: built[member] for member in SENT}
    training_request.validate_request(received, tuning_request.OPERATION)
    definition = received["TrainingJobDefinition"]
    assert definition["EnableManagedSpotTraining"] is True
    assert definition["StoppingCondition"]["MaxWaitTimeInSeconds"] == 7200
    assert definition["CheckpointConfig"] == {"S3Uri": f"s3://{s3_bucket}/ckpt"}
    assert definition["RetryStrategy"] == {"MaximumRetryAttempts": 2}
    assert definition["Environment"] == {"MODE": "fast"}
    assert "lr" not in definition["StaticHyperParameters"]
    assert [c["ChannelName"] for c in definition["InputDataConfig"]] == ["train", "test"]
    assert described["HyperParameterTuningJobStatus"] == "Completed"  # moto: at once
    assert tuner.best_training_job() == "FakeTrainingJobName"  # moto's made-up best job


def test_a_name_in_use_is_refused_before_anything_is_uploaded(src: Path, s3_bucket: str) -> None:
    _tuner(src, s3_bucket).fit(job_name="tune-twice", wait=False)
    before = _keys(s3_bucket)
    second = _tuner(src, s3_bucket, max_jobs=2)
    with pytest.raises(AwsError, match=r"a hyperparameter tuning job named 'tune-twice' already "
                                       r"exists in us-east-1") as raised:
        second.fit(job_name="tune-twice", wait=False)
    assert raised.value.code == "ResourceInUse"
    assert _keys(s3_bucket) == before
    assert second.latest_tuning_job is None


def test_a_request_the_model_refuses_sends_and_stores_nothing(src: Path, s3_bucket: str) -> None:
    parents = [{"HyperParameterTuningJobName": f"p-{i}"} for i in range(6)]
    tuner = _tuner(src, s3_bucket, warm_start_config={
        "WarmStartType": "TransferLearning", "ParentHyperParameterTuningJobs": parents})
    with pytest.raises(UserInputError, match=r"at most 5 allowed"):
        tuner.fit(job_name="tune-refused")
    assert _keys(s3_bucket) == []
    with pytest.raises(JobNotFoundError, match=r"^No hyperparameter tuning job named "
                                               r"'tune-refused' in us-east-1"):
        Session().describe_tuning_job("tune-refused")


def test_wait_ends_on_the_jobs_final_status(src: Path, s3_bucket: str) -> None:
    _tuner(src, s3_bucket).fit(job_name="tune-failed", wait=False)
    _moto_job("tune-failed").hyper_parameter_tuning_job_status = "Failed"
    _moto_job("tune-failed").failure_reason = "No training job succeeded after 5 attempts"
    with pytest.raises(TuningJobFailedError, match=r"^Hyperparameter tuning job tune-failed "
                                                   r"ended Failed: No training job succeeded"):
        TuningJob(Session(), "tune-failed", poll_seconds=0).wait()
    _moto_job("tune-failed").hyper_parameter_tuning_job_status = "Stopped"
    assert TuningJob(Session(), "tune-failed").wait()["HyperParameterTuningJobStatus"] == \
        "Stopped"


def test_wait_polls_while_the_job_runs(src: Path, s3_bucket: str) -> None:
    """moto's job is Completed at once: it is set InProgress, and each Describe answer moto
    sends moves it one step on (InProgress, Stopping, then Stopped)."""
    _tuner(src, s3_bucket).fit(job_name="tune-polled", wait=False)
    job = _moto_job("tune-polled")
    job.hyper_parameter_tuning_job_status = "InProgress"
    after = {"InProgress": "Stopping", "Stopping": "Stopped"}
    seen: list[str] = []

    def next_status(parsed: dict, **_: Any) -> None:
        seen.append(parsed["HyperParameterTuningJobStatus"])
        job.hyper_parameter_tuning_job_status = after.get(seen[-1], seen[-1])

    session = Session()
    session.sagemaker_client.meta.events.register(
        "after-call.sagemaker.DescribeHyperParameterTuningJob", next_status)
    ended = TuningJob(session, "tune-polled", poll_seconds=0).wait()
    assert ended["HyperParameterTuningJobStatus"] == "Stopped"
    assert seen == ["InProgress", "Stopping", "Stopped"]


def test_attach_rebuilds_the_tuner(src: Path, s3_bucket: str) -> None:
    original = _tuner(src, s3_bucket, max_parallel_jobs=2)
    original.fit(job_name="tune-attach", wait=False)
    attached = HyperparameterTuner.attach("tune-attach", Session())
    assert attached.latest_tuning_job is not None
    assert attached.latest_tuning_job.name == "tune-attach"
    assert attached.hyperparameter_ranges() == original.hyperparameter_ranges()
    assert (attached.strategy, attached.objective_type, attached.max_jobs,
            attached.max_parallel_jobs, attached.random_seed) == ("Random", "Minimize", 4, 2, 3)
    assert attached.estimator.hyperparameters() == {"epochs": "3"}
    assert attached.estimator.instance_count == 2
    again = attached.tuning_job_request(job_name="tune-attach-2")["TrainingJobDefinition"]
    first = original.tuning_job_request(job_name="tune-attach")["TrainingJobDefinition"]
    changed = {name for name, value in again["StaticHyperParameters"].items()
               if first["StaticHyperParameters"][name] != value}
    assert changed == {"sagemaker_job_name"}  # the code is the stored archive of the first
    assert {k: v for k, v in again.items() if k != "StaticHyperParameters"} == \
        {k: v for k, v in first.items() if k != "StaticHyperParameters"}


def _answer_trials(session: Session, summaries: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """moto has no ListTrainingJobsForHyperParameterTuningJob: `summaries` are answered before
    the call leaves, one per page (NextToken) as SageMaker may page; returns the requests."""
    requests: list[dict[str, Any]] = []

    def answer(params: dict[str, Any], **_: Any) -> tuple[Any, dict[str, Any]]:
        requests.append(json.loads(params["body"]))
        start = int(requests[-1].get("NextToken", 0))
        page: dict[str, Any] = {"TrainingJobSummaries": summaries[start:start + 1]}
        if start + 1 < len(summaries):
            page["NextToken"] = str(start + 1)
        return SimpleNamespace(status_code=200, headers={}), page

    session.sagemaker_client.meta.events.register(
        "before-call.sagemaker.ListTrainingJobsForHyperParameterTuningJob", answer)
    return requests


def _upload_checkpoint(tmp_path: Path, bucket: str, prefix: str, step: int, at: float,
                       data: bytes) -> None:
    folder = save_checkpoint(tmp_path / prefix, step, at, data)
    for path in folder.iterdir():
        boto3.client("s3").put_object(Bucket=bucket, Key=f"{prefix}/{folder.name}/{path.name}",
                                      Body=path.read_bytes())


def test_best_estimator_and_analytics_read_the_trials(src: Path, tmp_path: Path,
                                                      s3_bucket: str) -> None:
    """moto's best job is made up: it is created here, as a trial of the tuning job would be;
    the trials' list is answered in moto's stead, one per page. The trials ran one after the
    other and saved their checkpoints in the folder they share: the best estimator's are those
    saved while the best trial ran, not the folder's latest."""
    tuner = _tuner(src, s3_bucket)
    tuner.fit(job_name="tune-best")
    best = tuner.best_training_job()
    tuner.estimator.fit(job_name=best, wait=False)
    trials = [{"TrainingJobName": best, "TrainingJobStatus": "Completed",
               "TunedHyperParameters": {"lr": "0.01", "optimizer": '"adam"'},
               "TrainingStartTime": T0, "TrainingEndTime": T0 + dt.timedelta(seconds=100),
               "FinalHyperParameterTuningJobObjectiveMetric": {"MetricName": "loss",
                                                               "Value": 0.25}},
              {"TrainingJobName": "tune-best-002-0a1b2c3d", "TrainingJobStatus": "Completed",
               "TunedHyperParameters": {"lr": "0.05", "optimizer": '"sgd"'},
               "TrainingStartTime": T0 + dt.timedelta(seconds=120),
               "TrainingEndTime": T0 + dt.timedelta(seconds=200),
               "FinalHyperParameterTuningJobObjectiveMetric": {"MetricName": "loss",
                                                               "Value": 0.5}}]
    requests = _answer_trials(tuner.sagemaker_session, trials)
    _upload_checkpoint(tmp_path, s3_bucket, "ckpt", 2, 90, b"the best trial's")
    _upload_checkpoint(tmp_path, s3_bucket, "ckpt", 5, 150, b"the next trial's")

    estimator = tuner.best_estimator()
    assert isinstance(estimator, PyTorch)
    assert estimator.latest_training_job is not None
    assert estimator.latest_training_job.name == best
    assert estimator.checkpoint_s3_uri == f"s3://{s3_bucket}/ckpt"
    folder = estimator.download_checkpoint(tmp_path / "best")
    assert (folder.name, (folder / "state.pt").read_bytes()) == (
        "step-000000002", b"the best trial's")
    assert tuner.estimator.download_checkpoint(tmp_path / "latest").name == "step-000000005"

    frame = tuner.analytics().dataframe()
    assert frame.TrainingJobName.tolist() == [best, "tune-best-002-0a1b2c3d"]
    assert frame.lr.tolist() == [0.01, 0.05]
    assert frame.FinalObjectiveValue.tolist() == [0.25, 0.5]
    assert frame.TrainingElapsedTimeSeconds.tolist() == [100.0, 80.0]
    assert [r.get("NextToken") for r in requests] == [None, "1", None, "1"]
    assert requests[0]["HyperParameterTuningJobName"] == "tune-best"

    attached = HyperparameterTuner.attach("tune-best", tuner.sagemaker_session)
    assert [r["TrainingJobName"] for r in attached.analytics().rows()] == frame[
        "TrainingJobName"].tolist()
    assert attached.best_estimator().latest_training_job.name == best
