"""Training-step throughput: ddpjob_runtime's DDP against torch's own DDP, same run.

Two gloo workers on this machine train the same CNN (same initial weights, same data) wrapped
once in each DDP. Timed blocks of steps alternate between the two, and which one goes first
swaps every repetition, so drift of the machine hits both alike. Prints the median steps/s of
each and their ratio (goal: >= 0.98, i.e. our layer costs nothing)::

    python benchmarks/bench_ddp_step.py [--reps 8] [--steps 20] [--batch 32]
"""

from __future__ import annotations

import argparse
import copy
import os
import socket
import statistics
import time

import torch
import torch.multiprocessing as mp
from torch import nn

WORKERS = 2


class Net(nn.Module):
    """A small image classifier (~0.6 M parameters): compute and all-reduce both matter."""

    def __init__(self) -> None:
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(3, 32, 3, padding=1),
            nn.ReLU(),
            nn.MaxPool2d(2),
            nn.Conv2d(32, 64, 3, padding=1),
            nn.ReLU(),
            nn.MaxPool2d(2),
            nn.Conv2d(64, 64, 3, padding=1),
            nn.ReLU(),
            nn.AdaptiveAvgPool2d(4),
        )
        self.head = nn.Sequential(nn.Flatten(), nn.Linear(1024, 512), nn.ReLU(), nn.Linear(512, 10))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.features(x))


def _timed_steps(
    model: nn.Module, optimizer: torch.optim.Optimizer, batches: list, steps: int
) -> float:
    """Steps per second of ``steps`` SGD steps, measured between two barriers."""
    import ddpjob_runtime.dataparallel.torch.distributed as dist

    loss_fn = nn.CrossEntropyLoss()
    dist.barrier()
    start = time.perf_counter()
    for step in range(steps):
        x, y = batches[step % len(batches)]
        optimizer.zero_grad(set_to_none=True)
        loss_fn(model(x), y).backward()
        optimizer.step()
    dist.barrier()
    return steps / (time.perf_counter() - start)


def _worker(rank: int, port: int, args: argparse.Namespace, results: mp.Queue) -> None:
    os.environ.update(
        RANK=str(rank),
        WORLD_SIZE=str(WORKERS),
        LOCAL_RANK=str(rank),
        LOCAL_WORLD_SIZE=str(WORKERS),
        MASTER_ADDR="127.0.0.1",
        MASTER_PORT=str(port),
    )
    torch.set_num_threads(1)  # one core per worker, as torchrun sets OMP_NUM_THREADS=1
    import ddpjob_runtime.dataparallel.torch.distributed as dist
    from ddpjob_runtime.dataparallel.torch.parallel.distributed import (
        DistributedDataParallel as OurDDP,
    )

    dist.init_process_group()
    torch.manual_seed(0)
    net = Net()
    models = {
        "ours": OurDDP(copy.deepcopy(net)),
        "torch": nn.parallel.DistributedDataParallel(copy.deepcopy(net)),
    }
    optimizers = {
        name: torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
        for name, model in models.items()
    }
    generator = torch.Generator().manual_seed(rank)
    batches = [
        (
            torch.randn(args.batch, 3, 32, 32, generator=generator),
            torch.randint(0, 10, (args.batch,), generator=generator),
        )
        for _ in range(4)
    ]

    for name, model in models.items():  # warm-up: allocator, DDP's first-step bucket rebuild
        _timed_steps(model, optimizers[name], batches, args.warmup)
    rates: dict[str, list[float]] = {name: [] for name in models}
    for rep in range(args.reps):
        order = ["ours", "torch"] if rep % 2 == 0 else ["torch", "ours"]
        for name in order:
            rates[name].append(_timed_steps(models[name], optimizers[name], batches, args.steps))
    if rank == 0:
        results.put(rates)
    dist.barrier()
    torch.distributed.destroy_process_group()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=8, help="timed blocks per DDP")
    parser.add_argument("--steps", type=int, default=20, help="steps per timed block")
    parser.add_argument("--warmup", type=int, default=5, help="untimed steps per DDP first")
    parser.add_argument("--batch", type=int, default=32, help="images per worker per step")
    args = parser.parse_args()

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    ctx = mp.get_context("spawn")
    results = ctx.SimpleQueue()
    mp.start_processes(
        _worker, args=(port, args, results), nprocs=WORKERS, join=True, start_method="spawn"
    )
    rates = results.get()

    print(
        f"{WORKERS} gloo workers, batch {args.batch}/worker, {args.reps} x {args.steps} "
        f"steps per DDP, torch {torch.__version__}"
    )
    medians = {name: statistics.median(values) for name, values in rates.items()}
    for name, values in rates.items():
        print(
            f"  {name:>5} DDP: {medians[name]:7.2f} steps/s median "
            f"(min {min(values):.2f}, max {max(values):.2f})"
        )
    print(f"  ratio ours/torch: {medians['ours'] / medians['torch']:.3f}  (goal >= 0.98)")


if __name__ == "__main__":
    main()
