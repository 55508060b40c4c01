"""The complete checkpoints under a `checkpoint_s3_uri` (s3:// or file://), listed or downloaded.

The layout is `ddpjob_runtime.shared.checkpoint_layout`'s, the URI always treated as a folder
(`run-1` never lists `run-10`); incomplete checkpoints (an upload in progress or cut short) and ones
whose manifest is unreadable or names files outside their folder are ignored.
"""

from __future__ import annotations

import logging
import os
import shutil
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from ddpjob_runtime.shared import storage
from ddpjob_runtime.shared.checkpoint_layout import (
    MANIFEST,
    CheckpointError,
    Manifest,
    corrupt_file,
    group_by_step,
    parse_manifest,
    step_dir_name,
)

from ddpjob.errors import ObjectNotFoundError, UserInputError

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class Checkpoint:
    """A complete checkpoint: its step, when it was written (epoch seconds) and its folder URI."""

    step: int
    time: float
    uri: str
    files: dict[str, dict] = field(default_factory=dict, repr=False, compare=False)


def _manifest(folder_uri: str) -> Manifest | None:
    """The manifest of one checkpoint folder, None when it is unreadable (treated incomplete)."""
    try:
        return parse_manifest(storage.read_bytes(storage.join(folder_uri, MANIFEST)), folder_uri)
    except ObjectNotFoundError:
        # Listed a moment ago, gone now: the job pruned it (manifest first) while we listed.
        logger.debug("ignoring checkpoint %s: removed while listing", folder_uri)
    except CheckpointError as exc:
        logger.warning("ignoring checkpoint %s: %s", folder_uri, exc)
    return None


def list_checkpoints(uri: str) -> list[Checkpoint]:
    """Every complete checkpoint under the folder `uri`, oldest step first."""
    root = storage.as_folder(storage.parse(uri, argument="checkpoint_s3_uri").uri)
    listing = group_by_step((info.key, info.size) for info in storage.list_objects(root))
    found = []
    for step, sizes in listing.items():
        folder_uri = storage.join(root, step_dir_name(step))
        manifest = _manifest(folder_uri) if MANIFEST in sizes else None
        if manifest is None or not manifest.is_complete(sizes):
            logger.debug("ignoring incomplete checkpoint %s", folder_uri)
            continue
        found.append(Checkpoint(step, manifest.time, storage.as_folder(folder_uri),
                                manifest.files))
    return found
def _choose(uri: str, checkpoints: list[Checkpoint], step: int | None) -> list[Checkpoint]:
    """The checkpoint of `step`; for None (the latest) every one, newest first, to fall back."""
    if not checkpoints:
        raise UserInputError(f"no complete checkpoint under {uri}")
    if step is None:
        return checkpoints[::-1]
    for checkpoint in checkpoints:
        if checkpoint.step == step:
            return [checkpoint]
    steps = ", ".join(str(c.step) for c in checkpoints)
    raise UserInputError(f"no complete checkpoint of step {step} under {uri}; complete steps: "
                         f"{steps}")


def download_checkpoint(uri: str, local_dir: str | os.PathLike, step: int | None = None,
                        found: list[Checkpoint] | None = None) -> Path:
    """Download a complete checkpoint (the latest when `step` is None) into `local_dir`, one of
    `found` (default: every complete checkpoint under `uri`, which the errors name).

    Returns the checkpoint's folder, `<local_dir>/step-000000100`, which appears whole (files
    checked against the manifest's sizes and sha256) or not at all. For the latest, one that
    does not match its manifest is named in a warning and the next older one is tried.
    """
    if step is not None and (isinstance(step, bool) or not isinstance(step, int) or step < 0):
        raise UserInputError(f"step must be an integer >= 0 or None (the latest), got {step!r}")
    target_root = Path(local_dir).expanduser()
    target_root.mkdir(parents=True, exist_ok=True)
    candidates = _choose(uri, list_checkpoints(uri) if found is None else found, step)
    for checkpoint in candidates[:-1]:
        try:
            return _download(checkpoint, target_root)
        except CheckpointError as exc:
            logger.warning("%s; downloading the one before", exc)
    return _download(candidates[-1], target_root)


def _download(checkpoint: Checkpoint, target_root: Path) -> Path:
    """`checkpoint` into `target_root`, whole and verified, or CheckpointError."""
    target = target_root / step_dir_name(checkpoint.step)
    partial = Path(tempfile.mkdtemp(dir=target_root, prefix=f".{target.name}.partial-"))
    try:
        storage.download_prefix(checkpoint.uri, partial, keys=[*checkpoint.files, MANIFEST],
                                progress=True)
        corrupt = corrupt_file(partial, Manifest(checkpoint.step, checkpoint.time,
                                                 checkpoint.files))
        if corrupt is not None:
            raise CheckpointError(f"{checkpoint.uri}: {corrupt.relative_to(partial)} does not "
                                  f"match its manifest (corrupt, or changed while downloading)")
        if target.exists():
            shutil.rmtree(target)
        os.replace(partial, target)
    finally:
        shutil.rmtree(partial, ignore_errors=True)
    logger.info("downloaded checkpoint %s to %s", checkpoint.uri, target)
    return target
