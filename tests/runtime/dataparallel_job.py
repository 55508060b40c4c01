"""A training script for the DDP library's tests: run by every worker of a real launch.

Checks every collective and op of ``ddpjob_runtime.dataparallel`` for the right values, then
trains a small CNN with its DDP on synthetic data. Any wrong value raises (the launch fails);
on success each rank writes ``rank-<n>.json`` (its weights' SHA-256, its env) into ``--out``.
"""

from __future__ import annotations

import argparse
import copy
import hashlib
import json
import os
import time
from datetime import timedelta
from pathlib import Path

import ddpjob_runtime.dataparallel.torch.distributed as dist
import torch
import torch.distributed as tdist
from ddpjob_runtime.dataparallel import NotInitializedError, UnsupportedArgumentError
from ddpjob_runtime.dataparallel.torch import _all_to_all
from ddpjob_runtime.dataparallel.torch.parallel import DistributedDataParallel as DDPFromParallel
from ddpjob_runtime.dataparallel.torch.parallel.distributed import DistributedDataParallel as DDP
from torch import nn


def expect_error(error: type[Exception], text: str, call, *args, **kwargs) -> None:
    try:
        call(*args, **kwargs)
    except error as err:
        assert text in str(err), f"{call.__name__}: {err!r} lacks {text!r}"
        return
    raise AssertionError(f"{call.__name__} did not raise {error.__name__}")


def check_before_init() -> None:
    assert dist.is_available(), "launched by torchrun, so is_available() must be True"
    assert not dist.is_initialized()
    hint = "call init_process_group() first"
    expect_error(NotInitializedError, hint, dist.get_rank)
    expect_error(NotInitializedError, hint, dist.get_world_size)
    expect_error(NotInitializedError, hint, dist.get_local_rank)
    expect_error(NotInitializedError, hint, dist.all_reduce, torch.ones(1))
    expect_error(NotInitializedError, hint, dist.barrier)
    expect_error(NotInitializedError, hint, DDP, nn.Linear(2, 2))
    assert issubclass(NotInitializedError, RuntimeError)


def check_identity(rank: int, world: int) -> None:
    assert dist.is_initialized()
    assert (rank, world) == (int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"]))
    assert dist.get_local_rank() == int(os.environ["LOCAL_RANK"])
    assert dist.get_local_size() == int(os.environ["LOCAL_WORLD_SIZE"])
    assert dist.get_rank(dist.group.WORLD) == rank and dist.get_world_size(None) == world
    assert dist.get_rank(tdist.group.WORLD) == rank  # torch's spelling of WORLD is WORLD too
    assert tdist.get_backend() == "gloo"
    dist.init_process_group()  # a second call is ignored, not an error


def check_all_reduce(rank: int, world: int) -> None:
    values = [float(r + 1) for r in range(world)]  # rank r contributes r + 1
    mine = torch.tensor([values[rank], -values[rank]])
    expected = {
        dist.ReduceOp.SUM: [sum(values), -sum(values)],
        dist.ReduceOp.MIN: [min(values), -max(values)],
        dist.ReduceOp.MAX: [max(values), -min(values)],
        dist.ReduceOp.AVERAGE: [sum(values) / world, -sum(values) / world],
    }
    for op, want in expected.items():
        for async_op in (False, True):
            tensor = mine.clone()
            handle = dist.all_reduce(tensor, op=op, async_op=async_op)
            if async_op:
                assert handle.wait() is not False and handle.is_completed()
            else:
                assert handle is None
            assert tensor.tolist() == want, (op, async_op, tensor.tolist(), want)
    tensor = mine.clone()
    dist.all_reduce(tensor)  # default op: SUM
    assert tensor.tolist() == expected[dist.ReduceOp.SUM]
    tensor = mine.clone()
    dist.all_reduce(tensor, op=tdist.ReduceOp.MAX)  # torch's ops are understood as well
    assert tensor.tolist() == expected[dist.ReduceOp.MAX]

    # An async AVERAGE is divided once the handle reports completion, without wait().
    tensor = torch.full((1000,), float(rank + 1))
    handle = dist.all_reduce(tensor, op=dist.ReduceOp.AVERAGE, async_op=True)
    deadline = time.monotonic() + 60
    while not handle.is_completed():
        assert time.monotonic() < deadline, "async all_reduce never completed"
        time.sleep(0.001)
    assert torch.all(tensor == sum(values) / world), tensor[:3]
    handle.wait()  # waiting afterwards does not divide twice
    assert torch.all(tensor == sum(values) / world)

    # Integer tensors keep their dtype; AVERAGE rounds down.
    ints = torch.tensor([rank, 3 * rank + 1, -rank - 1], dtype=torch.int64)
    summed = [sum(r for r in range(world)), sum(3 * r + 1 for r in range(world))]
    summed.append(sum(-r - 1 for r in range(world)))
    dist.all_reduce(ints, op=dist.ReduceOp.AVERAGE)
    assert ints.dtype == torch.int64 and ints.tolist() == [s // world for s in summed], ints
    ints = torch.tensor([rank + 1], dtype=torch.int32)
    dist.all_reduce(ints, op=dist.ReduceOp.MAX)
    assert ints.dtype == torch.int32 and ints.tolist() == [world]

    expect_error(UnsupportedArgumentError, "only group.WORLD", dist.all_reduce, mine, group=1)
    expect_error(UnsupportedArgumentError, "op=", dist.all_reduce, mine, op="PRODUCT")
    expect_error(
        UnsupportedArgumentError,
        "bool",
        dist.all_reduce,
        torch.ones(1, dtype=bool),
        op=dist.ReduceOp.AVERAGE,
    )


def check_broadcast_gather(rank: int, world: int) -> None:
    src = world - 1
    for async_op in (False, True):
        tensor = torch.full((3,), float(rank))
        handle = dist.broadcast(tensor, src=src, async_op=async_op)
        if async_op:
            handle.wait()
        assert tensor.tolist() == [float(src)] * 3, tensor
        parts = [torch.empty(2, dtype=torch.int64) for _ in range(world)]
        handle = dist.all_gather(parts, torch.tensor([rank, rank * 10]), async_op=async_op)
        if async_op:
            handle.wait()
        assert [p.tolist() for p in parts] == [[r, r * 10] for r in range(world)], parts
    expect_error(UnsupportedArgumentError, "src=", dist.broadcast, torch.ones(1), src=world)
    expect_error(
        UnsupportedArgumentError, "world size", dist.all_gather, [torch.ones(1)], torch.ones(1)
    )


def check_all_to_all(rank: int, world: int) -> None:
    implementations = {"public": dist.all_to_all_single, "p2p": _all_to_all.all_to_all_single}
    for name, all_to_all in implementations.items():
        for async_op in (False, True):
            # Equal splits: rank r sends [100 r + j] (two rows) to rank j.
            sent = torch.tensor([[100 * rank + j] * 2 for j in range(world)], dtype=torch.float32)
            got = torch.empty_like(sent)
            handle = all_to_all(got, sent, async_op=async_op)
            if async_op:
                handle.wait()
                assert handle.is_completed()
            want = [[100 * r + rank] * 2 for r in range(world)]
            assert got.tolist() == want, (name, async_op, got.tolist())

            # Uneven splits: rank r sends r + j + 1 rows to rank j, rank j keeps them in order.
            in_sizes = [rank + j + 1 for j in range(world)]
            out_sizes = [r + rank + 1 for r in range(world)]
            sent = torch.cat([torch.full((n,), 100 * rank + j) for j, n in enumerate(in_sizes)])
            got = torch.full((sum(out_sizes),), -1)
            handle = all_to_all(got, sent, out_sizes, in_sizes, async_op=async_op)
            if async_op:
                handle.wait()
            want = [100 * r + rank for r, n in enumerate(out_sizes) for _ in range(n)]
            assert got.tolist() == want, (name, async_op, got.tolist(), want)
    expect_error(
        UnsupportedArgumentError,
        "split_sizes",
        _all_to_all.all_to_all_single,
        torch.empty(world),
        torch.empty(world),
        [world + 1] * world,
    )


def check_barrier() -> None:
    assert dist.barrier() is None
    dist.barrier(async_op=True).wait()


class Net(nn.Module):
    """A small CNN without batch norm, so one big batch is exactly the average of shards."""

    def __init__(self) -> None:
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(1, 8, 3, padding=1),
            nn.ReLU(),
            nn.MaxPool2d(2),
            nn.Conv2d(8, 16, 3, padding=1),
            nn.ReLU(),
            nn.AdaptiveAvgPool2d(2),
        )
        self.head = nn.Linear(64, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.features(x).flatten(1))


def train_cnn(rank: int, world: int, steps: int) -> torch.Tensor:
    torch.manual_seed(1000 + rank)  # replicas start different: DDP must sync them from rank 0
    model = DDP(Net(), bucket_cap_mb=0.01)  # tiny buckets: several all-reduces per step
    assert isinstance(model, nn.parallel.DistributedDataParallel) and DDPFromParallel is DDP
    assert type(model).forward is nn.parallel.DistributedDataParallel.forward  # no wrapper
    reference = copy.deepcopy(model.module)  # rank 0's weights, after DDP's broadcast
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    loss_fn = nn.CrossEntropyLoss()
    generator = torch.Generator().manual_seed(rank)
    x = torch.randn(8, 1, 12, 12, generator=generator)
    y = torch.randint(0, 10, (8,), generator=generator)

    # One step against a single-process reference on the whole (gathered) batch.
    loss_fn(model(x), y).backward()
    optimizer.step()
    optimizer.zero_grad()
    xs = [torch.empty_like(x) for _ in range(world)]
    ys = [torch.empty_like(y) for _ in range(world)]
    dist.all_gather(xs, x)
    dist.all_gather(ys, y)
    loss_fn(reference(torch.cat(xs)), torch.cat(ys)).backward()
    with torch.no_grad():
        for param in reference.parameters():
            param -= 0.1 * param.grad
    for mine, ref in zip(model.module.parameters(), reference.parameters(), strict=True):
        assert torch.allclose(mine, ref, atol=1e-5), "DDP step differs from the full-batch step"

    for step in range(steps):
        x = torch.randn(8, 1, 12, 12, generator=generator)
        y = torch.randint(0, 10, (8,), generator=generator)
        if step % 3 == 0:
            with model.no_sync():  # accumulate locally, all-reduce on the next backward
                loss_fn(model(x), y).backward()
            continue
        loss_fn(model(x), y).backward()
        optimizer.step()
        optimizer.zero_grad()

    flat = torch.cat([p.detach().flatten() for p in model.module.parameters()])
    replicas = [torch.empty_like(flat) for _ in range(world)]
    dist.all_gather(replicas, flat)
    assert all(torch.equal(flat, other) for other in replicas), "replicas diverged"
    assert not torch.equal(flat, torch.cat([p.flatten() for p in reference.parameters()]))
    return flat


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", required=True)
    parser.add_argument("--steps", type=int, default=6)
    args, _ = parser.parse_known_args()

    check_before_init()
    dist.init_process_group(timeout=timedelta(seconds=60))  # torch kwargs pass through
    rank, world = dist.get_rank(), dist.get_world_size()
    check_identity(rank, world)
    check_all_reduce(rank, world)
    check_broadcast_gather(rank, world)
    check_all_to_all(rank, world)
    check_barrier()
    flat = train_cnn(rank, world, args.steps)

    result = {
        "rank": rank,
        "world_size": world,
        "local_rank": dist.get_local_rank(),
        "weights_sha256": hashlib.sha256(flat.numpy().tobytes()).hexdigest(),
        "env": {k: v for k, v in os.environ.items() if k.startswith("SM_")},
    }
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / f"rank-{rank}.json").write_text(json.dumps(result))
    dist.destroy_process_group()  # as torch's tutorials end: barrier, then destroy
    assert not dist.is_initialized()
    dist.destroy_process_group()  # a second call is a no-op, as after torch's own teardown


if __name__ == "__main__":
    main()
