"""Errors the client raises: one clear line each. The shared ones are the runtime's own classes."""

from ddpjob_runtime.errors import (
    DdpjobError,
    InvalidURIError,
    ObjectNotFoundError,
    StorageError,
    UnsafePathError,
    UserInputError,
)

__all__ = ["DdpjobError", "InvalidURIError", "JobFailedError", "ObjectNotFoundError",
           "StorageError", "UnsafePathError", "UserInputError"]


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
