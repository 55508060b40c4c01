"""`smdistributed.dataparallel.torch.torch_smddp`: imported, it registers torch's backend "smddp".

Scripts for smdistributed >= 1.4 keep torch's own API::

    import torch.distributed as dist
    import smdistributed.dataparallel.torch.torch_smddp  # noqa: F401

    dist.init_process_group(backend="smddp")

Here a group of "smddp" is torch's NCCL when this process sees CUDA and gloo otherwise,
registered through torch's public `Backend.register_backend`, as the real module registers its
own; `dist.get_backend()` answers "smddp", as on SageMaker.
"""

from __future__ import annotations

from datetime import timedelta

import torch
import torch.distributed as dist

BACKEND = "smddp"


def _create(store: dist.Store, rank: int, size: int, timeout: timedelta) -> object:
    """The backend of one process group: NCCL with CUDA, else gloo."""
    if not torch.cuda.is_available():
        return dist.ProcessGroupGloo(store, rank, size, timeout)
    options = dist.ProcessGroupNCCL.Options()
    options.is_high_priority_stream = False
    options._timeout = timeout  # how torch's own `init_process_group` gives NCCL its timeout
    return dist.ProcessGroupNCCL(store, rank, size, options)


if BACKEND not in dist.Backend.backend_list:
    dist.Backend.register_backend(BACKEND, _create,
                                  devices=["cuda" if torch.cuda.is_available() else "cpu"])
