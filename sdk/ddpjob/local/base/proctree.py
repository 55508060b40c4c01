"""Processes of this machine through /proc (Linux): liveness, descendants, ending a tree."""

from __future__ import annotations

import contextlib
import os
import signal
import time
from collections.abc import Callable, Set
from pathlib import Path


def _stat(pid: int) -> list[str] | None:
    """Fields of /proc/<pid>/stat after the command name (state first), or None if gone."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = text[text.rfind(")") + 2 :].split()
    # A process that exits while it is read can leave an empty or cut file.
    return fields if len(fields) > 1 and ")" in text else None


def is_alive(pid: int | None) -> bool:
    """Whether `pid` runs (a zombie, dead but not yet reaped, counts as gone)."""
    return _live_stat(pid) is not None


def started(pid: int | None) -> int | None:
    """When `pid` started (clock ticks after boot), None when it is gone or a zombie: with the
    pid, the identity of a process (a pid alone may be another's once it was reaped)."""
    fields = _live_stat(pid)
    return int(fields[19]) if fields is not None else None


def _live_stat(pid: int | None) -> list[str] | None:
    """`_stat(pid)` of a live process (None when it is gone or a zombie)."""
    fields = _stat(pid) if pid else None
    return fields if fields is not None and fields[0] not in ("Z", "X") else None


def cmdline(pid: int) -> list[str]:
    """The process's arguments ([] when it is gone)."""
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return []
    return [part.decode(errors="replace") for part in raw.split(b"\0") if part]


def children_map() -> dict[int, list[int]]:
    """parent pid -> child pids, for every live process."""
    tree: dict[int, list[int]] = {}
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        fields = _stat(int(entry.name))
        if fields is not None:
            tree.setdefault(int(fields[1]), []).append(int(entry.name))
    return tree


def descendants(pid: int) -> list[int]:
    """Every process below `pid` (children first, then theirs)."""
    tree, found, todo = children_map(), [], [pid]
    while todo:
        for child in tree.get(todo.pop(), []):
            found.append(child)
            todo.append(child)
    return found


def signal_all(pids: list[int], sig: int) -> None:
    for pid in pids:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, sig)


def reap_children() -> None:
    """Collect exit statuses of our dead children (orphans handed to us as subreaper)."""
    for pid in children_map().get(os.getpid(), []):
        if not is_alive(pid):
            with contextlib.suppress(ChildProcessError):
                os.waitpid(pid, os.WNOHANG)


def session_of(pid: int) -> int | None:
    """The session id of `pid` (None when it is gone): a process can leave its session
    (`setsid`) but never join another, so what a job started is in no session of the pool's."""
    fields = _stat(pid)
    return int(fields[3]) if fields is not None else None


def end_descendants(grace_s: float, poll_s: float = 0.05, keep: Set[int] = frozenset()) -> None:
    """SIGTERM every process below us but those of `keep` (their own descendants are not
    kept), SIGKILL what is left after `grace_s`, reap them.

    Call it once the children you started with `Popen` have been waited for.
    """
    end_below(os.getpid(), grace_s, keep.__contains__, poll_s)


def end_below(root: int, grace_s: float, kept: Callable[[int], bool] = lambda _pid: False,
              poll_s: float = 0.05) -> None:
    """SIGTERM every live process below `root` but those `kept` names (their own descendants
    are not kept), SIGKILL what is left after `grace_s`; bounded, whatever the processes do.
    Below ourselves we reap them; another `root` reaps its own (a subreaper adopts the
    orphans of the tree meanwhile, so none escapes by leaving its parent)."""
    ours = root == os.getpid()

    def left() -> list[int]:
        return [p for p in descendants(root) if is_alive(p) and not kept(p)]

    def reap() -> None:
        if ours:
            reap_children()

    signal_all(left(), signal.SIGTERM)
    deadline = time.monotonic() + grace_s
    while time.monotonic() < deadline:
        reap()
        if not left():
            return
        time.sleep(poll_s)
    # SIGKILL repeatedly: a dying parent can hand new orphans to the subreaper meanwhile.
    for _ in range(50):
        pids = left()
        if not pids:
            break
        signal_all(pids, signal.SIGKILL)
        time.sleep(poll_s)
        reap()
    reap()
