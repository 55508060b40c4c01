"""A small DDP training script for the interop tests, launched by a job the official SDK made.

Every worker checks that the launch matches what the job's `distribution` implies (WORLD_SIZE,
hosts, workers per host), trains a tiny model with ddpjob's DDP and checks that the replicas
agree. Rank 0 writes `result.json` into SM_MODEL_DIR (it becomes model.tar.gz). Hyperparameters
arrive as the official SDK's arguments: `--expected-world-size 2 --tag <text> --steps 3`;
an unknown argument fails the job.
"""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path

import ddpjob_runtime.dataparallel.torch.distributed as dist
import torch
from ddpjob_runtime.dataparallel.torch.parallel.distributed import DistributedDataParallel as DDP
from group_teardown import finish
from torch import nn


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--expected-world-size", type=int, required=True)
    parser.add_argument("--tag", required=True)
    parser.add_argument("--steps", type=int, default=3)
    args = parser.parse_args()  # strict: the runtime must pass exactly the user's hyperparameters

    world = int(os.environ["WORLD_SIZE"])
    hosts = json.loads(os.environ["SM_HOSTS"])
    assert world == args.expected_world_size, (world, args.expected_world_size)
    assert world == len(hosts) * int(os.environ["LOCAL_WORLD_SIZE"]), (world, hosts)

    dist.init_process_group()
    rank = dist.get_rank()
    assert (rank, dist.get_world_size()) == (int(os.environ["RANK"]), world)

    torch.manual_seed(100 + rank)  # replicas start different: DDP must broadcast rank 0's
    model = DDP(nn.Linear(4, 1))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    generator = torch.Generator().manual_seed(rank)
    for _ in range(args.steps):
        x = torch.randn(8, 4, generator=generator)
        loss = (model(x) - x.sum(dim=1, keepdim=True)).pow(2).mean()
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()

    flat = torch.cat([p.detach().flatten() for p in model.module.parameters()])
    replicas = [torch.empty_like(flat) for _ in range(world)]
    dist.all_gather(replicas, flat)
    assert all(torch.equal(flat, other) for other in replicas), "replicas diverged"
    ranks = torch.tensor([float(rank)])
    dist.all_reduce(ranks, op=dist.ReduceOp.SUM)
    assert ranks.item() == sum(range(world)), ranks

    if rank == 0:
        result = {
            "world_size": world,
            "local_world_size": int(os.environ["LOCAL_WORLD_SIZE"]),
            "hosts": hosts,
            "current_host": os.environ["SM_CURRENT_HOST"],
            "tag": args.tag,
            "steps": args.steps,
            "framework_params": json.loads(os.environ["SM_FRAMEWORK_PARAMS"]),
            "user_args": json.loads(os.environ["SM_USER_ARGS"]),
            "final_loss": loss.item(),
        }
        Path(os.environ["SM_MODEL_DIR"], "result.json").write_text(json.dumps(result))
        print(f"rank 0 of {world} wrote result.json (tag {args.tag})", flush=True)
    finish()


if __name__ == "__main__":
    main()
