"""Small file-system helpers shared by the client and the runtime (torch-free, stdlib only).

Atomic writes (a reader in another process sees the old file or the whole new one), sha256 of a
file, and `contained`: the one check that a name read from a caller or from storage stays inside
its folder, and `container_path`: the check of a folder named for a job's container.
`open_untrusted_folder`, `open_untrusted` and `read_untrusted` open what a job's code could have
replaced (files under a host's root): never through a link, never blocking on a FIFO, regular
files only, read up to a bound.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import hashlib
import json
import os
import shutil
import stat
import tempfile
from collections.abc import Iterator
from pathlib import Path, PurePosixPath
from typing import IO

from ddpjob_runtime.shared.contract import DEFAULT_ROOT
from ddpjob_runtime.shared.errors import UnsafePathError

TMP_SUFFIX = ".tmp"  # temp files of atomic writes end so; listings skip them
_CHUNK = 8 * 1024 * 1024
# How what a job's code may have replaced is opened: a link is refused, not followed; a FIFO
# or device does not block the open (nor becomes a controlling terminal).
_UNTRUSTED = os.O_NOFOLLOW | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC
# Bytes of the target's name kept in a temp file's name: with the dot, mkstemp's 8 random
# characters and the suffix, a temp name stays within NAME_MAX (255) whatever the target's.
_TMP_NAME_BYTES = 200

#: A file to read: its path, or a binary file already open (read from where it stands).
Readable = str | os.PathLike | IO[bytes]


@contextlib.contextmanager
def atomic_open(path: str | os.PathLike, *, mode: int = 0o644,
                fsync: bool = False) -> Iterator[IO[bytes]]:
    """A temp file beside `path`, renamed onto `path` when the block ends without an error.

    `mode` is the file's permission bits (0o600 for private files), less the process's umask as
    for any new file (a local job's umask 077 keeps everything it writes private); `fsync`
    makes the data and the rename durable before returning (checkpoints).
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    short = os.fsdecode(os.fsencode(path.name)[:_TMP_NAME_BYTES])
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{short}.", suffix=TMP_SUFFIX)
    try:
        with contextlib.suppress(OSError):  # a file system without locks: listed meanwhile
            fcntl.flock(fd, fcntl.LOCK_EX)  # held until renamed: see `being_written`
        os.fchmod(fd, mode & ~_umask())
        with os.fdopen(fd, "wb") as handle:
            yield handle
            handle.flush()
            if fsync:
                os.fsync(handle.fileno())
            os.replace(tmp, path)
        if fsync:
            fsync_dir(path.parent)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def _umask() -> int:
    """The process's umask, read without changing it where Linux allows (/proc)."""
    with contextlib.suppress(OSError, ValueError, IndexError), \
            open("/proc/self/status") as status:
        for line in status:
            if line.startswith("Umask:"):
                return int(line.split()[1], 8)
    mask = os.umask(0o022)  # elsewhere: set and restore (the only portable way to read it)
    os.umask(mask)
    return mask


def is_temporary(name: str) -> bool:
    """Whether a file name has the shape of an atomic write's temp file (`.<name>.<random>.tmp`).
    A user's file may have it too: `being_written` tells the two apart."""
    return name.startswith(".") and name.endswith(TMP_SUFFIX)


def being_written(path: str | os.PathLike) -> bool:
    """Whether `path` is an atomic write's temp file still being written: its name has the
    shape and its writer holds the lock `atomic_open` takes. A file of that shape that no
    writer holds (a user's own, kept under its name) is not; nor is any other name."""
    if not is_temporary(Path(path).name):
        return False
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return True  # gone since it was listed, or a link: nothing to list
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    finally:
        os.close(fd)
    return False


def write_text(path: str | os.PathLike, text: str, *, mode: int = 0o644,
               fsync: bool = False) -> None:
    """Replace `path` with `text` atomically."""
    with atomic_open(path, mode=mode, fsync=fsync) as handle:
        handle.write(text.encode())


def write_json(path: str | os.PathLike, data: object, *, indent: int | None = None,
               mode: int = 0o644, fsync: bool = False) -> None:
    """Replace `path` with `data` as JSON atomically."""
    write_text(path, json.dumps(data, indent=indent), mode=mode, fsync=fsync)


@contextlib.contextmanager
def reading(source: Readable) -> Iterator[IO[bytes]]:
    """`source` open for reading: opened here (and closed) when it is a path."""
    if isinstance(source, (str, os.PathLike)):
        with open(source, "rb") as handle:
            yield handle
    else:
        yield source


def copy_file(source: Readable, target: str | os.PathLike, *, mode: int = 0o644) -> None:
    """Copy `source` onto `target` atomically."""
    with atomic_open(target, mode=mode) as handle, reading(source) as src:
        shutil.copyfileobj(src, handle, _CHUNK)


def fsync_dir(path: str | os.PathLike) -> None:
    """Make a rename inside folder `path` durable."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def sha256_file(source: Readable) -> str:
    digest = hashlib.sha256()
    with reading(source) as handle:
        while chunk := handle.read(_CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


def relative_name(name: object, what: str = "name") -> str:
    """`name` as a normalised relative posix path; UnsafePathError for one that could escape.

    Absolute paths, '..' parts, NUL and empty names (or '.') are refused. `what` names the
    kind of name in the message.
    """
    text = str(name) if isinstance(name, (str, os.PathLike)) else ""
    parts = [p for p in PurePosixPath(text.replace("\\", "/")).parts if p != "."]
    if not parts or "\x00" in text or text.startswith(("/", "\\")) or ".." in parts:
        raise UnsafePathError(f"{what} {name!r} refused: not a plain relative path (no absolute "
                              f"path, '..', '.' or empty name)")
    return "/".join(parts)


def contained(base: str | os.PathLike, relative: object, what: str = "name") -> Path:
    """`base / relative`, refused (UnsafePathError) unless it names something inside `base`.

    `relative` comes from outside (a manifest, an S3 key, a channel or archive member name):
    beyond `relative_name`'s checks, a path that resolves through links outside `base` (or
    to `base` itself) is refused.
    """
    root = Path(base)
    target = root / relative_name(relative, what)
    real_root, real_target = root.resolve(), target.resolve()
    if real_target == real_root or not real_target.is_relative_to(real_root):
        raise UnsafePathError(f"{what} {relative!r} refused: it resolves outside {base}")
    return target


def container_path(local: object, what: str, *, anywhere: bool = False) -> Path:
    """`local` as a job's folder in its container: an absolute path without '..', below
    `/opt/ml` unless `anywhere` (a container of its own, as on SageMaker). A local host's
    folder is its `/opt/ml` mapped elsewhere, so a path outside it would leave the job."""
    path = Path(local) if isinstance(local, str) else None
    if path is None or not path.is_absolute() or ".." in path.parts:
        raise UnsafePathError(f"{what} {local!r} refused: an absolute path without '..' is "
                              f"required (a folder below {DEFAULT_ROOT})")
    if not anywhere and (path == Path(DEFAULT_ROOT) or not path.is_relative_to(DEFAULT_ROOT)):
        raise UnsafePathError(f"{what} {local!r} refused: it must be a folder below "
                              f"{DEFAULT_ROOT} (each local host has its own {DEFAULT_ROOT})")
    return path


def open_untrusted_folder(base: str | os.PathLike, relative: str) -> int:
    """A descriptor of the folder `base/relative`, whose folders below `base` a job's code
    writes: each is opened in the one above it without following a link (a folder replaced by a
    link to elsewhere is refused, OSError), so that what is opened in it is inside `base`."""
    parts = relative.split("/") if relative else []
    if "\x00" in relative or any(part in ("", ".", "..") for part in parts):
        raise UnsafePathError(f"folder {relative!r} refused: not a plain relative path")
    folder = os.open(base, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        for part in parts:  # names as they are: never normalised or decoded
            inner = os.open(part, os.O_RDONLY | os.O_DIRECTORY | _UNTRUSTED, dir_fd=folder)
            os.close(folder)
            folder = inner
    except BaseException:
        os.close(folder)
        raise
    return folder


def open_untrusted(name: str, folder: int, flags: int = os.O_RDONLY, *,
                   one_name: bool = True) -> int:
    """A descriptor of the file `name` in the folder descriptor `folder` (a job's code writes
    both): never through a link, never blocking (a FIFO), and OSError unless it is a regular
    file, with no other name where `one_name` (a hard link would name a file of somewhere
    else)."""
    fd = os.open(name, flags | _UNTRUSTED, dir_fd=folder)
    found = os.fstat(fd)
    if not stat.S_ISREG(found.st_mode) or (one_name and found.st_nlink != 1):
        os.close(fd)
        what = "a regular file of one name" if one_name else "a regular file (a named pipe, " \
            "socket or device)"
        raise OSError(errno.EPERM, f"{name} refused: not {what}")
    return fd


def read_bounded(fd: int, limit: int) -> bytes:
    """The first `limit` bytes (at most) of the open file `fd`, whatever its offset."""
    parts: list[bytes] = []
    size = 0
    while size < limit and (part := os.pread(fd, min(limit - size, _CHUNK), size)):
        parts.append(part)
        size += len(part)
    return b"".join(parts)


def read_below(base: str | os.PathLike, relative: str, limit: int) -> bytes:
    """The first `limit` bytes of the file `base/relative`, where a job's code writes what is
    below `base`: every folder and the file opened as `open_untrusted_folder` and
    `open_untrusted` do (OSError for a link, a FIFO, a device or a missing file)."""
    folder, _, name = relative.rpartition("/")
    fd = open_untrusted_folder(base, folder)
    try:
        return read_untrusted(name, fd, limit)
    finally:
        os.close(fd)


def read_untrusted(name: str, folder: int, limit: int) -> bytes:
    """The first `limit` bytes of the file `name` in `folder`, opened as `open_untrusted`
    does."""
    fd = open_untrusted(name, folder)
    try:
        return read_bounded(fd, limit)
    finally:
        os.close(fd)
