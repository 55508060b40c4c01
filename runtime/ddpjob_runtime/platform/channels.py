"""Bring the channels that platform.json names into `input/data/<channel>` (local mode only).

A channel is either a URI (`"s3://…"`, `"file://…"`: downloaded here, `S3Prefix` semantics) or
`{"staged": "/abs/folder"}`: the platform staged it once for the whole job as read-only files,
and this host hard-links them (same names, same tree), so every host sees the same bytes at the
cost of one copy. A host may delete or replace its own links; writing into a staged file fails.
Under real SageMaker there is no platform.json and nothing here runs.
"""

from __future__ import annotations

import errno
import logging
import os
from collections.abc import Callable, Mapping
from pathlib import Path

from ddpjob_runtime.shared import fsutil, processes, storage
from ddpjob_runtime.shared.errors import RuntimeContractError
from ddpjob_runtime.shared.platform_config import ChannelSource

log = logging.getLogger(__name__)

# Root writes through a file's mode with it; without it a staged 0444 file is read-only for
# root too (the workers are started after the drop, so they never hold it).
_CAP_DAC_OVERRIDE = 1


def stage(channels: Mapping[str, ChannelSource], channel_dir: Callable[[str], Path]) -> None:
    """Bring each channel of platform.json's `channels` into `channel_dir(name)`."""
    for name, source in channels.items():
        dest = Path(channel_dir(name))
        if source.staged:
            log.info("linking channel %s from %s", name, source.location)
            link_tree(Path(source.location), dest)
        else:
            log.info("staging channel %s from %s", name, source.location)
            storage.download_prefix(source.location, dest)
    if any(source.staged for source in channels.values()) and os.geteuid() == 0:
        _keep_root_out()


def link_tree(src: Path, dest: Path) -> None:
    """Hard-link every file under `src` into `dest` (created; folders are this host's own)."""
    if not src.is_dir():
        raise RuntimeContractError(f"platform.json: staged channel folder {src} does not exist")
    for folder, _, files in os.walk(src):
        here = dest / Path(folder).relative_to(src)
        here.mkdir(parents=True, exist_ok=True)
        for name in files:
            target = here / name
            target.unlink(missing_ok=True)  # a restarted host links afresh
            link_or_copy(Path(folder) / name, target)


def link_or_copy(src: Path, dest: Path) -> None:
    """Hard-link `src` as `dest`; copy (read-only, as if linked) where a link is impossible
    (another file system)."""
    try:
        os.link(src, dest)
    except OSError as exc:
        if exc.errno not in (errno.EXDEV, errno.EPERM, errno.EMLINK):
            raise
        fsutil.copy_file(src, dest, mode=0o444)


def _keep_root_out() -> None:
    """Drop CAP_DAC_OVERRIDE from what this host's workers may hold: as root they would
    otherwise write through the staged files' read-only mode into every host's view. Best
    effort: without CAP_SETPCAP the mode alone protects the files (from non-root processes)."""
    try:
        processes.drop_bounding_capability(_CAP_DAC_OVERRIDE)
    except AttributeError:
        return  # no prctl: not Linux
    except OSError as exc:
        log.warning("running as root without CAP_SETPCAP: the staged channels are "
                    "read-only only for non-root processes (%s)", exc.strerror)
