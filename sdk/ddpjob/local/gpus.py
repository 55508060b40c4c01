"""The GPUs of this machine, for `local_gpu` jobs, without importing torch.

Simulated hosts share one machine, so each gets its own slice of the GPUs through
CUDA_VISIBLE_DEVICES (NCCL refuses two ranks on one GPU); `local` jobs see no GPU at all.
"""

from __future__ import annotations

import os
import subprocess


def visible_gpus() -> list[str]:
    """GPU ids this process may use: CUDA_VISIBLE_DEVICES when set, else what nvidia-smi lists."""
    named = os.environ.get("CUDA_VISIBLE_DEVICES")
    if named is not None:
        return [g.strip() for g in named.split(",") if g.strip() and g.strip() != "-1"]
    return [str(i) for i in range(len(listing()))]


def listing(nvidia_smi: str = "nvidia-smi") -> list[str]:
    """The `nvidia-smi --list-gpus` lines, one per GPU in index order ([] without nvidia-smi)."""
    try:
        out = subprocess.run([nvidia_smi, "--list-gpus"], capture_output=True, text=True,
                             timeout=60).stdout
    except (OSError, subprocess.SubprocessError):
        return []
    return [line for line in out.splitlines() if line.startswith("GPU ")]


def split(gpus: list[str], hosts: int) -> list[list[str]]:
    """`gpus` dealt into `hosts` equal contiguous slices (the remainder stays unused)."""
    per_host = len(gpus) // hosts
    return [gpus[i * per_host : (i + 1) * per_host] for i in range(hosts)]
