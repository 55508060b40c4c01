"""The seed guide's script for SageMaker's data-parallel library (smdistributed.dataparallel's
own API), unchanged but for its size: init, DDP, one backward, one all_reduce."""

import smdistributed.dataparallel.torch.distributed as dist
import torch
from group_teardown import finish
from smdistributed.dataparallel.torch.parallel.distributed import DistributedDataParallel as DDP

dist.init_process_group()
rank = dist.get_rank()
model = DDP(torch.nn.Linear(4, 1, bias=False))
model(torch.full((2, 4), float(rank + 1))).sum().backward()  # grad 2 * (rank + 1), averaged
ranks = torch.tensor([float(rank)])
dist.all_reduce(ranks, op=dist.ReduceOp.SUM)
print(f"rank={rank} world={dist.get_world_size()} local_rank={dist.get_local_rank()} "
      f"grad={model.module.weight.grad[0, 0].item():g} ranks={ranks.item():g} "
      f"from={dist.__file__}", flush=True)
finish()
