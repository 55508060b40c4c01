"""``all_to_all_single`` over point-to-point sends, for backends without a native all-to-all."""

from __future__ import annotations

from collections.abc import Sequence

import torch
import torch.distributed as tdist

from ddpjob_runtime.dataparallel.errors import UnsupportedArgumentError
from ddpjob_runtime.dataparallel.torch._work import Work


def is_unsupported(err: RuntimeError) -> bool:
    """Whether torch refused the collective because the backend does not implement it."""
    text = str(err).lower()
    return "does not support" in text or "not supported" in text or "not implemented" in text


def all_to_all_single(output: torch.Tensor, input: torch.Tensor,
                      output_split_sizes: Sequence[int] | None = None,
                      input_split_sizes: Sequence[int] | None = None,
                      async_op: bool = False) -> Work | None:
    """Send chunk ``j`` of ``input`` (dim 0) to rank ``j``; receive rank ``j``'s into ``output``."""
    world, rank = tdist.get_world_size(), tdist.get_rank()
    sends = _chunks(input, input_split_sizes, world, "input")
    recvs = _chunks(output, output_split_sizes, world, "output")
    recvs[rank].copy_(sends[rank])
    ops = []
    for peer in range(world):
        # Both sides know each size (they must agree), so both skip empty transfers.
        if peer != rank and sends[peer].numel():
            ops.append(tdist.P2POp(tdist.isend, sends[peer].contiguous(), peer))
        if peer != rank and recvs[peer].numel():
            ops.append(tdist.P2POp(tdist.irecv, recvs[peer], peer))
    work = Work(tdist.batch_isend_irecv(ops) if ops else [])
    if async_op:
        return work
    work.wait()
    return None


def _chunks(tensor: torch.Tensor, sizes: Sequence[int] | None, world: int,
            name: str) -> list[torch.Tensor]:
    if tensor.dim() == 0 or not tensor.is_contiguous():
        raise UnsupportedArgumentError(
            f"all_to_all_single: {name} must be a contiguous tensor with at least one dimension")
    rows = tensor.shape[0]
    if not sizes:
        if rows % world:
            raise UnsupportedArgumentError(
                f"all_to_all_single: {name} has {rows} rows, not divisible by world size "
                f"{world}; pass {name}_split_sizes")
        sizes = [rows // world] * world
    sizes = [int(size) for size in sizes]
    if len(sizes) != world or sum(sizes) != rows or min(sizes) < 0:
        raise UnsupportedArgumentError(
            f"all_to_all_single: {name}_split_sizes={sizes} must be {world} non-negative "
            f"sizes adding up to {rows}")
    return list(torch.split(tensor, sizes))
