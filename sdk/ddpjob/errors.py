"""Errors the client raises: one clear line each. The shared ones are the runtime's own classes."""

from ddpjob_runtime.shared.errors import (
    DdpjobError,
    InvalidURIError,
    ObjectNotFoundError,
    StorageError,
    UnsafePathError,
    UserInputError,
)

__all__ = ["ControlPlaneError", "DdpjobError", "InvalidRequestError", "InvalidURIError",
           "JobFailedError", "JobNotFoundError", "ObjectNotFoundError", "StorageError",
           "UnsafePathError", "UserInputError"]


class ControlPlaneError(DdpjobError):
    """A scheduler refused a call. `code` and `operation` are the SageMaker API's error code
    and call; `service_message` is the service's own words (what a boto3-shaped edge answers)."""

    def __init__(self, message: str, *, code: str = "", operation: str = "",
                 service_message: str | None = None):
        super().__init__(message)
        self.code = code
        self.operation = operation
        self.service_message = message if service_message is None else service_message


class InvalidRequestError(ControlPlaneError, UserInputError):
    """The scheduler rejected the request's content (SageMaker's ValidationException)."""


class JobNotFoundError(ControlPlaneError, UserInputError):
    """No training job has the given name (in this account and region, or this local home)."""


class JobFailedError(DdpjobError):
    """A training job ended Failed (or Stopped when the caller waited for completion).

    Read like a compiler error: the first line is the cause (`summary`, what the CLI prints);
    the lines after it are the rest of the FailureReason as the job wrote it (the other hosts'
    failures, then the user's traceback).
    """

    def __init__(self, job_name: str, status: str, reason: str):
        self.job_name = job_name
        self.status = status
        self.reason = reason
        cause, _, details = reason.strip().partition("\n")
        self.summary = f"Training job {job_name} ended {status}: {cause.strip()}"
        details = details.strip("\n")
        super().__init__(self.summary + (f"\n{details}" if details.strip() else ""))
