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
    """A training job ended Failed (or Stopped when the caller waited for completion)."""

    def __init__(self, job_name: str, status: str, reason: str):
        self.job_name = job_name
        self.status = status
        self.reason = reason
        super().__init__(f"Training job {job_name} ended {status}: {reason}")
