"""Training-step throughput: ddpjob_runtime's DDP against torch's own DDP, same run.

Two gloo workers on this machine (`--device cuda`: one NCCL worker per GPU) train the same CNN
(same initial weights, same data) wrapped once in each DDP. Timed blocks of steps alternate
between the two, and which one goes first swaps every repetition, so drift of the machine hits
both alike. Prints the median steps/s of each and their ratio (goal: >= 0.98, i.e. our layer
costs nothing)::

    python benchmarks/bench_ddp_step.py [--reps 8] [--steps 20] [--batch 32] [--device cuda]
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

CPU_WORKERS = 2


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
    _settle(dist)
    start = time.perf_counter()
    for step in range(steps):
        x, y = batches[step % len(batches)]
        optimizer.zero_grad(set_to_none=True)
        loss_fn(model(x), y).backward()
        optimizer.step()
    _settle(dist)
    return steps / (time.perf_counter() - start)


def _settle(dist: object) -> None:
    """Every worker here, with its GPU's queued work done (CUDA runs asynchronously)."""
    if torch.cuda.is_available():
        torch.cuda.synchronize()
    dist.barrier()


def _worker(rank: int, port: int, workers: int, args: argparse.Namespace,
            results: mp.Queue) -> None:
    os.environ.update(
        RANK=str(rank),
        WORLD_SIZE=str(workers),
        LOCAL_RANK=str(rank),
        LOCAL_WORLD_SIZE=str(workers),
        MASTER_ADDR="127.0.0.1",
        MASTER_PORT=str(port),
    )
    torch.set_num_threads(1)  # one core per worker, as torchrun sets OMP_NUM_THREADS=1
    import ddpjob_runtime.dataparallel.torch.distributed as dist
    from ddpjob_runtime.dataparallel.torch.parallel.distributed import (
        DistributedDataParallel as OurDDP,
    )

    dist.init_process_group()  # NCCL where this process sees a GPU (`--device cuda`), else gloo
    device = torch.device("cuda", rank) if args.device == "cuda" else torch.device("cpu")
    torch.manual_seed(0)
    net = Net().to(device)
    models = {
        "ours": OurDDP(copy.deepcopy(net)),
        "torch": nn.parallel.DistributedDataParallel(
            copy.deepcopy(net), device_ids=[rank] if device.type == "cuda" else None),
    }
    optimizers = {
        name: torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
        for name, model in models.items()
    }
    generator = torch.Generator().manual_seed(rank)
    batches = [
        (
            torch.randn(args.batch, 3, 32, 32, generator=generator).to(device),
            torch.randint(0, 10, (args.batch,), generator=generator).to(device),
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
    parser.add_argument("--device", choices=("cpu", "cuda"), default="cpu",
                        help="cpu: 2 gloo workers; cuda: one NCCL worker per GPU")
    args = parser.parse_args()
    if args.device == "cuda" and not torch.cuda.is_available():
        parser.error("--device cuda: torch sees no CUDA device here")
    if args.device == "cpu":
        os.environ["CUDA_VISIBLE_DEVICES"] = ""  # the workers' backend is gloo, GPUs or not
    workers = torch.cuda.device_count() if args.device == "cuda" else CPU_WORKERS

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    ctx = mp.get_context("spawn")
    results = ctx.SimpleQueue()
    mp.start_processes(
        _worker, args=(port, workers, args, results), nprocs=workers, join=True,
        start_method="spawn",
    )
    rates = results.get()

    print(
        f"{workers} {'NCCL' if args.device == 'cuda' else 'gloo'} workers, batch "
        f"{args.batch}/worker, {args.reps} x {args.steps} steps per DDP, torch {torch.__version__}"
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
