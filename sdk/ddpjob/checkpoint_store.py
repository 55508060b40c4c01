"""The complete checkpoints under a `checkpoint_s3_uri` (s3:// or file://), listed or downloaded.

Layout (docs/contract.md), the URI always treated as a folder (`run-1` never lists `run-10`)::

    step-000000100/state.pt         the user's state
    step-000000100/manifest.json    written last: {"step", "time", "files": {name: {size, sha256}}}

A checkpoint is complete when its manifest exists and every file it lists has the listed size;
incomplete ones (an upload in progress or cut short) are ignored.
"""

from __future__ import annotations

import json
import logging
import os
import re
import shutil
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from ddpjob import storage
from ddpjob.errors import ObjectNotFoundError, StorageError, UserInputError

logger = logging.getLogger(__name__)

MANIFEST = "manifest.json"
_STEP_DIR = re.compile(r"^step-(\d{9,})$")


@dataclass(frozen=True)
class Checkpoint:
    """A complete checkpoint: its step, when it was written (epoch seconds) and its folder URI."""

    step: int
    time: float
    uri: str
    files: dict[str, dict] = field(default_factory=dict, repr=False, compare=False)


def step_dir_name(step: int) -> str:
    """`step-000000100` for step 100."""
    return f"step-{step:09d}"


def _manifest(folder_uri: str) -> dict | None:
    """The manifest of one checkpoint folder, None when it is unreadable (treated incomplete)."""
    try:
        manifest = json.loads(storage.read_bytes(storage.join(folder_uri, MANIFEST)))
        files = {str(name): dict(meta) for name, meta in manifest["files"].items()}
        for meta in files.values():
            int(meta["size"])
        return {"step": int(manifest["step"]), "time": float(manifest.get("time", 0)),
                "files": files}
    except ObjectNotFoundError:
        # Listed a moment ago, gone now: the job pruned it (manifest first) while we listed.
        logger.debug("ignoring checkpoint %s: removed while listing", folder_uri)
        return None
    except (ValueError, KeyError, TypeError, AttributeError) as exc:
        logger.warning("ignoring checkpoint %s: unreadable manifest (%s)", folder_uri, exc)
        return None


def list_checkpoints(uri: str) -> list[Checkpoint]:
    """Every complete checkpoint under the folder `uri`, oldest step first."""
    root = storage.as_folder(storage.parse(uri, argument="checkpoint_s3_uri").uri)
    sizes: dict[str, dict[str, int]] = {}
    for info in storage.list_objects(root):
        top, _, rest = info.key.partition("/")
        if _STEP_DIR.match(top) and rest:
            sizes.setdefault(top, {})[rest] = info.size
    found = []
    for folder, files in sorted(sizes.items()):
        if MANIFEST not in files:
            continue
        folder_uri = storage.join(root, folder)
        manifest = _manifest(folder_uri)
        if manifest is None:
            continue
        if any(files.get(name) != int(meta["size"]) for name, meta in manifest["files"].items()):
            logger.debug("ignoring incomplete checkpoint %s", folder_uri)
            continue
        step = int(_STEP_DIR.match(folder).group(1))
        found.append(Checkpoint(step, manifest["time"], storage.as_folder(folder_uri),
                                manifest["files"]))
    return sorted(found, key=lambda checkpoint: checkpoint.step)


def _choose(uri: str, checkpoints: list[Checkpoint], step: int | None) -> Checkpoint:
    if not checkpoints:
        raise UserInputError(f"no complete checkpoint under {uri}")
    if step is None:
        return checkpoints[-1]
    if isinstance(step, bool) or not isinstance(step, int) or step < 0:
        raise UserInputError(f"step must be an integer >= 0 or None (the latest), got {step!r}")
    for checkpoint in checkpoints:
        if checkpoint.step == step:
            return checkpoint
    steps = ", ".join(str(c.step) for c in checkpoints)
    raise UserInputError(f"no complete checkpoint of step {step} under {uri}; complete steps: "
                         f"{steps}")


def download_checkpoint(uri: str, local_dir: str | os.PathLike, step: int | None = None) -> Path:
    """Download a complete checkpoint (the latest when `step` is None) into `local_dir`.

    Returns the checkpoint's folder, `<local_dir>/step-000000100`, which appears whole (files
    checked against the manifest's sizes and sha256) or not at all.
    """
    if step is not None and (isinstance(step, bool) or not isinstance(step, int) or step < 0):
        raise UserInputError(f"step must be an integer >= 0 or None (the latest), got {step!r}")
    checkpoint = _choose(uri, list_checkpoints(uri), step)
    target_root = Path(local_dir).expanduser()
    target_root.mkdir(parents=True, exist_ok=True)
    target = target_root / step_dir_name(checkpoint.step)
    partial = Path(tempfile.mkdtemp(dir=target_root, prefix=f".{target.name}.partial-"))
    try:
        storage.download_prefix(checkpoint.uri, partial, keys=[*checkpoint.files, MANIFEST])
        for name, meta in checkpoint.files.items():
            path = partial / name
            if path.stat().st_size != int(meta["size"]) or (
                meta.get("sha256") and storage.sha256_file(path) != meta["sha256"]
            ):
                raise StorageError(f"download of {checkpoint.uri}{name} failed: the file does "
                                   f"not match its manifest (changed while downloading?)")
        if target.exists():
            shutil.rmtree(target)
        os.replace(partial, target)
    finally:
        shutil.rmtree(partial, ignore_errors=True)
    logger.info("downloaded checkpoint %s to %s", checkpoint.uri, target)
    return target
