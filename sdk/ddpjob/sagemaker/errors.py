"""Turn botocore errors into one-line ddpjob errors that name what to change.

botocore is imported inside functions only, so importing this module stays cheap.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any

from ddpjob.errors import ControlPlaneError, DdpjobError, InvalidRequestError, JobNotFoundError

# Error codes AWS services use for request-rate limits (botocore retries these first).
THROTTLING_CODES = frozenset({
    "Throttling", "ThrottlingException", "ThrottledException", "RequestThrottled",
    "RequestThrottledException", "TooManyRequestsException", "RequestLimitExceeded",
    "ProvisionedThroughputExceededException", "SlowDown", "BandwidthLimitExceeded",
})
ACCESS_DENIED_CODES = frozenset({
    "AccessDenied", "AccessDeniedException", "UnauthorizedOperation", "NotAuthorized",
})
NOT_FOUND_CODES = frozenset({"ResourceNotFound", "ResourceNotFoundException", "NoSuchEntity"})
# How SageMaker words "no such job" inside a ValidationException.
_NOT_FOUND_WORDS = re.compile(r"could not find|not found|does not exist", re.IGNORECASE)
_IAM_ACTION = re.compile(r"perform:\s*([\w-]+:[\w*]+)")


#: An AWS call failed: the schedulers' own error type (`code`: the AWS error code).
AwsError = ControlPlaneError


class ThrottlingError(AwsError):
    """AWS kept throttling a call after botocore's retries."""


class QuotaExceededError(AwsError):
    """An account quota (instances of a type, concurrent jobs, …) is too low for the request."""


class AccessDeniedError(AwsError):
    """The caller's credentials (or the job's role) lack a permission."""


class CredentialsError(AwsError):
    """No usable AWS credentials were found."""


class UnreachableError(AwsError):
    """AWS could not be reached: no network, a proxy, or a wrong endpoint."""


def _one_line(text: str) -> str:
    return " ".join(str(text).split())


def translate_client_error(error: Exception, *, operation: str, job_name: str | None = None,
                           request: Mapping[str, Any] | None = None,
                           region: str | None = None, kind: str = "training job") -> DdpjobError:
    """The ddpjob error for a botocore `ClientError` raised by `operation` (e.g. CreateTrainingJob).

    `job_name`, `request`, `region` and `kind` (what `job_name` names) only make the message
    name what to change.
    """
    response = getattr(error, "response", {}) or {}
    code = response.get("Error", {}).get("Code", "") or type(error).__name__
    aws_message = _one_line(response.get("Error", {}).get("Message", "") or str(error))
    where = f" in {region}" if region else ""
    request = request or {}
    kwargs = {"code": code, "operation": operation}

    if code in THROTTLING_CODES:
        return ThrottlingError(
            f"AWS throttled {operation} ({code}) even after retries: wait a minute and retry, "
            f"run fewer jobs or log followers at once, or ask for a higher API rate in "
            f"Service Quotas", **kwargs)
    if code == "ResourceLimitExceeded":
        return _quota_exceeded(request, where, aws_message, kwargs)
    if code in ACCESS_DENIED_CODES:
        return _access_denied(operation, request, where, aws_message, kwargs)
    if code in NOT_FOUND_CODES or (
        code == "ValidationException" and job_name and _NOT_FOUND_WORDS.search(aws_message)
    ):
        if job_name:
            hint = " (`ddpjob jobs list`)" if kind == "training job" else ""
            return JobNotFoundError(f"No {kind} named {job_name!r}{where}: check the job "
                                    f"name{hint} and the AWS region", **kwargs)
        return JobNotFoundError(f"{operation}{where}: {aws_message}", **kwargs)
    if code == "ValidationException":
        if "assume" in aws_message.lower() and request.get("RoleArn"):
            return InvalidRequestError(
                f"SageMaker could not assume role {request['RoleArn']}: pass a role whose trust "
                f"policy allows sagemaker.amazonaws.com ({aws_message})", **kwargs)
        return InvalidRequestError(
            f"SageMaker rejected {operation}: {aws_message} Change the argument it names", **kwargs)
    return AwsError(f"{operation} failed{where} ({code}): {aws_message}", **kwargs)


def _quota_exceeded(request: Mapping[str, Any], where: str, aws_message: str,
                    kwargs: dict[str, str]) -> QuotaExceededError:
    resources = request.get("ResourceConfig", {})
    asked = ""
    if resources.get("InstanceType"):
        asked = (f" for {resources.get('InstanceCount', 1)} x {resources['InstanceType']}"
                 f" ('{resources['InstanceType']} for training job usage')")
    return QuotaExceededError(
        f"SageMaker quota exceeded{asked}{where}: {aws_message} Request a quota increase "
        f"in the Service Quotas console (Amazon SageMaker), or use fewer instances "
        f"(instance_count) or another instance_type", **kwargs)


def _access_denied(operation: str, request: Mapping[str, Any], where: str, aws_message: str,
                   kwargs: dict[str, str]) -> AccessDeniedError:
    action = _IAM_ACTION.search(aws_message)
    needed = action.group(1) if action else f"sagemaker:{operation}"
    role = request.get("RoleArn")
    role_hint = (f"; and that you may pass role {role} to SageMaker (iam:PassRole)"
                 if role else "")
    return AccessDeniedError(
        f"AWS denied {operation}{where}: {aws_message} Grant your AWS identity {needed}"
        f"{role_hint}", **kwargs)


@contextmanager
def aws_errors(operation: str, *, job_name: str | None = None,
               request: Mapping[str, Any] | None = None,
               region: str | None = None, kind: str = "training job") -> Iterator[None]:
    """Raise a ddpjob error (chained to the original) for any AWS error inside the block."""
    from botocore.exceptions import (
        ClientError,
        HTTPClientError,
        NoCredentialsError,
        ParamValidationError,
        PartialCredentialsError,
    )
    from botocore.exceptions import ConnectionError as BotoConnectionError

    try:
        yield
    except ClientError as error:
        raise translate_client_error(error, operation=operation, job_name=job_name,
                                     request=request, region=region, kind=kind) from error
    except ParamValidationError as error:
        # botocore checked the request against the service model before sending it.
        report = _one_line(error.kwargs.get("report", str(error)))
        raise InvalidRequestError(f"Invalid {operation} request, nothing was sent: {report}",
                                  code="ParamValidationError", operation=operation) from error
    except (NoCredentialsError, PartialCredentialsError) as error:
        raise CredentialsError(
            f"No usable AWS credentials for {operation}: run `aws configure` (or `aws sso "
            f"login`), or set AWS_PROFILE or AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY",
            code=type(error).__name__, operation=operation) from error
    except (BotoConnectionError, HTTPClientError) as error:
        # botocore already retried; its 80-line traceback says no more than this line.
        where = f" in {region}" if region else ""
        raise UnreachableError(
            f"Could not reach AWS for {operation}{where}: {_one_line(str(error))}: check the "
            f"network connection (or AWS_ENDPOINT_URL, a proxy)",
            code=type(error).__name__, operation=operation) from None
