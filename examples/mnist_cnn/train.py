"""A small CNN on synthetic MNIST-shaped data, trained with ddpjob's DDP library.

Runs unchanged on CPU (gloo), one GPU box (NCCL) or a SageMaker cluster: the launcher (torchrun
started by `ddpjob-train`) provides RANK/WORLD_SIZE/..., the runtime provides SM_MODEL_DIR and the
checkpoint folder. Hyperparameters arrive as `--epochs 3 --lr 0.05 --batch-size 64`.

The data is generated from a fixed seed (no download): ten random 28x28 "digit" templates plus
noise, so the loss really falls and every worker sees the same dataset.
"""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path

import ddpjob_runtime.dataparallel.torch.distributed as dist
import torch
import torch.nn.functional as F
from ddpjob_runtime import checkpoints
from ddpjob_runtime.dataparallel.torch.parallel.distributed import DistributedDataParallel as DDP
from torch import nn

CLASSES = 10
LOG_EVERY = 8  # batches between the "loss=" lines that a job's metric_definitions match


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--lr", type=float, default=0.05)
    parser.add_argument("--batch-size", type=int, default=64, help="per worker")
    parser.add_argument("--samples", type=int, default=4096, help="size of the synthetic set")
    parser.add_argument("--seed", type=int, default=0)
    return parser.parse_args()


def synthetic_mnist(samples: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """`samples` 1x28x28 images and their labels, the same on every worker."""
    gen = torch.Generator().manual_seed(seed)
    templates = torch.randn(CLASSES, 1, 28, 28, generator=gen)
    labels = torch.randint(0, CLASSES, (samples,), generator=gen)
    images = templates[labels] + 1.5 * torch.randn(samples, 1, 28, 28, generator=gen)
    return images, labels


class Net(nn.Module):
    """Two convolutions and a linear layer: about 5k parameters."""

    def __init__(self) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(1, 8, 3)
        self.conv2 = nn.Conv2d(8, 16, 3)
        self.fc = nn.Linear(16 * 5 * 5, CLASSES)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = F.max_pool2d(F.relu(self.conv1(x)), 2)
        x = F.max_pool2d(F.relu(self.conv2(x)), 2)
        return self.fc(x.flatten(1))


def main() -> None:
    args = parse_args()
    dist.init_process_group()
    rank, world = dist.get_rank(), dist.get_world_size()
    device = torch.device("cuda", dist.get_local_rank()) if torch.cuda.is_available() else "cpu"
    torch.manual_seed(args.seed)  # the same initial weights everywhere (DDP also broadcasts)

    model = Net()
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9)
    start_epoch = 0
    state = checkpoints.load_latest()  # the latest complete checkpoint, or None
    if state is not None:
        model.load_state_dict(state["model"])
        optimizer.load_state_dict(state["optimizer"])
        start_epoch = state["epoch"] + 1
        if rank == 0:
            print(f"resuming after epoch {state['epoch'] + 1} (loss {state['loss']:.4f})")
    model = DDP(model.to(device))

    images, labels = synthetic_mnist(args.samples, args.seed)
    shard = slice(rank, None, world)  # each worker trains on its own slice
    images, labels = images[shard].to(device), labels[shard].to(device)

    loss_sum = torch.zeros(3, device=device)
    step = 0
    for epoch in range(start_epoch, args.epochs):
        started = time.perf_counter()
        order = torch.randperm(len(labels), generator=torch.Generator().manual_seed(epoch))
        loss_sum.zero_()
        for begin in range(0, len(order), args.batch_size):
            batch = order[begin : begin + args.batch_size].to(device)
            optimizer.zero_grad()
            logits = model(images[batch])
            loss = F.cross_entropy(logits, labels[batch])
            loss.backward()  # DDP averages the gradients over every worker here
            optimizer.step()
            step += 1
            if rank == 0 and step % LOG_EVERY == 0:  # what metric_definitions match
                print(f"step {step} loss={loss.item():.4f}", flush=True)
            correct = (logits.argmax(1) == labels[batch]).sum()
            loss_sum += torch.stack([loss.detach() * len(batch), correct.float(), torch.tensor(
                float(len(batch)), device=device)])
        dist.all_reduce(loss_sum)  # over every worker of every host
        epoch_loss = (loss_sum[0] / loss_sum[2]).item()
        accuracy = (loss_sum[1] / loss_sum[2]).item()
        if rank == 0:
            print(f"epoch {epoch + 1}/{args.epochs} loss {epoch_loss:.4f} "
                  f"accuracy {accuracy:.3f} ({time.perf_counter() - started:.1f} s, "
                  f"{world} workers)", flush=True)
            checkpoints.save(
                {"model": model.module.state_dict(), "optimizer": optimizer.state_dict(),
                 "epoch": epoch, "loss": epoch_loss},
                step=epoch + 1,
            )

    if rank == 0:
        model_dir = Path(os.environ.get("SM_MODEL_DIR", "model"))
        model_dir.mkdir(parents=True, exist_ok=True)
        torch.save(model.module.state_dict(), model_dir / "model.pt")
        output_dir = Path(os.environ.get("SM_OUTPUT_DATA_DIR", "output"))
        output_dir.mkdir(parents=True, exist_ok=True)
        if args.epochs > start_epoch:
            metrics = {"epochs": args.epochs, "loss": epoch_loss, "accuracy": accuracy,
                       "workers": world}
            (output_dir / "metrics.json").write_text(json.dumps(metrics))
        print(f"saved the model to {model_dir / 'model.pt'}")


if __name__ == "__main__":
    main()
