"""The GPUs of this machine, for jobs on `local_gpu` or a GPU instance type, without torch.

Simulated hosts share one machine, so each gets its own slice of the GPUs through
CUDA_VISIBLE_DEVICES (NCCL refuses two ranks on one GPU): an equal share, and on an `ml.*` GPU
type at most the GPUs that type has on SageMaker (the official SDK's `instance_gpu_info.json`,
where it lists the type). `local` and CPU types see no GPU at all.
"""

from __future__ import annotations

import contextlib
import logging
import os
import subprocess

from ddpjob import image_uris, official_sdk

log = logging.getLogger(__name__)


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


def uses_gpus(instance_type: str) -> bool:
    """Whether hosts of `instance_type` get GPUs: `local_gpu` and SageMaker's GPU types."""
    return instance_type == "local_gpu" or (
        instance_type.startswith("ml.") and image_uris.processor(instance_type) == "gpu")


def per_instance(instance_type: str) -> int | None:
    """The GPUs of one `instance_type` host on SageMaker, from the official SDK's registry
    (`instance_gpu_info.json`, the same in every region), or None when it does not list it."""
    sdk = official_sdk.installed()
    if sdk is None:
        return None
    with contextlib.suppress(OSError, ValueError, TypeError, KeyError):
        for types in sdk.config("instance_gpu_info").values():
            if instance_type in types:
                return int(types[instance_type]["Count"])
    return None


def host_shares(instance_type: str, hosts: int) -> list[list[str]]:
    """Each of `hosts` hosts' GPU ids: none for `local` and CPU types, else an equal share of
    `visible_gpus()`, on an `ml.*` type at most `per_instance` of it."""
    if not uses_gpus(instance_type):
        return [[] for _ in range(hosts)]
    visible = visible_gpus()
    shares = split(visible, hosts)
    most = per_instance(instance_type)
    if most and len(shares[0]) < most:
        log.warning("%s has %d GPUs on SageMaker; here each of %d hosts gets %d of this "
                    "machine's %d", instance_type, most, hosts, len(shares[0]), len(visible))
    return [share[:most] for share in shares] if most else shares
