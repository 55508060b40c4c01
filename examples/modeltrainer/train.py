"""A SageMaker training script as a v3 ModelTrainer runs it: torchrun's variables, gloo on CPU.

It fits `y = w x + b` to the `training` channel's `points.csv` (one `x,y` per line) with DDP,
each rank on its own share of the points. Rank 0 checkpoints `state.pt` (the weights, the step
and every step's loss so far) to the checkpoint folder after each epoch, which SageMaker (and
ddpjob's local backend) sync with `CheckpointConfig.S3Uri`, and resumes from it; the model goes
to SM_MODEL_DIR. The folders default to SageMaker's `/opt/ml` paths.
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--epochs", type=int, default=20)
    parser.add_argument("--lr", type=float, default=0.1)
    parser.add_argument("--checkpoint-dir", default="/opt/ml/checkpoints")
    args = parser.parse_args()
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    data = Path(os.environ.get("SM_CHANNEL_TRAINING", "/opt/ml/input/data/training"))
    points = torch.tensor([[float(v) for v in line.split(",")]
                           for line in (data / "points.csv").read_text().split()])[rank::world]
    x, y = points[:, :1], points[:, 1:]

    model = DDP(nn.Linear(1, 1))
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr)
    checkpoint = Path(args.checkpoint_dir) / "state.pt"
    start, losses = 0, []
    if checkpoint.exists():  # brought down from CheckpointConfig.S3Uri
        state = torch.load(checkpoint, weights_only=True)
        model.module.load_state_dict(state["model"])
        start, losses = state["epoch"] + 1, state["losses"]
        print(f"rank {rank} resumed after epoch {state['epoch']}", flush=True)
    for epoch in range(start, start + args.epochs):
        loss = nn.functional.mse_loss(model(x), y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        mean = loss.detach().clone()
        dist.all_reduce(mean)
        losses.append(mean.item() / world)
        print(f"rank {rank}/{world} epoch {epoch} loss={losses[-1]:.5f}", flush=True)
        if rank == 0:  # written whole, then renamed: a sync never sees half a file
            checkpoint.parent.mkdir(parents=True, exist_ok=True)
            partial = checkpoint.with_suffix(".partial")
            torch.save({"model": model.module.state_dict(), "epoch": epoch, "losses": losses},
                       partial)
            os.replace(partial, checkpoint)
    if rank == 0:
        model_dir = Path(os.environ.get("SM_MODEL_DIR", "/opt/ml/model"))
        torch.save(model.module.state_dict(), model_dir / "model.pt")
    # Every rank is done before any tears its connections down: gloo can abort a rank whose
    # peer is still working when it destroys the group ("terminate called without an active
    # exception", seen once in CI while rank 0 saved the model).
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
