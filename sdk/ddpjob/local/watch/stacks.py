"""Where every rank of a running local job is: its Python stacks, and who waits in a collective.

Each worker of a host registered for stack dumps (`ddpjob_runtime.shared.stackdump`: Python's
`faulthandler` on a signal, every thread). `collect` empties each live rank's dump file, sends
the signal to every rank at once and reads the dumps back once they stopped growing. A rank
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

from ddpjob_runtime.shared import contract, stackdump

from ddpjob.local.isolation import hostroot

log = logging.getLogger("ddpjob.local.run.supervisor")

ANSWER_S = 5.0  # how long the ranks get to write their stacks
_POLL_S = 0.05
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
            return "did not answer (stopped, or ended meanwhile)"
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
    dump: Path
    info: dict
    size: int = -1
    settled: bool = False


def _live_ranks(folder: Path, host: str) -> list[_Request]:
    """The ranks registered in `folder` whose process still runs (not a reused pid)."""
    found = []
    for path in folder.glob("rank-*.json"):
        with contextlib.suppress(OSError, ValueError, KeyError, TypeError):
            info = json.loads(path.read_text())
            rank = int(path.stem.removeprefix("rank-"))
            if stackdump.start_time(int(info["pid"])) == info["start_time"]:
                found.append(_Request(host, rank, stackdump.stacks_file(folder, rank), info))
    return sorted(found, key=lambda r: r.rank)


def _ask(request: _Request) -> bool:
    """Empty the rank's dump file and signal the rank; False when it is gone."""
    try:
        request.dump.write_text("")
        os.kill(int(request.info["pid"]), stackdump.STACK_SIGNAL)
    except OSError:  # ProcessLookupError among them
        return False
    return True


def _wait(requests: list[_Request], answer_s: float) -> None:
    """Until every dump is written (not empty, and no longer growing) or `answer_s` passed."""
    deadline = time.monotonic() + answer_s
    while not all(r.settled for r in requests) and time.monotonic() < deadline:
        time.sleep(_POLL_S)
        for request in (r for r in requests if not r.settled):
            with contextlib.suppress(OSError):
                size = request.dump.stat().st_size
                request.settled, request.size = size > 0 and size == request.size, size


def collect(job_dir: Path, hosts: list[str], answer_s: float = ANSWER_S) -> list[RankStacks]:
    """Every live rank's stacks on every host of the job in `job_dir`, by host then rank."""
    requests = [r for host in hosts
                for r in _live_ranks(job_dir / "hosts" / host / contract.STACKS_DIR, host)]
    requests = [r for r in requests if _ask(r)]
    _wait(requests, answer_s)
    found = []
    for r in requests:
        text = ""
        with contextlib.suppress(OSError):
            text = r.dump.read_text(errors="replace")
        found.append(RankStacks(r.host, r.rank, text, r.info.get("main_thread"),
                                str(r.info.get("code_dir") or "")))
    return found


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
