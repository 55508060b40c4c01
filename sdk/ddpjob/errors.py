"""Errors the client raises: one clear line each."""


class DdpjobError(Exception):
    """Base class of every error ddpjob raises on purpose."""


class UserInputError(DdpjobError, ValueError):
    """An argument, file or request the user can fix; the message names it and what is allowed."""


class StorageError(DdpjobError):
    """A transfer to or from a URI failed; the message names the URI and the cause."""


class ObjectNotFoundError(StorageError):
    """The object or file a URI names does not exist (anymore)."""


class JobFailedError(DdpjobError):
    """A training job ended Failed (or Stopped when the caller waited for completion)."""

    def __init__(self, job_name: str, status: str, reason: str):
        self.job_name = job_name
        self.status = status
        self.reason = reason
        super().__init__(f"Training job {job_name} ended {status}: {reason}")
