"""Shaped like SageMaker's best-known PyTorch example, `pytorch_mnist/mnist.py`, run with no
`distribution`: one process per host, its rank the host's place in SM_HOSTS, the world size the
number of hosts, and the rendezvous from MASTER_ADDR/MASTER_PORT, which SageMaker's PyTorch
container sets for every job. One all_reduce of the host ranks + 1, then the group ends.
"""

import argparse
import json
import os

import torch
import torch.distributed as dist
from group_teardown import finish

parser = argparse.ArgumentParser()
parser.add_argument("--backend", type=str, default="gloo")
parser.add_argument("--hosts", type=list, default=json.loads(os.environ["SM_HOSTS"]))
parser.add_argument("--current-host", type=str, default=os.environ["SM_CURRENT_HOST"])
args = parser.parse_args()

world_size = len(args.hosts)
os.environ["WORLD_SIZE"] = str(world_size)
host_rank = args.hosts.index(args.current_host)
os.environ["RANK"] = str(host_rank)
dist.init_process_group(backend=args.backend, rank=host_rank, world_size=world_size)
total = torch.tensor([float(host_rank + 1)])
dist.all_reduce(total)
print(f"host_rank={host_rank} world_size={dist.get_world_size()} sum={total.item():g}",
      flush=True)
finish()
