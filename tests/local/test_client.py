"""LocalSageMakerClient's API contract: boto3's errors and shapes, request validation, listing."""

from __future__ import annotations

import datetime as dt
import threading
from pathlib import Path
from typing import Any

import pytest
from botocore.exceptions import ClientError, ParamValidationError
from ddpjob.local.base.admitted import admit
from ddpjob.local.base.jobstate import JobState
from ddpjob.local.base.jobstore import JobExists, JobStore
from ddpjob.local.session import LocalSession
from ddpjob.sagemaker.errors import AwsError, InvalidRequestError, JobNotFoundError

from tests.local.conftest import (
    assert_no_processes,
    training_request,
    wait_until_ended,
)


def _request(session: LocalSession, name: str = "job-1", **changes: Any) -> dict[str, Any]:
    missing = (session.home.parent / "missing" / "sourcedir.tar.gz").as_uri()
    request = training_request(session, name, missing, "train.py")
    request.update(changes)
    return request


def _code(error: pytest.ExceptionInfo) -> str:
    return error.value.response["Error"]["Code"]


def test_unknown_job_errors_are_sagemakers(session: LocalSession) -> None:
    client = session.sagemaker_client
    for call in (client.describe_training_job, client.stop_training_job):
        with pytest.raises(ClientError) as error:
            call(TrainingJobName="no-such-job")
        assert _code(error) == "ValidationException"
        assert error.value.response["Error"]["Message"] == "Requested resource not found."
    with pytest.raises(JobNotFoundError, match="no-such-job") as not_found:
        session.describe("no-such-job")
    # It names where it looked, and does not send a local user to an AWS region.
    assert f"in local home {session.home}" in str(not_found.value)
    assert "region" not in str(not_found.value)
    with pytest.raises(JobNotFoundError):
        list(session.logs("no-such-job"))
    assert client.list_training_jobs()["TrainingJobSummaries"] == []


def test_session_errors_name_local_mode(session: LocalSession) -> None:
    request = _request(session, TrainingJobName="bad_name")
    with pytest.raises(InvalidRequestError, match=r"^local mode rejected CreateTrainingJob: "):
        session.submit(request)


HYPERPARAMETER_NAME = "x" * 257


@pytest.mark.parametrize(
    ("changes", "error", "words"),
    [
        # Shapes: botocore's own checks, raised before anything happens, as boto3 does.
        ({"RoleArn": None}, ParamValidationError, "RoleArn"),
        ({"HyperParameters": {"sagemaker_program": "train.py", "epochs": 3}}, ParamValidationError,
         "HyperParameters.epochs"),
        ({"ResourceConfig": {"InstanceType": "local", "InstanceCount": "2",
                             "VolumeSizeInGB": 1}}, ParamValidationError, "InstanceCount"),
        ({"Unknown": 1}, ParamValidationError, "Unknown parameter"),
        ({"OutputDataConfig": {}}, ParamValidationError, "S3OutputPath"),
        # Content: what SageMaker's server (or local mode) rejects, as a ValidationException.
        ({"TrainingJobName": "bad_name"}, ClientError, "regular expression"),
        ({"TrainingJobName": "a" * 64}, ClientError, "at most 63"),
        ({"ResourceConfig": {"InstanceType": "ml.p4d.24xlarge", "InstanceCount": 1,
                             "VolumeSizeInGB": 1}}, ClientError,
         "'ml.p4d.24xlarge' cannot run in local mode"),
        ({"ResourceConfig": {"InstanceType": "local", "InstanceCount": 0, "VolumeSizeInGB": 1}},
         ClientError, "at least 1"),
        ({"HyperParameters": {"sagemaker_program": '"t.py"', "lr": "1" * 2501}}, ClientError,
         "at most 2500"),
        ({"HyperParameters": {"sagemaker_program": '"t.py"', HYPERPARAMETER_NAME: "1"}},
         ClientError, "at most 256"),
        ({"HyperParameters": {f"h{i}": "1" for i in range(101)}}, ClientError, "at most 100"),
        ({"HyperParameters": {"epochs": "1"}}, ClientError, "sagemaker_program"),
        ({"OutputDataConfig": {"S3OutputPath": "/tmp/out"}}, ClientError, "s3:// or file://"),
        ({"CheckpointConfig": {"S3Uri": "gs://bucket/ckpt"}}, ClientError, "CheckpointConfig"),
        ({"InputDataConfig": [{"ChannelName": "train", "DataSource": {"FileSystemDataSource": {
            "FileSystemId": "fs-12345678", "FileSystemAccessMode": "ro", "FileSystemType": "EFS",
            "DirectoryPath": "/data"}}}]}, ClientError, "S3DataSource only"),
        ({"InputDataConfig": [{"ChannelName": "train", "DataSource": {"S3DataSource": {
            "S3DataType": "S3Prefix", "S3Uri": "http://example.com/data"}}}]}, ClientError,
         "channel 'train'"),
    ],
)
def test_invalid_requests_are_refused_and_nothing_is_created(
    session: LocalSession, changes: dict, error: type, words: str
) -> None:
    request = _request(session, **changes)
    request = {k: v for k, v in request.items() if v is not None}
    with pytest.raises(error) as raised:
        session.sagemaker_client.create_training_job(**request)
    assert words in str(raised.value)
    if error is ClientError:
        assert _code(raised) == "ValidationException"
    assert not (session.home / "jobs").exists() or not list((session.home / "jobs").iterdir())


def test_local_gpu_needs_a_gpu_per_host(
    session: LocalSession, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0")  # one GPU visible, two hosts asked for
    request = _request(session, ResourceConfig={"InstanceType": "local_gpu", "InstanceCount": 2})
    with pytest.raises(ClientError, match="needs at least 2 GPU"):
        session.sagemaker_client.create_training_job(**request)
    with pytest.raises(InvalidRequestError, match="needs at least 2 GPU"):
        session.submit(request)
    assert not (session.home / "jobs").exists() or not list((session.home / "jobs").iterdir())
    # A dry run asks nothing of this machine: the request of a GPU job is built on a laptop.
    assert session.submit_dryrun(request)["ResourceConfig"]["InstanceCount"] == 2


def test_jobs_that_fail_before_the_script_list_and_clash(session: LocalSession) -> None:
    """Real jobs whose source is missing: they fail fast, with the runtime's reason."""
    client = session.sagemaker_client
    for name in ("alpha-1", "beta-1", "alpha-2"):
        response = client.create_training_job(**_request(session, name))
        assert response["TrainingJobArn"] == (
            f"arn:aws:sagemaker:local:000000000000:training-job/{name}"
        )
    with pytest.raises(client.exceptions.ResourceInUse) as error:
        client.create_training_job(**_request(session, "beta-1"))
    assert _code(error) == "ResourceInUse"

    for name in ("alpha-1", "beta-1", "alpha-2"):
        job = wait_until_ended(session, name, timeout_s=60)
        assert job["TrainingJobStatus"] == "Failed"
        assert job["FailureReason"].startswith("AlgorithmError: host algo-1"), job
        assert "missing" in job["FailureReason"]  # names the source that was not found
        assert isinstance(job["CreationTime"], dt.datetime) and job["CreationTime"].tzinfo
    assert_no_processes(session.home)

    page = client.list_training_jobs(NameContains="ALPHA", SortBy="Name", SortOrder="Descending")
    assert [j["TrainingJobName"] for j in page["TrainingJobSummaries"]] == ["alpha-2", "alpha-1"]
    assert set(page["TrainingJobSummaries"][0]) >= {
        "TrainingJobName", "TrainingJobArn", "CreationTime", "TrainingJobStatus"
    }
    first = client.list_training_jobs(MaxResults=2, SortBy="Name")
    second = client.list_training_jobs(MaxResults=2, SortBy="Name", NextToken=first["NextToken"])
    assert [j["TrainingJobName"] for j in first["TrainingJobSummaries"]] == ["alpha-1", "alpha-2"]
    assert [j["TrainingJobName"] for j in second["TrainingJobSummaries"]] == ["beta-1"]
    assert "NextToken" not in second
    assert client.list_training_jobs(StatusEquals="Completed")["TrainingJobSummaries"] == []
    future = dt.datetime.now() + dt.timedelta(hours=1)
    assert client.list_training_jobs(CreationTimeAfter=future)["TrainingJobSummaries"] == []
    assert len(session.list(CreationTimeBefore=future, MaxResults=1)) == 3


@pytest.mark.parametrize("token", ["garbage", "-1", "1e9", "0x10", "٣", "9" * 40, "1 "])
def test_a_list_token_not_given_out_here_is_a_validation_error(session, token: str) -> None:
    with pytest.raises(session.sagemaker_client.exceptions.ClientError) as error:
        session.sagemaker_client.list_training_jobs(NextToken=token)
    assert _code(error) == "ValidationException"
    assert "Invalid pagination token" in str(error.value)


@pytest.mark.parametrize("seconds", [21601, 10**9])
def test_an_update_outside_the_models_keep_alive_bounds_is_refused(session, seconds) -> None:
    """boto3 checks no maximum (and the client-side minimum only): the server's bounds, as
    CreateTrainingJob's, come from the service model."""
    with pytest.raises(session.sagemaker_client.exceptions.ClientError) as error:
        session.sagemaker_client.update_training_job(
            TrainingJobName="any-job", ResourceConfig={"KeepAlivePeriodInSeconds": seconds})
    assert "KeepAlivePeriodInSeconds" in str(error.value)


def test_a_name_is_created_once_even_when_raced(tmp_path: Path) -> None:
    """Two creators of one name at the same moment: exactly one wins (rename is atomic)."""
    store = JobStore(tmp_path)
    outcomes: list[str] = []
    barrier = threading.Barrier(8)

    def create(i: int) -> None:
        barrier.wait(timeout=10)
        try:
            request = {"TrainingJobName": "same", "by": i, "OutputDataConfig": {
                "S3OutputPath": "file:///out"}, "ResourceConfig": {"InstanceType": "local"}}
            store.create(request, admit(request, "ddpjob's runtime", None),
                         JobState.new(f"same-{i}"))
            outcomes.append("created")
        except JobExists:
            outcomes.append("exists")

    threads = [threading.Thread(target=create, args=(i,)) for i in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=10)
    assert sorted(outcomes) == ["created"] + ["exists"] * 7
    creator = store.request("same")["by"]
    assert store.state("same").name == f"same-{creator}"  # one creator's files
    assert store.names() == ["same"]


def test_a_taken_name_is_refused_before_anything_is_staged(session: LocalSession) -> None:
    """The name is reserved first: a second submission never runs its uploads."""
    staged: list[str] = []
    session.submit(_request(session, "taken"), stage=lambda: staged.append("first"))
    with pytest.raises(AwsError, match="ResourceInUse"):
        session.submit(_request(session, "taken"), stage=lambda: staged.append("second"))
    assert staged == ["first"]
    wait_until_ended(session, "taken", timeout_s=60)
    assert_no_processes(session.home)


def test_a_failed_stage_gives_the_name_back_and_starts_nothing(session: LocalSession) -> None:
    def broken_upload() -> None:
        raise OSError("disk full")

    with pytest.raises(OSError, match="disk full"):
        session.submit(_request(session, "retry-me"), stage=broken_upload)
    assert session.list() == []
    assert not session.job_dir("retry-me").exists()
    session.submit(_request(session, "retry-me"))  # the name is free again
    wait_until_ended(session, "retry-me", timeout_s=60)
    assert_no_processes(session.home)


def test_the_dry_run_writes_nothing(session: LocalSession) -> None:
    request = _request(session, "dry", OutputDataConfig={"S3OutputPath": ""})
    checked = session.submit_dryrun(request)
    assert checked["OutputDataConfig"]["S3OutputPath"] == session.default_output_path()
    assert request["OutputDataConfig"]["S3OutputPath"] == ""  # the caller's request is untouched
    assert not session.home.exists()


def test_staged_files_are_private(session: LocalSession) -> None:
    target = session.home / "output" / "up" / "source" / "sourcedir.tar.gz"

    def upload() -> None:
        target.parent.mkdir(parents=True)
        target.write_bytes(b"code")

    session.submit(_request(session, "up"), stage=upload)
    assert target.stat().st_mode & 0o777 == 0o600
    assert target.parent.stat().st_mode & 0o777 == 0o700
    assert session.home.stat().st_mode & 0o777 == 0o700
    wait_until_ended(session, "up", timeout_s=60)
    assert_no_processes(session.home)
