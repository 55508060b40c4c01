"""What the platform does before a job's script starts: bring the newest intact checkpoint down.

SageMaker restores `checkpoint_s3_uri` into `/opt/ml/checkpoints` on every host before training;
the bootstrap, a local job's staging and a worker restart do it here, in the layout of
`checkpoint_layout`. Torch-free: the client's local backend calls it too.
"""

from __future__ import annotations

import logging
from pathlib import Path

from ddpjob_runtime.shared import storage
from ddpjob_runtime.shared.checkpoint_layout import (
    MANIFEST,
    CheckpointError,
    Manifest,
    corrupt_file,
    group_by_step,
    local_complete,
    parse_manifest,
    step_dir_name,
)

log = logging.getLogger(__name__)

CORRUPT = "skipping corrupt checkpoint %s (sha256 does not match its manifest); trying older ones"


def remote_listing(uri: str) -> dict[int, dict[str, int]]:
    """The files and sizes under checkpoint folder `uri`, by step."""
    return group_by_step((info.key, info.size) for info in storage.list_objects(uri))


def _remote_manifest(remote: str, sizes: dict[str, int]) -> Manifest | None:
    """The manifest of the remote checkpoint folder when it is complete and safe, else None."""
    try:
        manifest = parse_manifest(storage.read_bytes(storage.join(remote, MANIFEST)), remote)
    except CheckpointError as exc:
        log.warning("ignoring checkpoint %s: %s", remote, exc)
        return None
    if not manifest.is_complete(sizes):
        log.warning("skipping incomplete checkpoint %s", remote)
        return None
    return manifest


def restore_latest(uri: str, local_dir: Path) -> int | None:
    """Bring the latest complete checkpoint under `uri` down into `local_dir`; return its step.

    Called by the platform before the user's script starts (the bootstrap, a local DLC host's
    staging) and before a worker restart. `uri` is a folder (`run-1` never
    sees `run-10/`); a checkpoint counts when its manifest is there, names only files inside
    its folder, and every file it lists has the listed size. Files land before the manifest,
    so an interrupted restore looks incomplete. One whose sha256 does not match its manifest
    is left where it landed with a warning, and the next older one is brought down (for
    `load_latest` to fall back to). Returns None when `uri` holds no complete one.
    """
    local_dir = Path(local_dir)
    for step, sizes in reversed(remote_listing(uri).items()):
        if MANIFEST not in sizes:
            continue
        remote = storage.join(uri, step_dir_name(step))
        manifest = _remote_manifest(remote, sizes)
        if manifest is None:
            continue
        folder = local_dir / step_dir_name(step)
        if local_complete(folder) != manifest:  # else already here (a restart on this host)
            _download(remote, folder, manifest)
            log.info("restored checkpoint %s from %s", folder, uri)
        bad = corrupt_file(folder, manifest)
        if bad is None:
            return step
        log.warning(CORRUPT, bad)
    return None


def _download(remote: str, folder: Path, manifest: Manifest) -> None:
    """The files of checkpoint `remote`, then its manifest, into `folder`."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / MANIFEST).unlink(missing_ok=True)
    # As listed below `remote`: a link out of it, a pipe or a device there is never read.
    storage.download_prefix(remote, folder, keys=list(manifest.files))
    storage.download_file(storage.join(remote, MANIFEST), folder / MANIFEST)
    if local_complete(folder) is None:
        raise CheckpointError(f"{folder}: restored checkpoint does not match its manifest")
