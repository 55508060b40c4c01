"""Where the objects of the local bucket `sagemaker-local` lie, one place per key.

The bucket is also a plain folder: local jobs read `s3://sagemaker-local/<key>` as the file
`<folder>/<key>` (`ddpjob_runtime.shared.storage.uris`), and `LocalSession.upload_data` writes files
there. An encoded layout for every key would break that, and storing every key as a path lets a
file system alias keys S3 keeps apart (`a//b`, `./c` and `x\\y` are `a/b`, `c` and `x/y` to
it; `a` and `a/b` cannot both be files). So a key is stored one of two ways:

- *plain*, the file `<folder>/<key>`, when the key is a path that names no other key (segments
  neither empty, `.` nor `..`, no backslash, none over 255 bytes, the last no temp-file name)
  and its place is free (no folder at the key, no file at a parent);
- *escaped*, every other key (`data/` folder markers, `a//b`, `../x`, long segments, `a/b`
  while `a` is a file): the file `<home>/buckets/.escaped/<sha256 of the key>`, which starts
  with the key (2 bytes of length, then its UTF-8) before the object's bytes. Jobs do not see
  these as files of the folder; S3 calls see them as any other object.

Keys are never normalised, so no two keys share a file, and no write replaces another key's
bytes. Every write is atomic (a temp file renamed into place) and private (0600). A link in the
folder that resolves outside it is no object (neither listed nor read), nor is anything there
but a regular file (a FIFO is never opened to wait on).

Jobs write the folder, and a job's host without a namespace of its own could write beside it
too (hosts in their own see `<home>/buckets` read-only but for the folder: `run.hosts`). So an
escaped file is read only as this store writes it: opened without following a link and without
blocking, a regular file of one name (no hard link to a file elsewhere), a header of at most
`MAX_KEY_BYTES` naming the key whose hash is the file's name; anything else there is no object.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import os
import stat
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO

from ddpjob_runtime.shared import fsutil

PRIVATE = 0o600
MAX_KEY_BYTES = 1024  # S3's longest key, in bytes of UTF-8
NAME_MAX = 255  # bytes in one file name (Linux, macOS)
_PATH_MAX = 4000  # bytes in a whole path, with a margin below Linux's 4096
_LENGTH = 2  # bytes of the escaped file's key length


@dataclass(frozen=True)
class Stored:
    """One object: its key, its file, and where its bytes start in that file."""

    key: str
    path: str  # not a Path: listings make one per file, and pathlib's are slow to make
    offset: int
    stat: os.stat_result

    @property
    def size(self) -> int:
        return self.stat.st_size - self.offset

    @property
    def escaped(self) -> bool:
        """Whether the bytes follow a header naming the key (an escaped object's file)."""
        return self.offset > 0

    def open(self) -> IO[bytes]:
        """The object's bytes, as a file positioned at their start; OSError when its file is no
        longer a regular file (never waited on) or an escaped one became a link."""
        handle = os.fdopen(_open_regular(self.path, follow=not self.escaped), "rb")
        handle.seek(self.offset)
        return handle


def _open_regular(path: str, follow: bool) -> int:
    """A descriptor of the regular file `path`, opened without blocking (a FIFO would wait for
    a writer) and, unless `follow`, without following a link; OSError for anything else."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | (0 if follow else os.O_NOFOLLOW))
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise OSError(errno.EINVAL, "not a regular file", path)
    return fd


def _read_escaped(path: str) -> Stored | None:
    """The object of the escaped file `path`, or None for what this store did not write (see
    the module's docstring): nothing is followed, waited on or read past the longest header."""
    try:
        fd = _open_regular(path, follow=False)
    except OSError:
        return None
    try:
        st = os.fstat(fd)
        header = os.pread(fd, _LENGTH + MAX_KEY_BYTES, 0)
    except OSError:
        return None
    finally:
        os.close(fd)
    length = int.from_bytes(header[:_LENGTH], "big")
    try:
        key = header[_LENGTH:_LENGTH + length].decode()
    except UnicodeDecodeError:
        return None
    if st.st_nlink != 1 or len(header) < _LENGTH + length or \
            os.path.basename(path) != _key_hash(key):
        return None
    return Stored(key, path, _LENGTH + length, st)


def _key_hash(key: str) -> str:
    """The name of the escaped file of `key`."""
    return hashlib.sha256(key.encode()).hexdigest()


def _plain_part(part: str) -> bool:
    """Whether one segment of a key is a file name that names only itself."""
    return part not in ("", ".", "..") and "\\" not in part and "\x00" not in part \
        and len(part.encode(errors="surrogateescape")) <= NAME_MAX


def plain_name(key: str) -> bool:
    """Whether `key` is a relative path a file system keeps apart from every other key."""
    parts = key.split("/")
    return not fsutil.is_temporary(parts[-1]) and all(map(_plain_part, parts))


class ObjectStore:
    """The objects of the bucket folder `root` (and its escaped objects beside it)."""

    def __init__(self, root: Path):
        self.root = Path(root)
        self.escaped = self.root.parent / ".escaped"

    # --- one key ---------------------------------------------------------------------------

    def _plain_path(self, key: str) -> Path | None:
        """The file of `key` when the key is stored plainly (whether it is there or not)."""
        if not plain_name(key) or len(os.fsencode(self.root / key)) > _PATH_MAX:
            return None
        return self.root / key

    def _escaped_path(self, key: str) -> Path:
        return self.escaped / _key_hash(key)

    def find(self, key: str) -> Stored | None:
        """The object of `key`, or None."""
        path = self._plain_path(key)
        if path is not None and self._inside(path) and path.is_file():
            return Stored(key, str(path), 0, path.stat())
        found = _read_escaped(str(self._escaped_path(key))) if self._escaped_folder() else None
        return found if found is not None and found.key == key else None

    def _escaped_folder(self) -> bool:
        """Whether the escaped objects' folder is one (a link there is not followed)."""
        try:
            return stat.S_ISDIR(os.lstat(self.escaped).st_mode)
        except OSError:
            return False

    def _inside(self, path: Path) -> bool:
        """Whether `path` resolves inside the folder (a link may point anywhere)."""
        real = path.resolve()
        return real != self.root.resolve() and real.is_relative_to(self.root.resolve())

    def _free(self, path: Path) -> bool:
        """Whether a file can be written at `path`: no folder there, no file above it."""
        if path.is_dir() or not self._inside(path):
            return False
        parent = path.parent
        while parent != self.root:
            if parent.exists() and not parent.is_dir():
                return False
            parent = parent.parent
        return True

    def write(self, key: str, fill: Callable[[IO[bytes]], None]) -> Stored:
        """Store the bytes `fill` writes as the object `key`, replacing only that key's."""
        path = self._plain_path(key)
        if path is not None and self._free(path):
            with fsutil.atomic_open(path, mode=PRIVATE) as out:
                fill(out)
                out.flush()  # the size and time the object will have
                written = os.fstat(out.fileno())
            self._escaped_path(key).unlink(missing_ok=True)  # the key lies in one place
            return Stored(key, str(path), 0, written)
        path = self._escaped_path(key)
        self.escaped.mkdir(parents=True, exist_ok=True, mode=0o700)
        if not self._escaped_folder():
            raise NotADirectoryError(errno.ENOTDIR, "not a folder of its own", str(self.escaped))
        name = key.encode()
        with fsutil.atomic_open(path, mode=PRIVATE) as out:
            out.write(len(name).to_bytes(_LENGTH, "big") + name)
            fill(out)
            out.flush()
            written = os.fstat(out.fileno())
        return Stored(key, str(path), _LENGTH + len(name), written)

    def delete(self, key: str) -> None:
        """Remove the object `key` (nothing when there is none)."""
        found = self.find(key)
        while found is not None:  # a plain file may hide an escaped copy a job's file made
            with contextlib.suppress(FileNotFoundError):
                os.unlink(found.path)
            found = self.find(key)

    # --- all keys ----------------------------------------------------------------------------

    def objects(self, prefix: str) -> Iterator[Stored]:
        """Every object whose key starts with `prefix`, in no order, each key once."""
        seen: set[str] = set()
        for stored in self._plain_objects(prefix):
            seen.add(stored.key)
            yield stored
        for stored in self._escaped_objects():
            if stored.key.startswith(prefix) and stored.key not in seen:
                yield stored

    def _plain_objects(self, prefix: str) -> Iterator[Stored]:
        """The plain files under `prefix`, visiting only the folders that can hold such keys."""
        folder = prefix.rpartition("/")[0]
        if folder and not plain_name(folder):
            return  # no plain key starts with it
        pending = [(os.path.join(self.root, folder), f"{folder}/" if folder else "")]
        while pending:
            directory, base = pending.pop()
            try:
                with os.scandir(directory) as scan:
                    entries = list(scan)
            except OSError:  # not a folder, or gone
                continue
            for entry in entries:
                key = base + entry.name
                if not _plain_part(entry.name) or not _is_utf8(entry.name):
                    continue
                if entry.is_dir(follow_symlinks=False):
                    if (key + "/").startswith(prefix) or prefix.startswith(key + "/"):
                        pending.append((entry.path, key + "/"))
                elif key.startswith(prefix) and not fsutil.is_temporary(entry.name) and (
                        not entry.is_symlink() or self._inside(Path(entry.path))):
                    try:
                        found = entry.stat()
                    except OSError:  # gone since the scan, or a dangling link
                        continue
                    if stat.S_ISREG(found.st_mode):  # not a job's FIFO or socket
                        yield Stored(key, entry.path, 0, found)

    def _escaped_objects(self) -> Iterator[Stored]:
        if not self._escaped_folder():
            return
        for entry in os.scandir(self.escaped):
            if not fsutil.is_temporary(entry.name) and (found := _read_escaped(entry.path)):
                yield found


def _is_utf8(name: str) -> bool:
    """Whether a file name read from the folder is text (S3 keys are UTF-8)."""
    try:
        name.encode()
    except UnicodeEncodeError:
        return False
    return True
