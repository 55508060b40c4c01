"""The cache of `s3://` objects that local jobs share: `<home>/cache/`.

    entries/<hh>/<hash>        complete objects, read-only (0444); jobs hard-link them
    records/<hh>/<hash>        the entry's size, mtime and inode as downloaded; its mtime: last use
    locks/<hh>/<hash>.lock     held (fcntl) by the one process downloading that entry
    tmp/<hash>.<id>.part*      downloads in progress, renamed into entries/ once complete

`<hash>` is the sha256 of (bucket, key, size, ETag) from the listing, so a changed object is a
new entry. An entry exists only once it is complete: a killed download leaves a `.part` file
that nothing trusts (eviction removes it once no process holds its lock).

An entry is reused only while it is as downloaded: same size, mtime and inode as its record,
mode still 0444. Jobs share its inode (hard links), so a rank that `chmod`s its staged file and
writes it changes the entry; that changes the mode or the mtime, and the next fetch downloads
the object again (into a new inode: the job that wrote keeps its own bytes). The ctime cannot
serve: every job's hard link changes it. An entry whose link count is above 1 is linked into a
job's staged channel: in use, never evicted. Least recently used entries (by their record's
mtime, touched on every use) go first when the cache is over its limit (`DDPJOB_CACHE_MAX_GB`,
default 20).
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import logging
import os
import stat
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO

from ddpjob_runtime.shared import fsutil, storage
from ddpjob_runtime.shared.storage import Listing, ObjectInfo

from ddpjob.errors import UserInputError

log = logging.getLogger(__name__)

MAX_GB_ENV = "DDPJOB_CACHE_MAX_GB"
DEFAULT_MAX_GB = 20.0
READ_ONLY = 0o444
# Locks held at once while filling the cache (one open file each: stay far below `ulimit -n`).
BATCH = 256


def max_bytes() -> int:
    """The cache's size limit: `$DDPJOB_CACHE_MAX_GB` (a number >= 0), else 20 GB."""
    text = os.environ.get(MAX_GB_ENV) or str(DEFAULT_MAX_GB)
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not value >= 0:
        raise UserInputError(f"{MAX_GB_ENV} must be a number of GB >= 0, got {text!r}")
    return int(value * 1e9)


@dataclass(frozen=True)
class Fetched:
    """Where each listed object is in the cache, and how many had to be downloaded."""

    paths: list[Path]
    downloaded: int
    downloaded_bytes: int


@dataclass(frozen=True)
class CacheInfo:
    """What `ddpjob cache info` shows."""

    root: Path
    entries: int
    size: int
    in_use: int
    in_use_size: int
    max_size: int


class DataCache:
    """The object cache under `root` (`<home>/cache`)."""

    def __init__(self, root: Path):
        self.root = Path(root)
        self.entries, self.records, self.locks, self.tmp = (
            self.root / n for n in ("entries", "records", "locks", "tmp"))

    def _name(self, folder: str, obj: ObjectInfo) -> str:
        """The entry name of `obj`, listed under the folder URI `folder`."""
        where = storage.parse(folder)
        text = "\0".join((where.bucket, where.key + obj.key, str(obj.size), obj.etag or ""))
        return hashlib.sha256(text.encode()).hexdigest()

    def _entry(self, name: str) -> Path:
        return self.entries / name[:2] / name

    def _record(self, name: str) -> Path:
        return self.records / name[:2] / name

    def fetch(self, listing: Listing) -> Fetched:
        """The entry of every object of an S3 `listing`, downloading each missing one exactly
        once across processes (another process's download in progress is waited for)."""
        names = [self._name(listing.folder, o) for o in listing.objects]
        missing = [(o, n) for o, n in zip(listing.objects, names, strict=True)
                   if not self._trusted(o, n)]
        done: list[tuple[ObjectInfo, str]] = []
        for i in range(0, len(missing), BATCH):
            done += self._fill(listing.folder, missing[i:i + BATCH])
        for name in names:
            with contextlib.suppress(FileNotFoundError):
                os.utime(self._record(name))  # most recently used
        return Fetched([self._entry(n) for n in names], len(done), sum(o.size for o, _ in done))

    def _trusted(self, obj: ObjectInfo, name: str) -> bool:
        """Whether the entry of `obj` is complete and unchanged since it was downloaded."""
        try:
            st = self._entry(name).stat()
            recorded = self._record(name).read_text()
        except (FileNotFoundError, NotADirectoryError):
            return False
        return (st.st_size == obj.size and stat.S_IMODE(st.st_mode) == READ_ONLY
                and recorded == _fingerprint(st))

    def _fill(self, folder: str,
              batch: list[tuple[ObjectInfo, str]]) -> list[tuple[ObjectInfo, str]]:
        """Download the entries of `batch` this process gets the lock of; then wait for the ones
        another process is downloading (and download them if it died). What it downloaded."""
        mine, theirs = [], []
        with contextlib.ExitStack() as held:
            for obj, name in batch:
                if not _try_lock(held.enter_context(self._open_lock(name))):
                    theirs.append((obj, name))
                elif not self._trusted(obj, name):  # it may have arrived since we looked
                    mine.append((obj, name))
            self._download(folder, mine)
        # Our locks are released before we wait on theirs: two jobs never wait on each other.
        for obj, name in theirs:
            with self._open_lock(name) as f:
                fcntl.flock(f, fcntl.LOCK_EX)  # until the other process is done (or dead)
                if not self._trusted(obj, name):
                    self._download(folder, [(obj, name)])
                    mine.append((obj, name))
        return mine

    def _open_lock(self, name: str) -> IO[str]:
        lock = self.locks / name[:2] / f"{name}.lock"
        lock.parent.mkdir(parents=True, exist_ok=True)
        return open(lock, "a")

    def _download(self, folder: str, items: list[tuple[ObjectInfo, str]]) -> None:
        """Download to temp names, then rename each complete file into place (read-only).
        Not `fsutil.atomic_open`: s3transfer writes the files itself, and a temp name must
        start with the entry's name, for `_remove_abandoned` to find its lock."""
        if not items:
            return
        self.tmp.mkdir(parents=True, exist_ok=True)
        temps = [self.tmp / f"{name}.{uuid.uuid4().hex[:8]}.part" for _, name in items]
        try:
            pairs = [(obj, temp) for (obj, _), temp in zip(items, temps, strict=True)]
            storage.download_objects(folder, pairs)
            for (_, name), temp in zip(items, temps, strict=True):
                os.chmod(temp, READ_ONLY)
                self._entry(name).parent.mkdir(parents=True, exist_ok=True)
                os.replace(temp, self._entry(name))
                fsutil.write_text(self._record(name), _fingerprint(self._entry(name).stat()))
        finally:
            for temp in temps:
                temp.unlink(missing_ok=True)

    # --- size -----------------------------------------------------------------------------

    def _scan(self) -> Iterator[tuple[Path, os.stat_result]]:
        if not self.entries.is_dir():
            return
        for group in os.scandir(self.entries):
            for entry in os.scandir(group.path):
                with contextlib.suppress(FileNotFoundError):
                    yield Path(entry.path), entry.stat()

    def info(self) -> CacheInfo:
        stats = [st for _, st in self._scan()]
        used = [st for st in stats if st.st_nlink > 1]
        return CacheInfo(self.root, len(stats), sum(st.st_size for st in stats), len(used),
                         sum(st.st_size for st in used), max_bytes())

    def _last_used(self, entry: Path) -> float:
        """When `entry` was last fetched (0 for one without a record: never trusted)."""
        try:
            return self._record(entry.name).stat().st_mtime
        except FileNotFoundError:
            return 0.0

    def evict(self, limit: int) -> int:
        """Remove least recently used entries not in use until at most `limit` bytes remain
        (entries in use stay, even above the limit); also abandoned downloads. Bytes freed."""
        self._remove_abandoned()
        found = sorted(self._scan(), key=lambda item: self._last_used(item[0]))
        total, freed = sum(st.st_size for _, st in found), 0
        for path, st in found:
            if total - freed <= limit:
                break
            if st.st_nlink > 1 or not self._remove_unused(path):
                continue
            freed += st.st_size
        if freed:
            log.info("cache: evicted %s (limit %s)", human_bytes(freed), human_bytes(limit))
        return freed

    def _remove_unused(self, path: Path) -> bool:
        """Remove entry `path` unless it is being written or linked (checked under its lock)."""
        with self._open_lock(path.name) as f:
            if not _try_lock(f):
                return False
            with contextlib.suppress(FileNotFoundError):
                if path.stat().st_nlink == 1:
                    path.unlink()
                    self._record(path.name).unlink(missing_ok=True)
                    return True
        return False

    def _remove_abandoned(self) -> None:
        """`.part` files whose writer is gone (nobody holds the entry's lock)."""
        if not self.tmp.is_dir():
            return
        for part in self.tmp.glob("*.part*"):  # ours, and s3transfer's own temp names
            with self._open_lock(part.name.split(".", 1)[0]) as f:
                if _try_lock(f):
                    part.unlink(missing_ok=True)


def _try_lock(f: IO[str]) -> bool:
    """Take the exclusive lock of the open file `f` unless another process holds it."""
    try:
        fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return False
    return True


def _fingerprint(st: os.stat_result) -> str:
    """What a file's content is trusted by: size, mtime (ns) and inode."""
    return f"{st.st_size} {st.st_mtime_ns} {st.st_ino}"


def human_bytes(size: int) -> str:
    """`2.1 GB`, `340 MB`, `12 kB`, `5 B` (decimal units, as S3 consoles show)."""
    for unit, scale in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if size >= scale:
            return f"{size / scale:.1f} {unit}"
    return f"{size} B"
