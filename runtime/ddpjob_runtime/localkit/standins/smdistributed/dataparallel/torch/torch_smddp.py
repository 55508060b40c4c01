"""`smdistributed.dataparallel.torch.torch_smddp`: imported, it registers torch's backend "smddp".

Scripts for smdistributed >= 1.4 keep torch's own API::

    import torch.distributed as dist
    import smdistributed.dataparallel.torch.torch_smddp  # noqa: F401

    dist.init_process_group(backend="smddp")

Here a group of "smddp" is torch's NCCL when this process sees CUDA and gloo otherwise,
registered through torch's public `Backend.register_backend`, as the real module registers its
own, and set up as torch's `init_process_group` sets up its own NCCL and gloo groups;
`dist.get_backend()` answers "smddp", as on SageMaker.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.distributed as dist

BACKEND = "smddp"


def _create(opts: Any, _options: object) -> object:
    """One group's backend from torch's `_DistributedBackendOptions` (store, ranks, timeout,
    name): NCCL with CUDA, else gloo."""
    if torch.cuda.is_available():
        options = dist.ProcessGroupNCCL.Options()
        options.is_high_priority_stream = False
        options._timeout = opts.timeout  # how torch's own init_process_group sets it
        options.global_ranks_in_group = opts.global_ranks_in_group
        options.group_name = opts.group_id
        return dist.ProcessGroupNCCL(opts.store, opts.group_rank, opts.group_size, options)
    group = dist.ProcessGroupGloo(opts.store, opts.group_rank, opts.group_size, opts.timeout)
    group.options.global_ranks_in_group = opts.global_ranks_in_group
    group.options.group_name = opts.group_id
    return group


if BACKEND not in dist.Backend.backend_list:
    dist.Backend.register_backend(BACKEND, _create, extended_api=True,
                                  devices=["cuda" if torch.cuda.is_available() else "cpu"])
