"""Bring the channels that platform.json names into `input/data/<channel>` (local mode only).

A channel is either a URI (`"s3://…"`, `"file://…"`: downloaded here, `S3Prefix` semantics) or
`{"staged": "/abs/folder"}`: the platform staged it once for the whole job as read-only files,
and this host hard-links them (same names, same tree), so every host sees the same bytes at the
cost of one copy. A host may delete or replace its own links; writing into a staged file fails
(for root too: the local backend starts such a host without CAP_DAC_OVERRIDE).
Under real SageMaker there is no platform.json and nothing here runs.
"""

from __future__ import annotations

import errno
import logging
import os
from collections.abc import Callable, Mapping
from pathlib import Path

from ddpjob_runtime.shared import fsutil, storage
from ddpjob_runtime.shared.errors import RuntimeContractError
from ddpjob_runtime.shared.platform_config import ChannelSource

log = logging.getLogger(__name__)


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

