"""Errors of the runtime; the bootstrap turns each into `output/failure` and an exit code."""

import signal


class RuntimeContractError(Exception):
    """A config file, hyperparameter or source archive breaks the container contract."""

    exit_code = 1


class UserScriptError(Exception):
    """The user's script failed on some rank; carries that rank's exit code."""

    def __init__(self, message: str, exit_code: int):
        super().__init__(message)
        self.exit_code = exit_code


class StorageError(Exception):
    """A transfer to or from a URI failed; the message names the URI and the cause."""

    exit_code = 1


class JobStopped(Exception):
    """The bootstrap got SIGTERM/SIGINT before the workers started."""

    def __init__(self, signum: int):
        super().__init__(f"stopped by {signal.Signals(signum).name}")
        self.exit_code = 128 + signum
