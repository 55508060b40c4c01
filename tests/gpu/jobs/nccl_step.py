"""One DDP step on NCCL in a `local_gpu` job, each worker on its own GPU: through ddpjob's DDP
library (`--api ddpjob`), or through torch's own API with SageMaker's "smddp" backend, which a
local host's stand-in for `smdistributed` makes NCCL (`--api smddp`). Every rank prints what it
saw: backend, device, the averaged gradient and an all_reduce of the ranks."""

import argparse
import os

import torch
import torch.distributed as tdist
from group_teardown import finish

parser = argparse.ArgumentParser()
parser.add_argument("--api", choices=("ddpjob", "smddp"), required=True)
api = parser.parse_args().api
local_rank = int(os.environ["LOCAL_RANK"])
if api == "ddpjob":
    import ddpjob_runtime.dataparallel.torch.distributed as dist
    from ddpjob_runtime.dataparallel.torch.parallel.distributed import (
        DistributedDataParallel as DDP,
    )

    dist.init_process_group()  # NCCL, this process pinned to GPU LOCAL_RANK
    model = DDP(torch.nn.Linear(4, 1, bias=False))  # moved to that GPU
else:
    import smdistributed.dataparallel.torch.torch_smddp  # noqa: F401
    from torch.nn.parallel import DistributedDataParallel as DDP

    torch.cuda.set_device(local_rank)
    tdist.init_process_group(backend="smddp")
    model = DDP(torch.nn.Linear(4, 1, bias=False).cuda(), device_ids=[local_rank])

rank, world = tdist.get_rank(), tdist.get_world_size()
weight = model.module.weight
model(torch.full((2, 4), float(rank + 1), device=weight.device)).sum().backward()
ranks = torch.tensor([float(rank)], device=weight.device)
tdist.all_reduce(ranks)
print(f"rank={rank} world={world} backend={tdist.get_backend()} device={weight.device.type} "
      f"grad={weight.grad[0, 0].item():g} ranks={ranks.item():g}", flush=True)
finish()
