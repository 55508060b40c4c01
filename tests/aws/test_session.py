"""Session against a moto server over HTTP: jobs, region, role, default bucket."""

from __future__ import annotations

import uuid

import boto3
import pytest
from ddpjob.errors import UserInputError
from ddpjob.sagemaker.errors import AwsError, JobNotFoundError
from ddpjob.sagemaker.roles import ROLE_REQUIRED, require_role
from ddpjob.sagemaker.session import Session

ACCOUNT = "123456789012"


def test_session_is_a_remote_control_plane(aws_env):
    session = Session()
    assert session.region_name == "us-east-1"
    assert session.backend.storage_schemes == {"s3"}
    with pytest.raises(UserInputError, match="role is required"):
        session.resolve_role(None)
    with pytest.raises(UserInputError, match="image_uri is required"):
        session.backend.training_image(None)
    with pytest.raises(UserInputError, match="output_path 'file:///x': SageMaker jobs need an s3"):
        session.check_location("file:///x", "output_path")
    assert session.sagemaker_client.meta.service_model.service_name == "sagemaker"


def test_create_describe_list_training_job(aws_env, job_name, training_request):
    session = Session()
    job = session.submit(training_request(job_name))
    assert job.name == job_name

    described = session.describe(job_name).raw
    assert described["TrainingJobName"] == job_name
    assert described["ResourceConfig"]["InstanceCount"] == 2
    assert described["TrainingJobStatus"] in {"InProgress", "Completed"}

    listed = session.list(NameContains=job_name)
    assert [job["TrainingJobName"] for job in listed] == [job_name]


def test_list_training_jobs_reads_every_page(aws_env, training_request):
    session = Session()
    prefix = f"ddpjob-pages-{uuid.uuid4().hex[:8]}"
    names = {f"{prefix}-{i}" for i in range(5)}
    for name in names:
        session.submit(training_request(name))
    listed = session.list(NameContains=prefix, MaxResults=2)
    assert sorted(job["TrainingJobName"] for job in listed) == sorted(names)


def test_the_raw_client_takes_the_request_as_the_estimator_sends_it(
    aws_env, job_name, training_request
):
    session = Session()
    session.sagemaker_client.create_training_job(**training_request(job_name))
    assert session.describe(job_name).raw["RoleArn"].endswith(":role/SageMakerRole")


def test_unknown_job_is_one_clear_error(aws_env):
    session = Session()
    with pytest.raises(JobNotFoundError, match="No training job named 'no-such-job' in us-east-1"):
        session.describe("no-such-job")
    with pytest.raises(JobNotFoundError, match="no-such-job"):
        session.logs("no-such-job")


def test_create_without_role_sends_nothing(aws_env, job_name, training_request):
    session = Session()
    with pytest.raises(UserInputError, match="role is required") as raised:
        session.submit(training_request(job_name, role=None))
    assert "\n" not in str(raised.value)
    assert session.list(NameContains=job_name) == []


def test_request_that_breaks_the_api_model_sends_nothing(aws_env, job_name, training_request):
    session = Session()
    request = training_request(job_name)
    del request["OutputDataConfig"]
    request["ResourceConfig"]["InstanceCount"] = "two"
    with pytest.raises(UserInputError, match="nothing was sent.*OutputDataConfig") as raised:
        session.submit(request)
    assert "\n" not in str(raised.value)
    assert session.list(NameContains=job_name) == []


@pytest.mark.parametrize("role", [None, "", "arn:aws:iam::12:role/x", "arn:aws:s3:::bucket",
                                  "my role with spaces"])
def test_require_role_rejects(role):
    with pytest.raises(UserInputError):
        require_role(role)


def test_role_required_message_names_the_argument():
    assert ROLE_REQUIRED.startswith("role is required")
    arn = f"arn:aws:iam::{ACCOUNT}:role/path/R"
    assert require_role(arn) == arn


def test_expand_role_turns_a_name_into_this_accounts_arn(aws_env):
    session = Session()
    assert session.expand_role("SageMakerRole") == f"arn:aws:iam::{ACCOUNT}:role/SageMakerRole"
    arn = f"arn:aws:iam::{ACCOUNT}:role/Other"
    assert session.expand_role(arn) == arn


def test_no_region_is_one_clear_error(aws_env, monkeypatch):
    monkeypatch.delenv("AWS_DEFAULT_REGION")
    monkeypatch.delenv("AWS_REGION", raising=False)
    with pytest.raises(UserInputError, match="AWS_DEFAULT_REGION"):
        Session(boto_session=boto3.Session())


def test_region_comes_from_the_boto_session(aws_env):
    session = Session(boto_session=boto3.Session(region_name="eu-central-1"))
    assert session.region_name == "eu-central-1"
    assert session.sagemaker_client.meta.region_name == "eu-central-1"
    assert session.logs_client.meta.region_name == "eu-central-1"


def _bucket_exists(name: str, region: str = "us-east-1") -> bool:
    return name in {b["Name"] for b in boto3.client("s3", region_name=region).list_buckets()[
        "Buckets"]}


def test_default_bucket_is_created_at_submission_only_and_reused(
    aws_env, job_name, training_request
):
    # A region of its own: other tests on the same moto server create us-east-1's bucket.
    region = "eu-west-3"
    name = f"sagemaker-{region}-{ACCOUNT}"
    first = Session(boto_session=boto3.Session(region_name=region))
    assert first.default_output_path() == f"s3://{name}/"
    assert first.input_prefix("j") == f"s3://{name}/j/input"
    request = training_request(job_name)
    request["OutputDataConfig"]["S3OutputPath"] = f"s3://{name}/out"
    first.submit_dryrun(request)
    assert not _bucket_exists(name, region)  # naming a location and the dry run create nothing
    first.submit(request)
    assert _bucket_exists(name, region)
    s3 = boto3.client("s3", region_name=region)
    s3.put_object(Bucket=name, Key="keep/me.txt", Body=b"x")

    second = Session(boto_session=boto3.Session(region_name=region))
    assert second.default_bucket() == name
    assert s3.get_object(Bucket=name, Key="keep/me.txt")["Body"].read() == b"x"


def test_a_taken_name_is_refused_before_anything_is_staged(aws_env, job_name, training_request):
    session = Session()
    session.submit(training_request(job_name))
    staged: list[str] = []
    with pytest.raises(AwsError, match="already exists"):
        session.submit(training_request(job_name), stage=lambda: staged.append("uploaded"))
    assert staged == []


def test_default_bucket_outside_us_east_1_gets_its_location(aws_env):
    region = "eu-west-1"
    name = f"sagemaker-{region}-{ACCOUNT}"
    s3 = boto3.client("s3", region_name=region)
    assert name not in {b["Name"] for b in s3.list_buckets()["Buckets"]}

    session = Session(boto_session=boto3.Session(region_name=region))
    assert session.default_bucket() == name
    assert s3.get_bucket_location(Bucket=name)["LocationConstraint"] == region


def test_named_default_bucket_is_created_when_missing(aws_env):
    name = f"my-ddpjob-{uuid.uuid4().hex[:10]}"
    session = Session(default_bucket=name)
    assert session.default_output_path() == f"s3://{name}/"
    assert session.default_bucket() == name
    boto3.client("s3").head_bucket(Bucket=name)
