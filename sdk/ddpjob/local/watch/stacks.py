"""Where every rank of a running local job is: its Python stacks, and who waits in a collective.

Each worker of a host registered for stack dumps (`ddpjob_runtime.shared.stackdump`: Python's
`faulthandler` on a signal, every thread). `collect` empties each live rank's dump file, sends
the signal to every rank at once and reads the dumps back once they stopped growing. All that
is in a folder the ranks write, so it is read as hostile: no link followed, no FIFO waited on,
no more than a bound read, and only a process of the job (below its supervisor or its warm
pool's template, by pid, start time and user) that catches the signal is signalled. A rank
whose main thread has a frame in `torch.distributed` (or ddpjob's `dataparallel` wrappers)
waits in that collective; any other rank is elsewhere, at its innermost frame in the job's code.
`report` is what `ddpjob stacks` prints; `hung_note` the FailureReason's tail that names the
ranks that were elsewhere while others waited; `dump_before_end` the supervisor's hook.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import re
import time
from dataclasses import dataclass
from pathlib import Path

from ddpjob_runtime.shared import contract, fsutil, stackdump

from ddpjob.local.base import proctree
from ddpjob.local.base.jobstore import JobStore
from ddpjob.local.isolation import hostroot
from ddpjob.local.warmpools import pools

log = logging.getLogger("ddpjob.local.run.supervisor")

ANSWER_S = 5.0  # how long the ranks get to write their stacks
DUMP_LIMIT = 1 << 20  # bytes of a rank's dump read back (faulthandler writes far less)
_INFO_LIMIT = 1 << 16  # bytes of a rank's registration read
_POLL_S = 0.05
_INFO_NAME = re.compile(r"rank-(\d{1,9})\.json")
# A frame in one of these waits in a collective (the process group's calls, DDP's wrappers).
_COLLECTIVE_PATHS = ("/torch/distributed/", "/ddpjob_runtime/dataparallel/")
_THREAD = re.compile(r"^(?:Current thread|Thread) (0x[0-9a-fA-F]+) \(most recent call first\):")
_FRAME = re.compile(r'^\s+File "(.*)", line (\d+) in (.*)$')


@dataclass(frozen=True)
class Frame:
    """One line of a faulthandler stack: file, line and function."""

    file: str
    line: int
    function: str

    def __str__(self) -> str:
        return f"{os.path.basename(self.file)}:{self.line} in {self.function}"


def parse_threads(text: str) -> dict[int, list[Frame]]:
    """faulthandler's dump of every thread: thread id -> its frames, innermost first."""
    threads: dict[int, list[Frame]] = {}
    frames: list[Frame] = []
    for line in text.splitlines():
        if found := _THREAD.match(line):
            frames = threads.setdefault(int(found.group(1), 16), [])
        elif found := _FRAME.match(line):
            frames.append(Frame(found.group(1), int(found.group(2)), found.group(3)))
    return threads


@dataclass(frozen=True)
class RankStacks:
    """What one rank answered: its host, rank, faulthandler text ("" when it did not answer),
    its main thread's id and the folder of the job's code (as the rank sees them)."""

    host: str
    rank: int
    text: str
    main_thread: int | None = None
    code_dir: str = ""

    def main_frames(self) -> list[Frame]:
        """The main thread's frames, innermost first (the only thread's, when it is unknown)."""
        threads = parse_threads(self.text)
        if self.main_thread in threads:
            return threads[self.main_thread]
        return next(iter(threads.values()), [])

    def collective(self) -> str | None:
        """The collective the main thread waits in (`all_reduce`), None when it is elsewhere."""
        inside = [f for f in self.main_frames() if any(p in f.file for p in _COLLECTIVE_PATHS)]
        named = [f for f in inside if not f.function.startswith(("_", "<")) and
                 f.function != "wrapper"]  # torch's logging decorators wrap each collective
        return (named or inside)[0].function if inside else None

    def user_frame(self) -> Frame | None:
        """The innermost frame in the job's code (else the innermost frame at all)."""
        frames = self.main_frames()
        code = self.code_dir.rstrip("/") + "/"
        ours = [f for f in frames if self.code_dir and f.file.startswith(code)]
        return (ours or frames or [None])[0]

    def where(self) -> str:
        """`waiting in all_reduce (train.py:20 in main)`, `elsewhere: train.py:17 in slow_step`,
        or that it did not answer."""
        if not self.text.strip():
            return "did not answer (stopped, ended meanwhile, or not asked: its dump file is no " \
                   "regular file, or it does not catch the signal)"
        collective, frame = self.collective(), self.user_frame()
        if collective is not None:
            return f"waiting in {collective}" + (f" ({frame})" if frame else "")
        return f"elsewhere: {frame}" if frame else "elsewhere"

    def shown(self) -> str:
        """The dump, each thread's frames outside and below the job's code (the runtime's
        wrapper, runpy) folded into one line."""
        code = self.code_dir.rstrip("/") + "/"
        blocks: list[list[str]] = []
        for line in self.text.rstrip().splitlines():
            if _THREAD.match(line) or not blocks:
                blocks.append([])
            blocks[-1].append(line)
        shown = []
        for block in blocks:
            ours = [i for i, line in enumerate(block)
                    if self.code_dir and line.startswith(f'  File "{code}')]
            cut = ours[-1] + 1 if ours else len(block)
            folded = len([line for line in block[cut:] if _FRAME.match(line)])
            shown += block[:cut] + ([f"  ... {folded} frames of the runtime"] if folded else [])
        return "\n".join(shown) or "(no answer)"

    def header(self) -> str:
        """`[algo-2 rank 3] waiting in all_reduce (train.py:20 in main)`."""
        return f"[{self.host} rank {self.rank}] {self.where()}"


@dataclass
class _Request:
    host: str
    rank: int
    pid: int
    info: dict
    dump: int | None = None  # the rank's dump file, held open from emptied to read back
    size: int = -1
    settled: bool = False


def job_roots(job_dir: Path) -> list[tuple[int | None, int | None]]:
    """The processes (pid, start time) every process of the job in `job_dir` runs below: its
    supervisor, as the job's state records it, and the template of the warm pool it holds."""
    home, name = job_dir.parent.parent, job_dir.name
    state = JobStore(home).state(name)
    template = pools.template_of(home, name)
    return [(state.supervisor_pid, state.supervisor_started), *([template] if template else [])]


def _registered(folder: int, host: str, job: set[int]) -> list[_Request]:
    """The ranks registered in the stacks folder `folder` whose process may be asked: what a
    rank wrote never decides which process is signalled, so the pid must be one of the `job`'s
    processes, still the one that registered (its start time) and of this user; a process
    registered under several ranks is asked once, as the first."""
    found: dict[int, _Request] = {}
    names = {int(m.group(1)): m.string for m in map(_INFO_NAME.fullmatch, os.listdir(folder)) if m}
    for rank in sorted(names):
        with contextlib.suppress(OSError, ValueError, KeyError, TypeError, RecursionError):
            info = json.loads(fsutil.read_untrusted(names[rank], folder, _INFO_LIMIT))
            pid = int(info["pid"])
            if pid in job and pid not in found and proctree.is_ours(pid, info["start_time"]):
                found[pid] = _Request(host, rank, pid, info)
    return list(found.values())


def _dump_file(request: _Request, folder: int) -> int | None:
    """The rank's dump file, opened to be emptied and read back; None when the rank is not to
    be asked: it does not catch the signal (whose default action would end it), or its dump
    file is no regular file (a link to elsewhere, a FIFO)."""
    if not proctree.catches(request.pid, stackdump.STACK_SIGNAL):
        return None
    try:
        return fsutil.open_untrusted(stackdump.stacks_file(Path(), request.rank).name, folder,
                                     os.O_RDWR)
    except OSError:
        return None


def _ask(request: _Request) -> bool:
    """Empty the rank's dump file and signal the rank (one without a `_dump_file` stays
    silent); False when it is gone."""
    if request.dump is None:
        return proctree.is_alive(request.pid)
    try:
        os.ftruncate(request.dump, 0)
        os.kill(request.pid, stackdump.STACK_SIGNAL)
    except OSError:  # ProcessLookupError among them
        return False
    return True


def _wait(requests: list[_Request], answer_s: float) -> None:
    """Until every dump is written (not empty, and no longer growing) or `answer_s` passed."""
    asked = [r for r in requests if r.dump is not None]
    deadline = time.monotonic() + answer_s
    while not all(r.settled for r in asked) and time.monotonic() < deadline:
        time.sleep(_POLL_S)
        for request in (r for r in asked if not r.settled):
            size = os.fstat(request.dump).st_size
            request.settled, request.size = size > 0 and size == request.size, size


def collect(job_dir: Path, hosts: list[str], answer_s: float = ANSWER_S,
            roots: list[tuple[int | None, int | None]] | None = None) -> list[RankStacks]:
    """Every live rank's stacks on every host of the job in `job_dir`, by host then rank: the
    ranks among the processes below `roots` (default `job_roots`), each dump read up to
    `DUMP_LIMIT` bytes."""
    job = proctree.below(job_roots(job_dir) if roots is None else roots)
    with contextlib.ExitStack() as held:
        requests = []
        for host in hosts:
            with contextlib.suppress(OSError):  # no folder yet, or one replaced by a link
                folder = fsutil.open_untrusted_folder(job_dir / "hosts",
                                                      f"{host}/{contract.STACKS_DIR}")
                held.callback(os.close, folder)
                for request in _registered(folder, host, job):
                    request.dump = _dump_file(request, folder)
                    if request.dump is not None:
                        held.callback(os.close, request.dump)
                    requests += [request] if _ask(request) else []
        _wait(requests, answer_s)
        return [_answer(r) for r in requests]


def _answer(request: _Request) -> RankStacks:
    """What the rank wrote into its dump file ("" when it was not asked), with its main thread
    and code folder where its registration names them as they should be."""
    text = "" if request.dump is None else \
        fsutil.read_bounded(request.dump, DUMP_LIMIT).decode(errors="replace")
    main, code = request.info.get("main_thread"), request.info.get("code_dir")
    return RankStacks(request.host, request.rank, text, main if isinstance(main, int) else None,
                      code if isinstance(code, str) else "")


def hung_note(ranks: list[RankStacks]) -> str | None:
    """`rank 1 on algo-1 was elsewhere (train.py:17 in slow_step) while the others waited in
    a collective`, when some ranks waited in a collective and others were elsewhere."""
    answered = [r for r in ranks if r.text.strip()]
    elsewhere = [r for r in answered if r.collective() is None]
    if not elsewhere or len(elsewhere) == len(answered):
        return None
    if len(elsewhere) == 1:
        only = elsewhere[0]
        who = f"rank {only.rank} on {only.host} was elsewhere ({only.user_frame() or 'unknown'})"
    else:
        who = "ranks " + ", ".join(f"{r.rank} on {r.host} ({r.user_frame() or 'unknown'})"
                                   for r in elsewhere) + " were elsewhere"
    return f"{who} while the others waited in a collective"


def report(ranks: list[RankStacks], hosts: list[str]) -> str:
    """Every rank's stacks, each headed `[algo-2 rank 3] <where it is>`, a summary first."""
    lines = [hung_note(ranks) or f"{len(ranks)} live ranks on {len(hosts)} hosts"]
    for host in hosts:
        mine = [r for r in ranks if r.host == host]
        if not mine:
            lines += ["", f"[{host}] no live rank registered for stack dumps"]
        for rank in mine:
            lines += ["", rank.header(), rank.shown()]
    return "\n".join(lines) + "\n"


def dump_before_end(job_dir: Path, hosts: list[str], why: str) -> str | None:
    """The supervisor's hook before it ends the hosts: each live rank's stacks into its host's
    log (the job's log stream), headed with `why`; returns `hung_note` (None when no rank is
    live)."""
    ranks = collect(job_dir, hosts)
    if not ranks:
        return None
    note = hung_note(ranks)
    for host in hosts:
        mine = [r for r in ranks if r.host == host]
        if not mine:
            continue
        text = [f"ddpjob: the stacks of this host's ranks as the job ends ({why}):"]
        for rank in mine:
            text += [rank.header(), rank.shown()]
        with contextlib.suppress(OSError), open(hostroot.log_file(job_dir, host), "a") as out:
            out.write("\n".join(text) + "\n")
    if note:
        log.warning("%s", note)
    return note


def with_hung_note(reason: str | None, note: str | None, default: str, limit: int) -> str | None:
    """`reason` (else `default`) with `note` at the end of its headline, in `limit` characters."""
    if note is None:
        return reason
    first, newline, rest = (reason or default).partition("\n")
    headline = f"{first}; {note}"
    return (headline + newline + rest)[:limit]
