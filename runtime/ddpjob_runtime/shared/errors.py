"""Errors of ddpjob, shared by the client and the runtime (`ddpjob.errors` re-exports them).

The runtime's bootstrap turns each into `output/failure` and an exit code; the client's CLI
turns each into one line on stderr and its exit code.
"""

import signal


class DdpjobError(Exception):
    """Base class of every error ddpjob raises on purpose."""


class UserInputError(DdpjobError, ValueError):
    """An argument, file or request the user can fix; the message names it and what is allowed."""


class UnsafePathError(UserInputError):
    """A name read from a caller or from storage would resolve outside its folder."""


class StorageError(DdpjobError):
    """A transfer to or from a URI failed; the message names the URI and the cause."""

    exit_code = 1


class ObjectNotFoundError(StorageError):
    """The object or file a URI names does not exist (anymore)."""


class InvalidURIError(UserInputError, StorageError):
    """A URI that names no store: a bad argument to the client, a storage failure to the runtime."""


class RuntimeContractError(DdpjobError):
    """A config file, hyperparameter or source archive breaks the container contract."""

    exit_code = 1


class JobStopped(Exception):
    """The bootstrap got SIGTERM/SIGINT before the workers started."""

    def __init__(self, signum: int):
        super().__init__(f"stopped by {signal.Signals(signum).name}")
        self.exit_code = 128 + signum
