"""A tuning trial's script: a DDP linear regression whose validation loss is the objective.

Hyperparameters arrive as `--lr 0.05 --epochs 6`. The data is generated from a fixed seed
(y = 3x + 1 + noise; no download); each worker trains on its shard, DDP averages the gradients,
and rank 0 prints `epoch E/N val_loss=L` after every epoch (one line per epoch, from one rank,
so the tuner's regex sees each value once) and checkpoints the model (`ddpjob_runtime.
checkpoints`: `step-<epoch>/state.pt`, what `estimator.download_checkpoint()` brings back).

A tuning job's trials all get the definition's `CheckpointConfig.S3Uri`, as on SageMaker, so
they would restore each other's checkpoints: this script keeps its own under
`<checkpoint folder>/<TRAINING_JOB_NAME>/` (the whole folder is synced with
`checkpoint_s3_uri`; `tuner.best_estimator().download_checkpoint()` reads the best trial's
there), and resumes from them after a spot interruption.
"""

import argparse
import os
import time

import torch
import torch.distributed as dist
from ddpjob_runtime import checkpoints
from ddpjob_runtime.shared import contract, storage
from torch.nn.parallel import DistributedDataParallel


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lr", type=float, default=0.05)
    parser.add_argument("--epochs", type=int, default=6)
    parser.add_argument("--epoch-s", type=float, default=0.5, help="a pause after each epoch")
    args, _ = parser.parse_known_args()  # the tuner's own hyperparameters are ignored
    return args


def keep_checkpoints_apart(job: str) -> None:
    """Save and load this trial's checkpoints under `<checkpoint folder>/<job>/`: `checkpoints`
    reads its local folder and its URI from these two variables at each call."""
    os.environ[contract.ENV_CHECKPOINT_DIR] = str(checkpoints.checkpoint_dir() / job)
    uri = os.environ.get(contract.ENV_CHECKPOINT_URI)
    if uri:  # none on SageMaker's own container: SageMaker syncs the folder itself
        os.environ[contract.ENV_CHECKPOINT_URI] = storage.join(uri, job)


def data(samples: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    generator = torch.Generator().manual_seed(seed)
    x = torch.rand(samples, 1, generator=generator) * 4 - 2
    return x, 3 * x + 1 + 0.1 * torch.randn(samples, 1, generator=generator)


def main() -> None:
    args = parse_args()
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    model = DistributedDataParallel(torch.nn.Linear(1, 1))
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr)
    keep_checkpoints_apart(os.environ["TRAINING_JOB_NAME"])
    state = checkpoints.load_latest()  # this trial's own: a restart after an interruption
    start = 0
    if state is not None:
        model.module.load_state_dict(state["model"])
        start = state["epoch"] + 1
    x, y = data(1024, seed=0)
    x_val, y_val = data(256, seed=1)
    shard = slice(rank, None, world)
    for epoch in range(start, args.epochs):
        for batch in range(0, len(x[shard]), 64):
            optimizer.zero_grad()
            loss = torch.nn.functional.mse_loss(model(x[shard][batch:batch + 64]),
                                                y[shard][batch:batch + 64])
            loss.backward()
            optimizer.step()
        if rank == 0:
            with torch.no_grad():
                val_loss = torch.nn.functional.mse_loss(model.module(x_val), y_val).item()
            print(f"epoch {epoch + 1}/{args.epochs} val_loss={val_loss:.6f}", flush=True)
            checkpoints.save({"epoch": epoch, "model": model.module.state_dict(),
                              "val_loss": val_loss}, step=epoch + 1)
        time.sleep(args.epoch_s)
        dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
