"""`smdistributed.dataparallel.torch.parallel`: its `DistributedDataParallel`, ddpjob's."""

from ddpjob_runtime.dataparallel.torch.parallel import DistributedDataParallel

__all__ = ["DistributedDataParallel"]
