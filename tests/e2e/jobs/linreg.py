"""A linear regression whose loss falls by a known factor per step, trained with ddpjob's DDP.

The data are D rows of the identity matrix X = I and the targets y = w*, so the loss of the
weights w is mean((w - w*)^2). Full-batch SGD with lr = D/4 halves w - w* every step, whatever
the number of workers (each worker takes its rows, DDP averages the gradients): starting from
w = 0, the loss at step k is exactly mean(w*^2) / 4**k and the weights after k updates are
w* (1 - 2**-k). That makes a resume unmistakable: a restart from scratch logs mean(w*^2) again,
a resume after checkpoint N logs mean(w*^2) / 4**(N+1).

w* comes from the `train` channel (`data.json`: {"target": [...], "token": "..."}) when the job
has one, else from --target. Rank 0 checkpoints after every step; every rank logs what it saw.
Output lines (parsed by the tests):

    rank=R token=T                   the channel's token, read by every rank
    resumed rank=R step=N            what checkpoints.load_latest() gave, on every rank
    fresh start rank=R               (each host brings the latest checkpoint down itself)
    step=K loss=L                    rank 0, the global loss before update K
    final rank=R step=K params_sha256=H
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import time
from pathlib import Path

import ddpjob_runtime.dataparallel.torch.distributed as dist
import torch
from ddpjob_runtime import checkpoints
from ddpjob_runtime.dataparallel.torch.parallel.distributed import DistributedDataParallel as DDP
from group_teardown import finish
from torch import nn


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, required=True, help="total steps of the training")
    parser.add_argument("--sleep", type=float, default=0.0, help="seconds after each step")
    parser.add_argument("--target", type=str, default="3,-1,2,5", help="w* without a channel")
    return parser.parse_args()


def read_target(args: argparse.Namespace) -> tuple[list[float], str | None]:
    channel = os.environ.get("SM_CHANNEL_TRAIN")
    if channel:
        data = json.loads((Path(channel) / "data.json").read_text())
        return [float(v) for v in data["target"]], str(data["token"])
    return [float(v) for v in args.target.split(",")], None


def params_sha256(model: nn.Module) -> str:
    return hashlib.sha256(model.weight.detach().cpu().numpy().tobytes()).hexdigest()


def main() -> None:
    args = parse_args()
    dist.init_process_group()
    rank, world = dist.get_rank(), dist.get_world_size()
    target, token = read_target(args)
    print(f"rank={rank} token={token}", flush=True)
    dims = len(target)
    assert dims % world == 0, f"{dims} targets cannot be split over {world} workers"

    model = nn.Linear(dims, 1, bias=False, dtype=torch.float64)
    nn.init.zeros_(model.weight)
    optimizer = torch.optim.SGD(model.parameters(), lr=dims / 4)
    start = 0
    state = checkpoints.load_latest()
    if state is not None:
        model.load_state_dict(state["model"])
        optimizer.load_state_dict(state["optimizer"])
        start = state["step"] + 1
        print(f"resumed rank={rank} step={state['step']}", flush=True)
    else:
        print(f"fresh start rank={rank}", flush=True)
    ddp = DDP(model)

    rows = list(range(rank, dims, world))  # this worker's rows of X = I
    inputs = torch.eye(dims, dtype=torch.float64)[rows]
    labels = torch.tensor(target, dtype=torch.float64)[rows].unsqueeze(1)
    for step in range(start, args.steps):
        optimizer.zero_grad()
        loss = ((ddp(inputs) - labels) ** 2).mean()
        loss.backward()  # gradients averaged over every worker of every host
        optimizer.step()
        total = loss.detach().clone()
        dist.all_reduce(total, op=dist.ReduceOp.AVERAGE)
        if rank == 0:
            print(f"step={step} loss={total.item():.17e}", flush=True)
        checkpoints.save({"model": model.state_dict(), "optimizer": optimizer.state_dict(),
                          "step": step}, step=step)  # rank 0 writes; others return at once
        time.sleep(args.sleep)

    digest = params_sha256(model)
    print(f"final rank={rank} step={args.steps - 1} params_sha256={digest}", flush=True)
    if rank == 0:
        model_dir = Path(os.environ["SM_MODEL_DIR"])
        torch.save(model.state_dict(), model_dir / "model.pt")
        report = {"token": token, "params_sha256": digest, "steps": args.steps,
                  "world": world, "first_step": start}
        (model_dir / "report.json").write_text(json.dumps(report))
    finish()


if __name__ == "__main__":
    main()
