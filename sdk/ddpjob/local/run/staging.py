"""Stage a local job's input channels once per job, for every simulated host to link.

The supervisor calls `stage_channels` before the hosts start: each channel is brought into
`<job dir>/channels/<channel>/` (for `ShardedByS3Key`: host i of n gets every n-th object, in
`.../<channel>/<host>/`) as read-only (0444) files: `s3://` objects hard-linked from the
shared cache (`datacache`), `file://` files copied. Each host's runtime then hard-links that
folder into its own `input/data/<channel>` (platform.json: `{"channels": {name: {"staged":
folder}}}`), so a job costs one copy of its data whatever its host count. `release` removes
the staged copies when the job ends (the cache keeps the objects) and trims the cache.
"""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
import time
from collections.abc import Iterator
from pathlib import Path

from ddpjob_runtime.platform import checkpoint_restore
from ddpjob_runtime.platform.channels import link_or_copy
from ddpjob_runtime.shared import contract, fsutil, storage
from ddpjob_runtime.shared.errors import StorageError, UnsafePathError
from ddpjob_runtime.shared.platform_config import ChannelSource
from ddpjob_runtime.shared.storage import Listing

from ddpjob.local.base.admitted import AdmittedJob, Channel
from ddpjob.local.run.datacache import READ_ONLY, DataCache, Fetched, human_bytes, max_bytes

log = logging.getLogger(__name__)

CHANNELS = "channels"
CHECKPOINT = "checkpoint"  # the latest checkpoint, restored once for all hosts
SHARDED = "ShardedByS3Key"


def cache_of(home: Path) -> DataCache:
    return DataCache(Path(home) / "cache")


def stage_job(home: Path, job_dir: Path, job: AdmittedJob) -> dict[str, dict[str, object]]:
    """Stage the job's channels, its `s3://` source archive and its latest checkpoint once for
    all hosts; `{host: what to add to its platform.json}` (see docs/contract.md): each
    channel's `ChannelSource`, staged."""
    staged = stage_channels(home, job_dir, job)
    shared: dict[str, object] = {}
    source = job.submit_directory
    if source is not None and storage.is_s3(source):
        shared[contract.PLATFORM_SUBMIT_DIRECTORY] = str(storage.download_file(
            source, Path(job_dir) / "source" / contract.SOURCE_ARCHIVE))
    checkpoint = stage_checkpoint(job_dir, job)
    if checkpoint is not None:
        shared[contract.PLATFORM_STAGED_CHECKPOINT] = str(checkpoint)
    return {host: {contract.PLATFORM_CHANNELS: {
        n: ChannelSource(str(f), staged=True).to_json() for n, f in staged[host].items()},
        **shared} for host in job.hosts}


def stage_checkpoint(job_dir: Path, job: AdmittedJob) -> Path | None:
    """Bring the latest complete checkpoint under `CheckpointConfig.S3Uri` into the job's
    staged folder (again before a job retry: the hosts then resume from the newest one);
    the folder, or None without a CheckpointConfig."""
    if job.checkpoint is None:
        return None
    checkpoint_uri = job.checkpoint.s3_uri

    folder = Path(job_dir) / CHECKPOINT
    step = checkpoint_restore.restore_latest(checkpoint_uri, folder)
    log.info("checkpoint: %s", f"step {step}, staged once" if step is not None else "none")
    folder.mkdir(parents=True, exist_ok=True)
    for path in folder.rglob("*"):
        if path.is_file():
            os.chmod(path, READ_ONLY)
    return folder


def stage_channels(home: Path, job_dir: Path, job: AdmittedJob) -> dict[str, dict[str, str]]:
    """Stage every channel of `job` once; `{host: {channel: its staged folder}}`.

    A StorageError names the channel and the URI that could not be staged.
    """
    cache = cache_of(home)
    hosts = list(job.hosts)
    staged: dict[str, dict[str, str]] = {host: {} for host in hosts}
    with _logged_to(Path(job_dir) / "logs" / f"{hosts[0]}.log"):
        for channel in job.channels:
            _stage_channel(cache, Path(job_dir), channel, hosts, staged)
    return staged


@contextlib.contextmanager
def _logged_to(path: Path) -> Iterator[None]:
    """Also write this module's log lines into the first host's log, where fit() shows them."""
    path.parent.mkdir(parents=True, exist_ok=True)
    handler = logging.FileHandler(path)
    handler.setFormatter(logging.Formatter("%(asctime)s %(name)s %(levelname)s %(message)s"))
    log.addHandler(handler)
    previous = log.level
    log.setLevel(logging.INFO)
    try:
        yield
    finally:
        log.removeHandler(handler)
        log.setLevel(previous)
        handler.close()


def _stage_channel(cache: DataCache, job_dir: Path, channel: Channel, hosts: list[str],
                   staged: dict[str, dict[str, str]]) -> None:
    """Stage one channel; record each host's folder of it in `staged`."""
    name = channel.name
    folder = job_dir / CHANNELS / name
    # ShardedByS3Key: host i of n gets every n-th object (SageMaker gives each about 1/n).
    sharded = channel.distribution == SHARDED
    folders = [folder / host for host in hosts] if sharded else [folder] * len(hosts)
    try:
        _stage_one(cache, name, channel.uri, folders[:len(hosts) if sharded else 1])
    except (StorageError, UnsafePathError) as exc:
        raise StorageError(f"channel {name!r}: {exc}") from exc
    for host, host_folder in zip(hosts, folders, strict=True):
        staged[host][name] = str(host_folder)


def _stage_one(cache: DataCache, name: str, uri: str, folders: list[Path]) -> None:
    """Bring the objects of `uri` into `folders`, object i into folders[i % len(folders)]."""
    start = time.monotonic()
    listing = storage.list_prefix(uri)
    objects = listing.objects
    targets = [fsutil.contained(folders[i % len(folders)], o.key, what="object key")
               for i, o in enumerate(objects)]
    total = human_bytes(sum(o.size for o in objects))
    if storage.is_s3(uri):
        fetched = _link_cached(cache, listing, targets)
        how = ("all cached" if not fetched.downloaded else
               f"{fetched.downloaded:,} downloaded ({human_bytes(fetched.downloaded_bytes)}), "
               f"{len(objects) - fetched.downloaded:,} cached")
    else:
        storage.download_objects(listing.folder, list(zip(objects, targets, strict=True)))
        for target in targets:
            os.chmod(target, READ_ONLY)
        how = "copied"
    for folder in folders:
        folder.mkdir(parents=True, exist_ok=True)
    log.info("%s: %s objects, %s, %s (%.2f s)", name, f"{len(objects):,}", total, how,
             time.monotonic() - start)


def _link_cached(cache: DataCache, listing: Listing, targets: list[Path]) -> Fetched:
    """Link each object's cache entry to its target; an entry evicted meanwhile is fetched
    again (eviction never removes a linked entry, but may win the race before our link)."""
    fetched = cache.fetch(listing)
    pending = list(zip(listing.objects, fetched.paths, targets, strict=True))
    for attempt in range(2):
        missed = []
        for obj, entry, target in pending:
            target.parent.mkdir(parents=True, exist_ok=True)
            try:
                link_or_copy(entry, target)
            except FileNotFoundError:
                if attempt:
                    raise
                missed.append((obj, target))
        if not missed:
            break
        again = cache.fetch(Listing(listing.folder, [o for o, _ in missed]))
        pending = [(o, e, t) for (o, t), e in zip(missed, again.paths, strict=True)]
    return fetched


def release(home: Path, job_dir: Path, hosts: list[str]) -> None:
    """Remove what the job staged (and its hosts' channel links), then trim the cache."""
    for staged in (CHANNELS, CHECKPOINT, "source"):
        shutil.rmtree(Path(job_dir) / staged, ignore_errors=True)
    for host in hosts:
        shutil.rmtree(Path(job_dir) / "hosts" / host / contract.DATA_DIR, ignore_errors=True)
    cache = cache_of(home)
    if cache.entries.is_dir():
        cache.evict(max_bytes())
