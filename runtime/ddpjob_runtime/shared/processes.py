"""Process helpers shared by the local backend and the runtime (Linux; no-ops where unsupported)."""

from __future__ import annotations

import contextlib
import ctypes
import functools
import os
import signal
from collections.abc import Callable

_PR_SET_PDEATHSIG = 1
_PR_SET_CHILD_SUBREAPER = 36
_PR_CAPBSET_DROP = 24


def _prctl(option: int, value: int) -> bool:
    try:
        return ctypes.CDLL(None, use_errno=True).prctl(option, value) == 0
    except (OSError, AttributeError):
        return False


def die_with_parent(signum: int = signal.SIGTERM, parent: int | None = None) -> None:
    """Ask Linux to send `signum` to this process when its parent dies (PR_SET_PDEATHSIG).

    Call it in a child (e.g. in a Popen `preexec_fn`, passing the parent's pid taken before the
    fork). A parent that died before the call took effect is noticed (the parent pid is not
    `parent`, or is 1 when `parent` is not given): the child exits at once.
    """
    if not _prctl(_PR_SET_PDEATHSIG, signum):
        return
    if os.getppid() != parent if parent is not None else os.getppid() == 1:
        os._exit(128 + signum)


def ends_with_this_process(signum: int = signal.SIGTERM) -> Callable[[], None]:
    """A Popen `preexec_fn`: the child gets `signum` when this (its parent) process dies."""
    return functools.partial(die_with_parent, signum, os.getpid())


def drop_bounding_capability(cap: int) -> None:
    """Take capability `cap` out of this process's bounding set (PR_CAPBSET_DROP), so that no
    program it executes gains it; OSError when Linux refuses (EINVAL: a capability this
    kernel lacks, EPERM: without CAP_SETPCAP); AttributeError where libc has no prctl."""
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(_PR_CAPBSET_DROP, cap, 0, 0, 0) != 0:
        error = ctypes.get_errno()
        raise OSError(error, os.strerror(error))


def become_subreaper() -> None:
    """Orphaned descendants become our children instead of init's, so we can still end them."""
    _prctl(_PR_SET_CHILD_SUBREAPER, 1)


def group_alive(pgid: int) -> bool:
    """Whether any process of the group `pgid` still runs."""
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def signal_group(pgid: int, signum: int) -> None:
    """Send `signum` to the process group `pgid`; a group that is gone is not an error."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pgid, signum)
