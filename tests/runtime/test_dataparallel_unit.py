"""The DDP library in this process: errors before init, backend choice, a one-rank gloo group."""

from __future__ import annotations

import importlib.util
from collections.abc import Iterator

import ddpjob_runtime.dataparallel.torch.distributed as dist
import pytest
import torch
import torch.distributed as tdist
from ddpjob_runtime.dataparallel import (
    BackendUnavailableError,
    LauncherEnvironmentError,
    NotInitializedError,
    UnsupportedArgumentError,
)
from ddpjob_runtime.dataparallel.torch._backend import choose_backend
from ddpjob_runtime.dataparallel.torch.parallel import DistributedDataParallel as DDP
from torch import nn

LAUNCHER_VARS = (
    "RANK",
    "WORLD_SIZE",
    "LOCAL_RANK",
    "LOCAL_WORLD_SIZE",
    "MASTER_ADDR",
    "MASTER_PORT",
)


@pytest.fixture
def no_launcher(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in LAUNCHER_VARS:
        monkeypatch.delenv(name, raising=False)


@pytest.fixture
def one_rank(no_launcher: None) -> Iterator[None]:
    """A world of one gloo worker over an in-memory store, torn down afterwards."""
    assert not tdist.is_initialized()
    dist.init_process_group(store=tdist.HashStore(), rank=0, world_size=1)
    try:
        yield
    finally:
        tdist.destroy_process_group()


def test_calls_before_init_raise_a_clear_error(no_launcher: None) -> None:
    assert not dist.is_initialized()
    for call, args in [
        (dist.get_rank, ()),
        (dist.get_world_size, ()),
        (dist.get_local_rank, ()),
        (dist.get_local_size, ()),
        (dist.barrier, ()),
        (dist.all_reduce, (torch.ones(1),)),
        (dist.broadcast, (torch.ones(1),)),
        (dist.all_gather, ([torch.ones(1)], torch.ones(1))),
        (dist.all_to_all_single, (torch.ones(1), torch.ones(1))),
        (DDP, (nn.Linear(1, 1),)),
    ]:
        with pytest.raises(NotInitializedError, match=r"not initialized: call init_process_group"):
            call(*args)
    assert issubclass(NotInitializedError, RuntimeError)


def test_is_available_follows_the_launcher_env(
    no_launcher: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert not dist.is_available()
    monkeypatch.setenv("RANK", "0")
    monkeypatch.setenv("WORLD_SIZE", "1")
    assert dist.is_available()


def test_init_without_launcher_env_names_what_is_missing(no_launcher: None) -> None:
    with pytest.raises(LauncherEnvironmentError, match="MASTER_ADDR, MASTER_PORT, RANK, WORLD"):
        dist.init_process_group()
    assert not dist.is_initialized()


def test_backend_choice() -> None:
    assert choose_backend(None, cuda_available=False) == "gloo"
    assert choose_backend(None, cuda_available=True) == "nccl"
    assert choose_backend("smddp", cuda_available=True) == "nccl"
    assert choose_backend("GLOO", cuda_available=True) == "gloo"
    with pytest.raises(BackendUnavailableError, match="needs CUDA"):
        choose_backend("nccl", cuda_available=False)


@pytest.mark.skipif(
    importlib.util.find_spec("oneccl_bindings_for_pytorch") is not None,
    reason="oneCCL bindings are installed here",
)
def test_ccl_without_its_bindings_is_a_clear_error(no_launcher: None) -> None:
    with pytest.raises(BackendUnavailableError, match=r"oneCCL bindings .*oneccl_bind_pt"):
        dist.init_process_group(backend="ccl", store=tdist.HashStore(), rank=0, world_size=1)
    assert not dist.is_initialized()


def test_one_rank_world(one_rank: None) -> None:
    assert dist.is_initialized()
    assert (dist.get_rank(), dist.get_world_size()) == (0, 1)
    assert (dist.get_local_rank(), dist.get_local_size()) == (0, 1)  # no LOCAL_*: own host
    tensor = torch.tensor([3.0, 5.0])
    handle = dist.all_reduce(tensor, op=dist.ReduceOp.AVERAGE, async_op=True)
    assert handle.wait() and handle.is_completed() and tensor.tolist() == [3.0, 5.0]
    got = torch.empty(4)
    dist.all_to_all_single(got, torch.arange(4.0), [4], [4])
    assert got.tolist() == [0.0, 1.0, 2.0, 3.0]

    with pytest.raises(UnsupportedArgumentError, match="only group.WORLD"):
        dist.get_rank(group=object())
    with pytest.raises(UnsupportedArgumentError, match="only group.WORLD"):
        DDP(nn.Linear(2, 2), process_group=tdist.new_group([0]))
    with pytest.raises(UnsupportedArgumentError, match="ReduceOp.AVERAGE, SUM, MIN or MAX"):
        dist.all_reduce(tensor, op=tdist.ReduceOp.PRODUCT)

    model = DDP(nn.Linear(2, 2), process_group=dist.group.WORLD, broadcast_buffers=False)
    assert isinstance(model, nn.parallel.DistributedDataParallel)
    assert isinstance(model.module, nn.Linear) and model.bucket_bytes_cap == 25 * 1024 * 1024
    assert DDP(nn.Linear(2, 2), bucket_cap_mb=1).bucket_bytes_cap == 1024 * 1024
