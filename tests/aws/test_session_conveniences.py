"""The official SDK's notebook conveniences on `Session`, against a moto server over HTTP."""

from __future__ import annotations

import logging
import uuid

import boto3
import ddpjob
import pytest
from ddpjob.errors import JobFailedError, UserInputError
from ddpjob.job_wait import WaitTimeoutError
from ddpjob.sagemaker import execution_role
from ddpjob.sagemaker.logs import LogPolling
from ddpjob.sagemaker.session import Session

ACCOUNT = "123456789012"


@pytest.fixture
def data(tmp_path):
    """A folder `data/` with `a.txt` and `sub/b.txt`."""
    folder = tmp_path / "data"
    (folder / "sub").mkdir(parents=True)
    (folder / "a.txt").write_text("a")
    (folder / "sub" / "b.txt").write_text("b")
    return folder


def _keys(bucket: str) -> list[str]:
    listed = boto3.client("s3", region_name="us-east-1").list_objects_v2(Bucket=bucket)
    return sorted(item["Key"] for item in listed.get("Contents", []))


def test_upload_data_makes_the_default_bucket_and_answers_the_official_uris(aws_env, data):
    session = Session(default_bucket=f"test-{uuid.uuid4().hex[:12]}")
    bucket = session.default_bucket_name()

    assert session.upload_data(str(data / "a.txt")) == f"s3://{bucket}/data/a.txt"
    assert session.upload_data(str(data), key_prefix="train/v1") == f"s3://{bucket}/train/v1"
    assert _keys(bucket) == ["data/a.txt", "train/v1/a.txt", "train/v1/sub/b.txt"]


def test_upload_data_to_a_named_bucket_with_extra_args(aws_env, s3_bucket, data):
    session = Session()
    uri = session.upload_data(str(data / "a.txt"), bucket=s3_bucket, key_prefix="enc",
                              extra_args={"ServerSideEncryption": "AES256"})
    assert uri == f"s3://{s3_bucket}/enc/a.txt"
    head = boto3.client("s3", region_name="us-east-1").head_object(Bucket=s3_bucket,
                                                                   Key="enc/a.txt")
    assert head["ServerSideEncryption"] == "AES256"


@pytest.mark.parametrize(("kwargs", "message"), [
    ({"extra_args": {"NotAnArg": 1}}, "extra_args 'NotAnArg': not an S3 upload argument"),
    ({"bucket": "s3://x"}, "bucket 's3://x' is not an S3 bucket name"),
    ({"callback": print}, "callback is not supported"),
])
def test_bad_upload_arguments_upload_nothing(aws_env, s3_bucket, data, kwargs, message):
    session = Session()
    with pytest.raises(UserInputError, match=message) as raised:
        session.upload_data(str(data), **{"bucket": s3_bucket, **kwargs})
    assert "\n" not in str(raised.value)
    assert _keys(s3_bucket) == []


def test_upload_of_a_missing_path_is_one_clear_error(aws_env, s3_bucket, tmp_path):
    with pytest.raises(UserInputError, match="no such file or folder to upload"):
        Session().upload_data(str(tmp_path / "nope"), bucket=s3_bucket)


def test_download_data_brings_a_folder_an_object_or_nothing(aws_env, s3_bucket, data, tmp_path):
    session = Session()
    session.upload_data(str(data), bucket=s3_bucket, key_prefix="out")
    session.upload_data(str(data / "a.txt"), bucket=s3_bucket, key_prefix="out-2")

    folder = session.download_data(str(tmp_path / "f"), s3_bucket, "out")
    assert sorted(folder) == [str(tmp_path / "f" / "a.txt"), str(tmp_path / "f" / "sub" / "b.txt")]
    assert (tmp_path / "f" / "sub" / "b.txt").read_text() == "b"  # out-2/ not pulled in

    single = session.download_data(str(tmp_path / "s"), s3_bucket, "out/sub/b.txt")
    assert single == [str(tmp_path / "s" / "b.txt")]
    assert len(session.download_data(str(tmp_path / "all"), s3_bucket)) == 3
    assert session.download_data(str(tmp_path / "n"), s3_bucket, "missing") == []


def test_boto_region_name_is_the_sessions_region(aws_env):
    session = Session(boto_session=boto3.Session(region_name="eu-west-1"))
    assert session.boto_region_name == "eu-west-1"


def test_wait_for_job_returns_completed_warns_stopped_raises_failed(
    aws_env, job_name, training_request, set_job_status, caplog, capsys
):
    session = Session()
    session.submit(training_request(job_name))
    assert session.wait_for_job(job_name, poll=0)["TrainingJobStatus"] == "Completed"
    assert f"{job_name}: Completed" in capsys.readouterr().out

    set_job_status(job_name, "Stopped")
    with caplog.at_level(logging.WARNING):
        assert session.wait_for_job(job_name, poll=0)["TrainingJobStatus"] == "Stopped"
    assert "ended with status 'Stopped'" in caplog.text

    set_job_status(job_name, "Failed")
    with pytest.raises(JobFailedError, match=f"Training job {job_name} ended Failed"):
        session.wait_for_job(job_name, poll=0)


def test_logs_for_job_prints_every_host_merged(
    aws_env, job_name, training_request, put_lines, now_ms, capsys
):
    session = Session(log_polling=LogPolling(initial=0.05, maximum=0.1))
    session.submit(training_request(job_name))
    put_lines(f"{job_name}/algo-1-1700000000", [(now_ms, "one"), (now_ms + 2, "three")])
    put_lines(f"{job_name}/algo-2-1700000000", [(now_ms + 1, "two")])

    described = session.logs_for_job(job_name)
    assert described["TrainingJobName"] == job_name
    assert capsys.readouterr().out.splitlines() == ["[algo-1] one", "[algo-2] two",
                                                    "[algo-1] three"]
    session.logs_for_job(job_name, wait=True, poll=0, log_type="None")
    assert "[algo-" not in capsys.readouterr().out
    with pytest.raises(UserInputError, match="log_type 'Everything' is not one of"):
        session.logs_for_job(job_name, log_type="Everything")


@pytest.mark.parametrize("log_type", ["None", "All"])
def test_logs_for_job_timeout_ends_the_wait(
    aws_env, job_name, training_request, set_job_status, log_type
):
    session = Session(log_polling=LogPolling(initial=0.05, maximum=0.1))
    session.submit(training_request(job_name))
    set_job_status(job_name, "InProgress")
    try:
        with pytest.raises(WaitTimeoutError, match=f"{job_name} is still InProgress"):
            session.logs_for_job(job_name, wait=True, poll=0.05, log_type=log_type, timeout=0.3)
    finally:
        set_job_status(job_name, "Completed")  # the background follower ends with the job


def test_get_execution_role_of_an_iam_user_says_to_pass_role(aws_env, tmp_path, monkeypatch):
    monkeypatch.setattr(execution_role, "NOTEBOOK_METADATA_FILE", tmp_path / "absent.json")
    with pytest.raises(UserInputError, match=r"user/moto is not a role .* pass role=") as raised:
        ddpjob.get_execution_role()
    assert "\n" not in str(raised.value)


def test_get_execution_role_turns_an_assumed_role_into_its_role_arn(
    aws_env, tmp_path, monkeypatch
):
    monkeypatch.setattr(execution_role, "NOTEBOOK_METADATA_FILE", tmp_path / "absent.json")
    name = f"AmazonSageMaker-ExecutionRole-{uuid.uuid4().hex[:8]}"
    iam = boto3.client("iam", region_name="us-east-1")
    arn = iam.create_role(RoleName=name, Path="/service-role/",
                          AssumeRolePolicyDocument="{}")["Role"]["Arn"]
    creds = boto3.client("sts", region_name="us-east-1").assume_role(
        RoleArn=arn, RoleSessionName="SageMaker")["Credentials"]
    assumed = boto3.Session(aws_access_key_id=creds["AccessKeyId"],
                            aws_secret_access_key=creds["SecretAccessKey"],
                            aws_session_token=creds["SessionToken"], region_name="us-east-1")

    role = ddpjob.get_execution_role(Session(boto_session=assumed))
    assert role == f"arn:aws:iam::{ACCOUNT}:role/service-role/{name}"


def test_get_execution_role_reads_the_notebook_metadata(aws_env, tmp_path, monkeypatch):
    metadata = tmp_path / "resource-metadata.json"
    metadata.write_text('{"ExecutionRoleArn": "arn:aws:iam::123456789012:role/Notebook"}')
    monkeypatch.setattr(execution_role, "NOTEBOOK_METADATA_FILE", metadata)
    assert ddpjob.get_execution_role(Session()) == "arn:aws:iam::123456789012:role/Notebook"


def test_describe_training_job_has_the_official_sessions_name(
    aws_env, job_name, training_request
):
    """`session.describe_training_job(name)`, as notebooks call the official session (moto has
    no StopTrainingJob: `stop_training_job` runs on a local job in tests/local/test_jobs.py)."""
    session = Session()
    session.submit(training_request(job_name))
    described = session.describe_training_job(job_name)
    assert described["TrainingJobName"] == job_name
    assert described["TrainingJobStatus"] == session.describe(job_name).raw["TrainingJobStatus"]
    with pytest.raises(UserInputError, match="job_name"):
        session.describe_training_job("../x")
