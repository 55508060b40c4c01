"""Rank-0 checkpoints, written atomically and shipped to `checkpoint_s3_uri` in the background.

Inside `train.py`::

    from ddpjob_runtime import checkpoints

    state = checkpoints.load_latest()            # every rank; None on a fresh start
    ...
    checkpoints.save({"model": model.module.state_dict(), "step": step}, step=step)

The layout (`checkpoint_layout`, docs/contract.md) is kept locally under `DDPJOB_CHECKPOINT_DIR`
and mirrored under `DDPJOB_CHECKPOINT_URI`.
"""

from __future__ import annotations

import functools
import hashlib
import logging
import os
import shutil
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ddpjob_runtime.platform import environment
from ddpjob_runtime.platform.checkpoint_restore import CORRUPT, remote_listing
from ddpjob_runtime.shared import contract, fsutil, storage
from ddpjob_runtime.shared.checkpoint_layout import (
    MANIFEST,
    STATE,
    CheckpointError,
    Manifest,
    corrupt_file,
    file_path,
    local_complete,
    read_manifest,
    step_dir_name,
    steps,
    write_manifest,
)
from ddpjob_runtime.shared.errors import StorageError

if TYPE_CHECKING:  # pragma: no cover
    from torch.serialization import MAP_LOCATION

log = logging.getLogger(__name__)

DEFAULT_KEEP = 3


def checkpoint_dir() -> Path:
    """The local checkpoint folder: DDPJOB_CHECKPOINT_DIR (set by ddpjob's runtime), else the
    folder SageMaker syncs with CheckpointConfig.S3Uri: checkpointconfig.json's LocalPath, else
    <job root>/checkpoints. On SageMaker's own PyTorch container there is no ddpjob runtime and
    no DDPJOB_CHECKPOINT_URI: SageMaker uploads what lands there and brings it back down."""
    if os.environ.get(contract.ENV_CHECKPOINT_DIR):
        return Path(os.environ[contract.ENV_CHECKPOINT_DIR])
    root = environment.job_root()
    config = environment.read_config(root, contract.CHECKPOINT_CONFIG_FILE)
    return environment.checkpoint_local_dir(root, config)


# ---------------------------------------------------------------- reading


def complete_steps(local_dir: Path | None = None) -> list[int]:
    """Steps of the complete checkpoints in the local folder, oldest first."""
    root = Path(local_dir) if local_dir is not None else checkpoint_dir()
    if not root.is_dir():
        return []
    names = [p.name for p in root.iterdir() if p.is_dir()]
    return [s for s in steps(names) if local_complete(root / step_dir_name(s)) is not None]


def load_latest(map_location: MAP_LOCATION = None, weights_only: bool = True) -> Any | None:
    """The state of the latest complete checkpoint in the local folder, or None when there is none.

    Every rank calls it; the runtime brought the latest checkpoint down from
    `checkpoint_s3_uri` before the script started. The files are checked against the manifest
    (size and sha256): a corrupt checkpoint is never loaded; the newest one that verifies is,
    with a warning naming each newer corrupt one (a spot restart resumes instead of failing
    forever). CheckpointError when none verifies, or when torch cannot load the state (the
    path named). Loaded with `torch.load(weights_only=weights_only)`.
    """
    import torch

    root = checkpoint_dir()
    found = complete_steps(root)
    if not found:
        return None
    folder = _newest_intact(root, found)
    path = folder / STATE
    try:
        state = torch.load(path, map_location=map_location, weights_only=weights_only)
    except Exception as exc:  # torch raises many kinds for a bad file; name the path once
        raise CheckpointError(f"{path}: unreadable checkpoint ({type(exc).__name__}: "
                              f"{str(exc).splitlines()[0] if str(exc) else ''})") from exc
    log.info("loaded checkpoint %s", folder)
    return state


def _newest_intact(root: Path, found: list[int]) -> Path:
    """The folder of the newest of the complete checkpoints `found` whose files match their
    manifest; CheckpointError naming every corrupt one when none does."""
    corrupt = []
    for step in reversed(found):
        folder = root / step_dir_name(step)
        bad = corrupt_file(folder, local_complete(folder))
        if bad is None:
            return folder
        log.warning(CORRUPT, bad)
        corrupt.append(str(bad))
    raise CheckpointError(f"no checkpoint verifies: {', '.join(corrupt)} (sha256 does not "
                          f"match the manifest)")


# ---------------------------------------------------------------- writing (rank 0)


def _snapshot(obj: Any, reuse: Any = None) -> Any:
    """A copy of `obj` that training cannot change: tensors copied to CPU, containers rebuilt.

    `reuse` is the previous, already written snapshot: its CPU tensors of the same shape and
    dtype are overwritten in place, which spares the page faults of fresh 100s of MB.
    """
    import copy

    import torch

    if isinstance(obj, torch.Tensor):
        obj = obj.detach()
        if (isinstance(reuse, torch.Tensor) and reuse.shape == obj.shape
                and reuse.dtype == obj.dtype and reuse.is_contiguous() and obj.is_contiguous()
                and type(reuse) is torch.Tensor and obj.layout == torch.strided):
            return reuse.copy_(obj)
        return obj.clone() if obj.device.type == "cpu" else obj.to("cpu")
    if isinstance(obj, dict):
        old = reuse if isinstance(reuse, dict) else {}
        out = type(obj)((k, _snapshot(v, old.get(k))) for k, v in obj.items())
        if getattr(obj, "__dict__", None):  # state_dict()'s `_metadata` (versions of modules)
            out.__dict__.update(copy.deepcopy(obj.__dict__))
        return out
    if isinstance(obj, (list, tuple)):
        same = isinstance(reuse, (list, tuple)) and len(reuse) == len(obj)
        old = reuse if same else [None] * len(obj)
        items = [_snapshot(v, r) for v, r in zip(obj, old, strict=True)]
        if isinstance(obj, list):
            return items
        return type(obj)(*items) if hasattr(obj, "_fields") else type(obj)(items)
    return copy.deepcopy(obj)


class _HashingWriter:
    """A file object that hashes what passes through it (one pass over the data)."""

    def __init__(self, f):
        self._f = f
        self.digest = hashlib.sha256()

    def write(self, data) -> int:
        self.digest.update(data)
        return self._f.write(data)

    def flush(self) -> None:
        self._f.flush()


def _write_local(state: object, step: int, root: Path) -> Path:
    """torch.save into a temp file, fsync, rename into step-N/state.pt, manifest last."""
    import torch

    folder = root / step_dir_name(step)
    folder.mkdir(parents=True, exist_ok=True)
    (folder / MANIFEST).unlink(missing_ok=True)  # re-saving a step: incomplete until done
    with fsutil.atomic_open(folder / STATE, mode=0o600, fsync=True) as f:
        writer = _HashingWriter(f)
        torch.save(state, writer)
    size = (folder / STATE).stat().st_size
    write_manifest(folder, Manifest(step, files={STATE: {"size": size,
                                                         "sha256": writer.digest.hexdigest()}}))
    return folder


def _upload(folder: Path, uri: str) -> None:
    """Upload a checkpoint folder: the files its manifest lists first, the manifest last."""
    target = storage.join(uri, folder.name)
    storage.delete(storage.join(target, MANIFEST))  # a re-saved step is incomplete until done
    for name in read_manifest(folder).files:
        storage.upload_file(file_path(folder, name), storage.join(target, name))
    storage.upload_file(folder / MANIFEST, storage.join(target, MANIFEST))


def upload_if_missing(folder: Path, uri: str) -> None:
    """Upload the complete local checkpoint `folder` unless `uri` already holds it complete.

    Used before a worker restart: rank 0 may have been stopped while uploading it.
    """
    manifest = local_complete(folder)
    if manifest is None:
        raise CheckpointError(f"{folder}: not a complete checkpoint")
    remote = remote_listing(uri).get(manifest.step, {})
    if MANIFEST in remote and manifest.is_complete(remote):
        return
    log.info("uploading checkpoint %s to %s (its upload was interrupted)", folder, uri)
    _upload(folder, uri)


def _older(found: list[int], complete: list[int], keep: int) -> list[int]:
    """Steps of `found` older than the newest `keep` complete ones (a newer leftover stays)."""
    kept = set(complete[-keep:])
    return [step for step in found if kept and step not in kept and step < max(kept)]


def _prune_local(root: Path, keep: int) -> None:
    for step in _older(steps([p.name for p in root.iterdir() if p.is_dir()]),
                       complete_steps(root), keep):
        shutil.rmtree(root / step_dir_name(step), ignore_errors=True)


def _prune_remote(uri: str, keep: int) -> None:
    listing = remote_listing(uri)
    for step in _older(list(listing), [s for s, sizes in listing.items() if MANIFEST in sizes],
                       keep):
        prefix = storage.join(uri, step_dir_name(step))
        storage.delete(storage.join(prefix, MANIFEST))  # incomplete first, then the rest
        storage.delete_prefix(prefix)


class _Shipper:
    """One background writer per process: at most one snapshot in flight."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self._error: BaseException | None = None
        self.last_snapshot: Any = None  # reused by the next save once written

    def wait(self) -> None:
        thread = self._thread
        if thread is not None:
            thread.join()

    def busy(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def raise_pending(self) -> None:
        error, self._error = self._error, None
        if error is not None:
            if isinstance(error, StorageError):
                raise error
            message = f"checkpoint write failed: {type(error).__name__}: {error}"
            raise StorageError(message) from error

    def start(self, state: object, step: int, root: Path, uri: str | None, keep: int) -> None:
        def work() -> None:
            try:
                start = time.monotonic()
                folder = _write_local(state, step, root)
                _prune_local(root, keep)
                if uri:
                    _upload(folder, uri)
                    _prune_remote(uri, keep)
                log.info("checkpoint %s written%s in %.2fs", folder,
                         f" and uploaded to {uri}" if uri else "", time.monotonic() - start)
            except BaseException as exc:  # kept for flush()/the next save(); never lost
                log.error("checkpoint step %d failed: %s", step, exc)
                self._error = exc

        # Non-daemon: the interpreter waits for an unfinished upload before it exits.
        self._thread = threading.Thread(target=work, name=f"ddpjob-checkpoint-{step}")
        self._thread.start()


_shipper = _Shipper()


def save(state: object, step: int | None = None, *, keep: int = DEFAULT_KEEP,
         block: bool = True) -> bool:
    """Checkpoint `state` (any torch.save-able object); only global rank 0 writes.

    Other ranks return False at once. On rank 0 the training loop waits only for an in-memory
    snapshot (tensors copied to CPU); writing `step-N/state.pt` atomically, the manifest, the
    upload to `DDPJOB_CHECKPOINT_URI` (when set) and pruning happen in a background thread.

    At most one snapshot is in flight: a save while the previous one is still writing or
    uploading WAITS for it (block=True), or returns False without saving (block=False). The
    last snapshot stays in memory and the next save copies into it (one state's worth of CPU
    memory in all).
    `step` defaults to one past the latest step; `keep` (default 3) newest complete checkpoints
    are kept locally and remotely, and the newest complete one is never deleted. Raises
    StorageError when the previous background write or upload failed. Returns True once the
    snapshot is taken.
    """
    if int(os.environ.get("RANK") or 0) != 0:  # torchrun's global rank
        return False
    if keep < 1:
        raise ValueError(f"keep must be >= 1, got {keep}")
    with _shipper._lock:
        if _shipper.busy() and not block:
            return False
        _shipper.wait()
        _shipper.raise_pending()
        root = checkpoint_dir()
        if step is None:  # the previous save is done, so its folder is there
            known = steps([p.name for p in root.iterdir()]) if root.is_dir() else []
            step = max(known, default=-1) + 1
        if step < 0:
            raise ValueError(f"step must be >= 0, got {step}")
        snapshot = _snapshot(state, _shipper.last_snapshot)
        _shipper.last_snapshot = snapshot
        uri = os.environ.get(contract.ENV_CHECKPOINT_URI) or None
        if uri is None:
            _say_kept_on_this_host(root)
        _shipper.start(snapshot, int(step), root, uri, keep)
    return True


@functools.cache  # said once per folder: every save would repeat it
def _say_kept_on_this_host(root: Path) -> None:
    log.warning("checkpoints are kept in %s only: this job has no checkpoint_s3_uri, so none "
                "outlives the job (give the estimator checkpoint_s3_uri to resume from them)",
                root)


def flush() -> None:
    """Wait for the checkpoint in flight (write and upload); StorageError if it failed.

    The runtime calls it after the user's script ends, so a failed upload fails the job.
    """
    _shipper.wait()
    _shipper.raise_pending()
