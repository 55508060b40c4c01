"""``smdistributed.dataparallel.torch.parallel.distributed.DistributedDataParallel``.

A subclass of torch's DDP that only adapts the constructor (smdistributed's arguments, the
module moved to the local GPU), so bucketing, overlap of backward and all-reduce, ``no_sync``
and ``.module`` are torch's own, and forward/backward run without any layer of ours.
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from typing import Any

import torch
import torch.distributed as tdist
from torch import nn

from ddpjob_runtime.dataparallel.torch import distributed as dist

__all__ = ["DistributedDataParallel"]


class DistributedDataParallel(nn.parallel.DistributedDataParallel):
    """Data-parallel ``module``: gradients are averaged over every worker during backward.

    Needs ``init_process_group()`` first. With CUDA (NCCL) and ``device_ids=None``, a module
    still on the CPU is moved to this worker's GPU (``get_local_rank()``). ``process_group``
    may only be None or ``group.WORLD``; ``bucket_cap_mb=None`` keeps torch's default (25).
    Further keyword arguments (``find_unused_parameters``, ``static_graph``, ...) go to torch.
    """

    def __init__(
        self,
        module: nn.Module,
        device_ids: Sequence[int | torch.device] | None = None,
        output_device: int | torch.device | None = None,
        broadcast_buffers: bool = True,
        process_group: object = None,
        bucket_cap_mb: float | None = None,
        **kwargs: Any,
    ) -> None:
        dist._require_initialized("DistributedDataParallel", process_group)
        uses_cuda = torch.cuda.is_available() and "nccl" in tdist.get_backend()
        if device_ids is None and uses_cuda and _on_cpu(module):
            local_rank = dist.get_local_rank()
            module = module.to(torch.device("cuda", local_rank))
            device_ids = [local_rank]
        if bucket_cap_mb is not None:
            kwargs["bucket_cap_mb"] = bucket_cap_mb
        with warnings.catch_warnings():
            # torch >= 2.13 renames it; ours keeps smdistributed's name and meaning.
            warnings.filterwarnings("ignore", message=".*`broadcast_buffers` is deprecated")
            if not broadcast_buffers:
                kwargs["broadcast_buffers"] = False
            super().__init__(module, device_ids=device_ids, output_device=output_device, **kwargs)


def _on_cpu(module: nn.Module) -> bool:
    tensors = [*module.parameters(), *module.buffers()]
    return bool(tensors) and all(t.device.type == "cpu" for t in tensors)
