"""botocore errors become one-line ddpjob errors that name what to change.

Errors moto cannot produce are built with botocore's own ClientError constructor.
"""

from __future__ import annotations

import pytest
from botocore.exceptions import ClientError, NoCredentialsError
from ddpjob.errors import DdpjobError, UserInputError
from ddpjob.sagemaker.errors import (
    AccessDeniedError,
    AwsError,
    CredentialsError,
    InvalidRequestError,
    JobNotFoundError,
    QuotaExceededError,
    ThrottlingError,
    aws_errors,
    translate_client_error,
)

REQUEST = {
    "TrainingJobName": "job-1",
    "RoleArn": "arn:aws:iam::123456789012:role/SageMakerRole",
    "ResourceConfig": {"InstanceType": "ml.p4d.24xlarge", "InstanceCount": 4},
}


def client_error(code: str, message: str, operation: str = "CreateTrainingJob") -> ClientError:
    return ClientError({"Error": {"Code": code, "Message": message}}, operation)


def translate(code, message, **kwargs):
    error = translate_client_error(client_error(code, message),
                                   operation=kwargs.pop("operation", "CreateTrainingJob"), **kwargs)
    assert "\n" not in str(error)
    assert isinstance(error, DdpjobError)
    return error


def test_throttling_after_retries():
    error = translate("ThrottlingException", "Rate exceeded")
    assert isinstance(error, ThrottlingError)
    assert "throttled CreateTrainingJob" in str(error) and "retry" in str(error)


def test_quota_names_instance_type_and_count_and_the_fix():
    error = translate(
        "ResourceLimitExceeded",
        "The account-level service limit 'ml.p4d.24xlarge for training job usage' is 0 "
        "Instances,\nwith current utilization of 0 Instances and a request delta of 4 Instances.",
        request=REQUEST, region="us-west-2",
    )
    assert isinstance(error, QuotaExceededError)
    message = str(error)
    assert "4 x ml.p4d.24xlarge" in message and "in us-west-2" in message
    assert "quota increase" in message and "fewer instances" in message


def test_access_denied_names_the_permission_and_the_role():
    error = translate(
        "AccessDeniedException",
        "User: arn:aws:iam::123456789012:user/me is not authorized to perform: iam:PassRole "
        "on resource: arn:aws:iam::123456789012:role/SageMakerRole",
        request=REQUEST,
    )
    assert isinstance(error, AccessDeniedError)
    assert "iam:PassRole" in str(error) and "SageMakerRole" in str(error)


def test_access_denied_without_an_action_names_the_sagemaker_permission():
    error = translate("AccessDenied", "Access Denied", operation="DescribeTrainingJob")
    assert "sagemaker:DescribeTrainingJob" in str(error)


def test_validation_exception_is_user_input():
    error = translate("ValidationException",
                      "1 validation error detected: Value 'ml.nope' at "
                      "'resourceConfig.instanceType' failed to satisfy constraint")
    assert isinstance(error, InvalidRequestError) and isinstance(error, UserInputError)
    assert "resourceConfig.instanceType" in str(error)


def test_role_sagemaker_cannot_assume():
    error = translate("ValidationException",
                      "Could not assume role arn:aws:iam::123456789012:role/SageMakerRole. "
                      "Please ensure that the role exists and allows principal "
                      "'sagemaker.amazonaws.com' to assume the role.", request=REQUEST)
    assert isinstance(error, InvalidRequestError)
    assert "trust policy" in str(error) and "SageMakerRole" in str(error)


@pytest.mark.parametrize(("code", "message"), [
    ("ValidationException", "Requested resource not found."),
    ("ResourceNotFound", "Training job job-9 does not exist"),
])
def test_unknown_job(code, message):
    error = translate(code, message, operation="DescribeTrainingJob", job_name="job-9",
                      region="eu-west-1")
    assert isinstance(error, JobNotFoundError) and isinstance(error, UserInputError)
    assert str(error).startswith("No training job named 'job-9' in eu-west-1")


def test_other_errors_keep_code_and_message():
    error = translate("InternalFailure", "oops", operation="ListTrainingJobs")
    assert type(error) is AwsError
    assert str(error) == "ListTrainingJobs failed (InternalFailure): oops"
    assert (error.code, error.operation) == ("InternalFailure", "ListTrainingJobs")


def test_context_manager_chains_the_original():
    original = client_error("ThrottlingException", "Rate exceeded")
    with pytest.raises(ThrottlingError) as raised, aws_errors("CreateTrainingJob"):
        raise original
    assert raised.value.__cause__ is original


def test_missing_credentials():
    with pytest.raises(CredentialsError, match="aws configure"), aws_errors("GetCallerIdentity"):
        raise NoCredentialsError()


def test_other_exceptions_pass_through():
    with pytest.raises(KeyError), aws_errors("CreateTrainingJob"):
        raise KeyError("not an AWS error")


def test_unreachable_aws_is_one_line_without_botocores_traceback(tmp_path, monkeypatch):
    """Offline, with credentials but no default bucket: naming the bucket asks STS, which
    cannot be reached. The Python API raises one line, not botocore's traceback under it."""
    import traceback

    import boto3
    from ddpjob import PyTorch
    from ddpjob.sagemaker.errors import UnreachableError
    from ddpjob.sagemaker.session import Session

    monkeypatch.setenv("AWS_ENDPOINT_URL", "http://127.0.0.1:9")  # nothing listens there
    monkeypatch.setenv("AWS_MAX_ATTEMPTS", "1")
    (tmp_path / "train.py").write_text("print('training')\n")
    session = Session(boto3.Session(region_name="us-east-1", aws_access_key_id="fake",
                                    aws_secret_access_key="fake"))
    estimator = PyTorch(entry_point="train.py", source_dir=str(tmp_path),
                        role=REQUEST["RoleArn"], instance_type="ml.m5.xlarge", session=session)
    with pytest.raises(UnreachableError) as raised:
        estimator.training_job_request()
    message = str(raised.value)
    assert "\n" not in message
    assert message.startswith("Could not reach AWS for GetCallerIdentity in us-east-1: ")
    assert "check the network connection" in message
    shown = "".join(traceback.format_exception(raised.value))
    assert "botocore/" not in shown and "During handling" not in shown
    named = Session(boto3.Session(region_name="us-east-1", aws_access_key_id="fake",
                                  aws_secret_access_key="fake"), default_bucket="my-bucket")
    with pytest.raises(UnreachableError, match="^Could not reach AWS for HeadBucket"):
        named.default_bucket()  # what fit() makes sure of before uploading
