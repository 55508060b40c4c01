"""The PyTorch API of SageMaker's ``smdistributed.dataparallel``, on top of ``torch.distributed``.

A script written for ``smdistributed.dataparallel`` migrates by changing its import lines::

    import ddpjob_runtime.dataparallel.torch.distributed as dist
    from ddpjob_runtime.dataparallel.torch.parallel.distributed import (
        DistributedDataParallel as DDP,
    )

and then runs on every instance type: NCCL on GPUs, gloo on CPU, oneCCL when asked for.
"""

from ddpjob_runtime.dataparallel.errors import (
    BackendUnavailableError,
    DataParallelError,
    LauncherEnvironmentError,
    NotInitializedError,
    UnsupportedArgumentError,
)

__all__ = [
    "BackendUnavailableError", "DataParallelError", "LauncherEnvironmentError",
    "NotInitializedError", "UnsupportedArgumentError",
]
