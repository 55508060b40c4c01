"""SageMaker's persistent warm-pool cache on a local host: `/opt/ml/sagemaker/warmpoolcache`.

On SageMaker a job that runs on a warm pool finds, on each instance, a folder that outlives the
job and is there again for the next job reusing the pool (on the same instance), named by
`SAGEMAKER_MANAGED_WARMPOOL_CACHE_DIRECTORY`; it is deleted when the pool ends. A job on no pool
has neither. Locally each host of a job on a pool gets `<home>/pools/<id>/cache/<host>` (private,
0700): in the host's own namespace a writable mount at `/opt/ml/sagemaker/warmpoolcache`
(`sandbox`); without namespaces the host's root holds a link to it at the same place and the
variable names the real folder. The pool's keeper removes `cache/` when the pool ends.
"""

from __future__ import annotations

import contextlib
import shutil
from pathlib import Path

from ddpjob.local.base.jobstore import private_dir

ENV = "SAGEMAKER_MANAGED_WARMPOOL_CACHE_DIRECTORY"
IN_ROOT = Path("sagemaker") / "warmpoolcache"  # below /opt/ml, as on SageMaker
FOLDER = "cache"  # below the pool's folder


def host_folder(pool_folder: Path, host: str) -> Path:
    """Host `host`'s cache in the pool `pool_folder` (made, private, if it is not there)."""
    private_dir(pool_folder / FOLDER)
    return private_dir(pool_folder / FOLDER / host)


def place(root: Path, cache: Path, own_namespace: bool) -> Path:
    """Put `cache` at `sagemaker/warmpoolcache` of the host root `root`: an empty folder to
    mount it on in the host's `own_namespace` (`sandbox` mounts it), else a link to it; returns
    that place (what `remove_place` removes when the job ends)."""
    remove_place(root)  # a job retry places it again
    where = root / IN_ROOT
    where.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    if own_namespace:
        where.mkdir(mode=0o700)
    else:
        where.symlink_to(cache, target_is_directory=True)
    return where


def env_value(cache: Path, own_namespace: bool) -> str:
    """`SAGEMAKER_MANAGED_WARMPOOL_CACHE_DIRECTORY` of a host: SageMaker's path where the host
    sees its own `/opt/ml`, else the real folder (a script reading the variable finds it)."""
    return f"/opt/ml/{IN_ROOT}" if own_namespace else str(cache)


def remove_place(root: Path) -> None:
    """Remove the mount point or link `place` made in `root` (never the cache itself), so the
    job's folder keeps no way into the pool."""
    where = root / IN_ROOT
    if where.is_symlink():
        where.unlink()
    elif where.is_dir():
        with contextlib.suppress(OSError):  # an empty mount point only
            where.rmdir()
    with contextlib.suppress(OSError):
        where.parent.rmdir()


def remove(pool_folder: Path) -> None:
    """The pool ended: its hosts' caches go with it."""
    shutil.rmtree(pool_folder / FOLDER, ignore_errors=True)
