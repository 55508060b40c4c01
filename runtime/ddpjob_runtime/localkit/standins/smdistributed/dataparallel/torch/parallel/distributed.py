"""`smdistributed.dataparallel.torch.parallel.distributed`: `DistributedDataParallel`, ddpjob's."""

from ddpjob_runtime.dataparallel.torch.parallel.distributed import DistributedDataParallel

__all__ = ["DistributedDataParallel"]
