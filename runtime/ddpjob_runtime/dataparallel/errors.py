"""Errors of the DDP library: one clear line each, instead of a traceback from inside torch."""


class DataParallelError(RuntimeError):
    """Base of every error that ``ddpjob_runtime.dataparallel`` raises itself."""


class NotInitializedError(DataParallelError):
    """A call that needs the process group came before ``init_process_group()``."""


class LauncherEnvironmentError(DataParallelError):
    """``init_process_group()`` found none of the launcher's variables (``RANK``, ...)."""


class BackendUnavailableError(DataParallelError):
    """The requested backend cannot run here (oneCCL bindings missing, NCCL without CUDA)."""


class UnsupportedArgumentError(DataParallelError, ValueError):
    """An argument outside what the library supports (a group other than WORLD, an op)."""
