"""``smdistributed.dataparallel.torch.distributed`` on top of ``torch.distributed``.

Same functions, arguments and ``ReduceOp`` values as SageMaker's library; the job's process
group is torch's default group, so torch's own DDP, samplers and collectives see it too.
"""

from __future__ import annotations

import enum
import functools
import logging
import os
from collections.abc import Sequence
from typing import Any

import torch
import torch.distributed as tdist

from ddpjob_runtime.dataparallel.errors import (
    BackendUnavailableError,
    LauncherEnvironmentError,
    NotInitializedError,
    UnsupportedArgumentError,
)
from ddpjob_runtime.dataparallel.torch import _all_to_all
from ddpjob_runtime.dataparallel.torch._backend import choose_backend
from ddpjob_runtime.dataparallel.torch._work import Work

__all__ = [
    "ReduceOp", "Work", "all_gather", "all_reduce", "all_to_all_single", "barrier",
    "broadcast", "destroy_process_group", "get_local_rank", "get_local_size", "get_rank",
    "get_world_size", "group", "init_process_group", "is_available", "is_initialized",
]

logger = logging.getLogger(__name__)

AsyncHandle = tdist.Work | Work  # ours where one call of torch is not enough


class ReduceOp(enum.Enum):
    """Reductions of ``all_reduce``: ``AVERAGE``, ``SUM``, ``MIN``, ``MAX``."""

    AVERAGE = "AVERAGE"
    SUM = "SUM"
    MIN = "MIN"
    MAX = "MAX"


class _World:
    def __repr__(self) -> str:
        return "group.WORLD"


class group:  # noqa: N801 - the name and shape of smdistributed's (and torch's) ``group``
    """Process groups: only ``group.WORLD`` (every worker of the job) is supported."""

    WORLD = _World()


_FROM_TORCH = {
    tdist.ReduceOp.SUM: ReduceOp.SUM,
    tdist.ReduceOp.MIN: ReduceOp.MIN,
    tdist.ReduceOp.MAX: ReduceOp.MAX,
    tdist.ReduceOp.AVG: ReduceOp.AVERAGE,
}
_TORCH_OPS = {op: theirs for theirs, op in _FROM_TORCH.items() if op is not ReduceOp.AVERAGE}
# Backends found to lack a native all_to_all in this process (decided on first use).
_NO_NATIVE_ALL_TO_ALL: set[str] = set()


def is_available() -> bool:
    """True when the script was started as a distributed job (torchrun's or MPI's env is set)."""
    return tdist.is_available() and "RANK" in os.environ and "WORLD_SIZE" in os.environ


def init_process_group(*args: Any, **kwargs: Any) -> None:
    """Join the job's process group; call once, before anything else.

    No arguments needed: rank, world size and rendezvous come from the launcher's environment
    (``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK``, ``MASTER_ADDR``, ``MASTER_PORT``). The backend is
    NCCL when CUDA is available (this process pinned to GPU ``LOCAL_RANK``) and gloo otherwise;
    ``backend="ccl"`` uses Intel's oneCCL bindings. Other arguments (``timeout``, ...) are
    passed to ``torch.distributed.init_process_group``.
    """
    if not tdist.is_available():
        raise BackendUnavailableError("this build of torch has no torch.distributed")
    if tdist.is_initialized():
        logger.warning("init_process_group() called again: already initialized, ignored")
        return
    requested = args[0] if args else kwargs.pop("backend", None)
    rest = args[1:]
    if not rest and "init_method" not in kwargs and "store" not in kwargs:
        _check_launcher_env(kwargs)
    cuda = torch.cuda.is_available()
    backend = choose_backend(requested, cuda)
    if cuda and "nccl" in backend:
        torch.cuda.set_device(_env_int("LOCAL_RANK", 0))
    tdist.init_process_group(backend, *rest, **kwargs)
    logger.info("initialized: backend=%s rank=%d world_size=%d local_rank=%s", backend,
                tdist.get_rank(), tdist.get_world_size(), os.environ.get("LOCAL_RANK", "?"))


def is_initialized() -> bool:
    """True once ``init_process_group()`` has run in this process."""
    return tdist.is_available() and tdist.is_initialized()


def get_world_size(group: object = group.WORLD) -> int:
    """Number of workers in the job, over all hosts."""
    _require_initialized("get_world_size", group)
    return tdist.get_world_size()


def get_rank(group: object = group.WORLD) -> int:
    """This worker's rank in the job, 0 to world size - 1."""
    _require_initialized("get_rank", group)
    return tdist.get_rank()


def get_local_rank() -> int:
    """This worker's rank among the workers of its host (its GPU index)."""
    _require_initialized("get_local_rank")
    return _local("LOCAL_RANK", tdist.get_rank())


def get_local_size() -> int:
    """Number of workers on this worker's host."""
    _require_initialized("get_local_size")
    return _local("LOCAL_WORLD_SIZE", tdist.get_world_size())


def all_reduce(tensor: torch.Tensor, op: object = ReduceOp.SUM, group: object = group.WORLD,
               async_op: bool = False) -> AsyncHandle | None:
    """Reduce ``tensor`` in place over all workers with ``op`` (default SUM).

    ``AVERAGE`` of an integer tensor keeps its dtype, rounded down (floor division).
    """
    _require_initialized("all_reduce", group)
    op = _reduce_op(op)
    if op is not ReduceOp.AVERAGE:
        return tdist.all_reduce(tensor, op=_TORCH_OPS[op], async_op=async_op)
    if tensor.dtype == torch.bool:
        raise UnsupportedArgumentError("all_reduce: ReduceOp.AVERAGE is not defined for bool")
    floating = tensor.is_floating_point() or tensor.is_complex()
    if floating and tensor.is_cuda and "nccl" in tdist.get_backend():
        return tdist.all_reduce(tensor, op=tdist.ReduceOp.AVG, async_op=async_op)
    # gloo (before torch 2.x) and ccl lack AVG, and AVG of ints is ill-defined: SUM, then divide.
    divide = functools.partial(tensor.div_, tdist.get_world_size(),
                               rounding_mode=None if floating else "floor")
    work = tdist.all_reduce(tensor, op=tdist.ReduceOp.SUM, async_op=async_op)
    if async_op:
        return Work([work], then=divide)
    divide()
    return None


def broadcast(tensor: torch.Tensor, src: int = 0, group: object = group.WORLD,
              async_op: bool = False) -> AsyncHandle | None:
    """Copy ``tensor`` of rank ``src`` into ``tensor`` on every other worker."""
    _require_initialized("broadcast", group)
    world = tdist.get_world_size()
    if not 0 <= src < world:
        raise UnsupportedArgumentError(f"broadcast: src={src} is not a rank (world size {world})")
    return tdist.broadcast(tensor, src=src, async_op=async_op)


def all_gather(tensor_list: list[torch.Tensor], tensor: torch.Tensor, group: object = group.WORLD,
               async_op: bool = False) -> AsyncHandle | None:
    """Fill ``tensor_list[i]`` with ``tensor`` of rank ``i``, on every worker."""
    _require_initialized("all_gather", group)
    world = tdist.get_world_size()
    if len(tensor_list) != world:
        raise UnsupportedArgumentError(f"all_gather: tensor_list has {len(tensor_list)} "
                                       f"tensors, needs world size {world}")
    return tdist.all_gather(tensor_list, tensor, async_op=async_op)


def all_to_all_single(output_t: torch.Tensor, input_t: torch.Tensor,
                      output_split_sizes: Sequence[int] | None = None,
                      input_split_sizes: Sequence[int] | None = None, group: object = group.WORLD,
                      async_op: bool = False) -> AsyncHandle | None:
    """Scatter dim-0 chunks of ``input_t`` to all workers; gather theirs into ``output_t``.

    Without split sizes the chunks are equal; backends without a native all-to-all get one
    built from point-to-point sends.
    """
    _require_initialized("all_to_all_single", group)
    backend = tdist.get_backend()
    if backend not in _NO_NATIVE_ALL_TO_ALL:
        try:
            return tdist.all_to_all_single(output_t, input_t, output_split_sizes,
                                           input_split_sizes, async_op=async_op)
        except RuntimeError as err:
            # Refused before any data moved, identically on every rank: safe to fall back.
            if not _all_to_all.is_unsupported(err):
                raise
            logger.info("backend %s has no all_to_all: using point-to-point sends", backend)
            _NO_NATIVE_ALL_TO_ALL.add(backend)
    return _all_to_all.all_to_all_single(output_t, input_t, output_split_sizes,
                                         input_split_sizes, async_op=async_op)


def barrier(group: object = group.WORLD, async_op: bool = False) -> AsyncHandle | None:
    """Wait until every worker reached this call."""
    _require_initialized("barrier", group)
    return tdist.barrier(async_op=async_op)


def destroy_process_group(group: object = group.WORLD) -> None:
    """Leave the job's process group, as torch's tutorials end a script; a no-op when it is
    not initialized. Every worker first waits for the others at a barrier: a rank that tears
    its gloo connections down while a peer still uses them can abort the peer (SIGABRT,
    "terminate called without an active exception")."""
    _check_group(group)
    if not is_initialized():
        return
    tdist.barrier()
    tdist.destroy_process_group()


def _require_initialized(what: str, group_: object = None) -> None:
    """Refuse a call before init_process_group(), or on a group other than WORLD."""
    if not is_initialized():
        raise NotInitializedError(
            f"ddpjob_runtime.dataparallel is not initialized: call init_process_group() "
            f"first (before {what})")
    _check_group(group_)


def _check_group(value: object) -> None:
    """Accept WORLD in every spelling (ours, None, torch's default group); refuse the rest."""
    if value is None or value is group.WORLD:
        return
    if tdist.is_initialized() and value is tdist.group.WORLD:
        return
    raise UnsupportedArgumentError(
        f"group={value!r} is not supported: like smdistributed.dataparallel, only "
        "group.WORLD (every worker of the job) is")


def _reduce_op(op: object) -> ReduceOp:
    if op is None:
        return ReduceOp.SUM
    if isinstance(op, ReduceOp):
        return op
    try:
        return _FROM_TORCH[op]
    except (KeyError, TypeError):
        raise UnsupportedArgumentError(
            f"op={op!r} is not supported: use ReduceOp.AVERAGE, SUM, MIN or MAX") from None


def _check_launcher_env(kwargs: dict[str, Any]) -> None:
    needed = ["MASTER_ADDR", "MASTER_PORT"]
    needed += [] if kwargs.get("rank", -1) >= 0 else ["RANK"]
    needed += [] if kwargs.get("world_size", -1) > 0 else ["WORLD_SIZE"]
    missing = [name for name in needed if name not in os.environ]
    if missing:
        raise LauncherEnvironmentError(
            f"init_process_group() needs the launcher's environment, missing {', '.join(missing)}:"
            " start the script with torchrun or ddpjob-train")


def _local(name: str, fallback: int) -> int:
    """A per-host value from the launcher's env; a one-worker job is its own host."""
    if name in os.environ:
        return _env_int(name, 0)
    if tdist.get_world_size() == 1:
        return fallback
    raise LauncherEnvironmentError(f"{name} is not set: start the script with torchrun")


def _env_int(name: str, default: int) -> int:
    value = os.environ.get(name, "")
    try:
        return int(value) if value else default
    except ValueError:
        raise LauncherEnvironmentError(f"{name}={value!r} is not an integer") from None
