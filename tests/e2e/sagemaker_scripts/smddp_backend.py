"""A script for smdistributed.dataparallel >= 1.4: torch's own API, with the library imported
for its side effect (the "smddp" backend), then init_process_group(backend="smddp")."""

import smdistributed.dataparallel.torch.torch_smddp  # noqa: F401
import torch
import torch.distributed as dist
from group_teardown import finish
from torch.nn.parallel import DistributedDataParallel as DDP

dist.init_process_group(backend="smddp")
rank = dist.get_rank()
model = DDP(torch.nn.Linear(4, 1, bias=False))
model(torch.full((2, 4), float(rank + 1))).sum().backward()  # grad 2 * (rank + 1), averaged
ranks = torch.tensor([float(rank)])
dist.all_reduce(ranks)
print(f"rank={rank} world={dist.get_world_size()} backend={dist.get_backend()} "
      f"grad={model.module.weight.grad[0, 0].item():g} ranks={ranks.item():g}", flush=True)
finish()
