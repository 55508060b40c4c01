"""Reading a folder that someone else writes (a rank's checkpoint folder, a `file://` store).

Nothing is followed out of the folder and nothing but a regular file is opened: a link is read
only where it resolves to a file inside the folder, a linked folder is not entered, a named
pipe, socket or device is left out (reading one could block for ever). Checking a path and then
opening it would let a rank swap a folder for a link in between; so the folder is walked by
directory descriptors, and a file is opened one name at a time below the folder's own
descriptor with O_NOFOLLOW (`open_file`): a link that appears meanwhile fails the open instead
of leading out. Names are file names: never decoded or normalised. Torch-free, stdlib only.
"""

from __future__ import annotations

import errno
import os
import stat
from collections.abc import Callable
from typing import IO, NamedTuple

from ddpjob_runtime.shared import fsutil

_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC


class Found(NamedTuple):
    """A regular file under a scanned folder: its size and modification time (ns)."""

    size: int
    mtime_ns: int


class Scan(NamedTuple):
    """What `scan` found: `files` by relative posix name, and `refused` (name: why left out)."""

    files: dict[str, Found]
    refused: dict[str, str]


def scan(folder: str | os.PathLike, skip: Callable[[str], bool] | None = None) -> Scan:
    """Every regular file below `folder` (sorted by name), links to files inside it counted as
    those files; `skip(relative name)` leaves a file out silently. A missing folder is empty."""
    files: dict[str, Found] = {}
    refused: dict[str, str] = {}
    inside = os.path.realpath(folder)
    # fwalk opens each folder by its parent's descriptor and enters no linked folder.
    for top, dirs, names, fd in os.fwalk(folder):
        dirs.sort()
        base = os.path.relpath(top, folder).replace(os.sep, "/")
        prefix = "" if base == "." else base + "/"
        for name in sorted([*names, *(d for d in dirs if _is_link(d, fd))]):
            rel = prefix + name
            if skip is not None and skip(rel):
                continue
            found = _regular(os.path.join(folder, rel), inside, name, fd)
            if isinstance(found, str):
                refused[rel] = found
            elif found is not None:
                files[rel] = found
    return Scan(dict(sorted(files.items())), refused)


def _is_link(name: str, fd: int) -> bool:
    try:
        return stat.S_ISLNK(os.stat(name, dir_fd=fd, follow_symlinks=False).st_mode)
    except OSError:
        return False


def _regular(path: str, inside: str, name: str, fd: int) -> Found | str | None:
    """The file's `Found`, why it is left out, or None when it vanished meanwhile."""
    try:
        st = os.stat(name, dir_fd=fd, follow_symlinks=False)
        if stat.S_ISLNK(st.st_mode):
            real = os.path.realpath(path)
            if not _below(real, inside):
                return "it links outside the folder"
            st = os.stat(real)
    except FileNotFoundError:
        return None
    except OSError as error:
        return f"it cannot be read ({error.strerror})"
    if stat.S_ISDIR(st.st_mode):
        return "it links to a folder (not entered)"
    if not stat.S_ISREG(st.st_mode):
        return "it is not a regular file (a named pipe, socket or device)"
    return Found(st.st_size, st.st_mtime_ns)


def _below(real: str, inside: str) -> bool:
    return real != inside and os.path.commonpath([real, inside]) == inside


def open_file(folder: str | os.PathLike, rel: str) -> IO[bytes]:
    """The regular file `rel` below `folder`, opened for reading without leaving the folder.

    A link inside the folder is followed where it resolves to a file inside; the path it
    resolves to is then opened one name at a time, no link followed, so nothing swapped in
    since can lead out. OSError (ELOOP, ENOTDIR, EINVAL) for a link out or anything but a
    regular file, FileNotFoundError for a missing one.
    """
    inside = os.path.realpath(folder)
    real = os.path.realpath(os.path.join(folder, rel))
    if not _below(real, inside):
        raise OSError(errno.ELOOP, "it links outside the folder", os.path.join(folder, rel))
    parent, name = os.path.split(os.path.relpath(real, inside))
    fd = fsutil.open_untrusted_folder(inside, parent)
    try:
        handle = fsutil.open_untrusted(name, fd, one_name=False)
    finally:
        os.close(fd)
    os.set_blocking(handle, True)
    return os.fdopen(handle, "rb")
