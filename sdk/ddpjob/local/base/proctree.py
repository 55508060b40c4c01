"""Processes of this machine through /proc (Linux): liveness, identity, descendants, the
signals one catches, ending a tree.

A process's identity is its pid, its start time and its user (`is_ours`): a pid alone may be
another process's once the first was reaped, and a pid with its start time, which anyone can
read, may be named by someone who wants another user's process signalled."""

from __future__ import annotations

import contextlib
import os
import signal
import time
from collections.abc import Callable, Iterable, Set
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


def is_ours(pid: int | None, start: int | None) -> bool:
    """Whether `pid` is still the process that started at `start` (`started`) and runs as this
    process's user: its real, effective, saved and file-system uids all ours, so that neither a
    reused pid nor a setuid program is taken for it."""
    return start is not None and started(pid) == start and _uids(pid) == {os.geteuid()}


def catches(pid: int, sig: int) -> bool:
    """Whether `pid` runs a handler of `sig` (`SigCgt`): only such a process lives on after a
    signal whose default action ends it (a real-time one)."""
    caught = _status_field(pid, "SigCgt")
    return caught is not None and bool(int(caught, 16) >> (sig - 1) & 1)


def _uids(pid: int | None) -> set[int]:
    """The process's real, effective, saved and file-system uids (empty when it is gone)."""
    uids = _status_field(pid, "Uid") if pid else None
    return {int(uid) for uid in uids.split()} if uids else set()


def _status_field(pid: int, name: str) -> str | None:
    """Field `name` of /proc/<pid>/status (None when the process is gone)."""
    try:
        with open(f"/proc/{pid}/status") as status:
            return next((line.partition(":")[2].strip() for line in status
                         if line.startswith(f"{name}:")), None)
    except OSError:
        return None


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


def below(roots: Iterable[tuple[int | None, int | None]]) -> set[int]:
    """Every process below the `roots` (pid, start time) that are still those processes and
    this user's (`is_ours`); a root that is gone or another's has none."""
    tree, found = children_map(), set()
    todo = [pid for pid, start in roots if pid is not None and is_ours(pid, start)]
    while todo:
        children = tree.get(todo.pop(), [])
        found.update(children)
        todo += children
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
