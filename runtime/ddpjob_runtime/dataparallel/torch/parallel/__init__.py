"""DistributedDataParallel of ``ddpjob_runtime.dataparallel`` (torch's DDP underneath)."""

from ddpjob_runtime.dataparallel.torch.parallel.distributed import DistributedDataParallel

__all__ = ["DistributedDataParallel"]
