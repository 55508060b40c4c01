"""Which failed host caused a job's failure, and the FailureReason that says so (pure).

When one rank dies, the ranks of the other hosts fail too, a moment later, in a collective
("Connection closed by peer") or by our SIGTERM ("stopped by SIGTERM"); a host whose
`ddpjob-train` was killed writes nothing at all. Each host's runtime writes `output/failure` and
`output/failure.json` (when the failure happened, whether it is a consequence). The cause is the
earliest failure that is not a consequence; the others are listed as its consequences.
A host killed without a word is the platform's failure, not the user's: a job retry may follow.
A host that runs the image's own program (the DLC's toolkit, a container command such as
ModelTrainer's drivers) records no rank and no exception of its own: `program_cause` reads them
from the host's log, torchrun's report first, else the last Python traceback.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
from dataclasses import dataclass
from pathlib import Path

from ddpjob_runtime.shared import fsutil
from ddpjob_runtime.shared.failure import FAILURE_FILE, TIME_FILE, TRACEBACK_LINES, is_consequence

READ_LIMIT = 1024 * 1024  # bytes of a host's failure file read, at most

_CONSEQUENCE_CHARS = 160
# torchrun's report of a failed worker group, and the lines its workers' stderr gets.
_ROOT_CAUSE = re.compile(r"Root Cause \(first observed failure\):.*?\brank\s*:\s*(\d+)", re.S)
# The line a Python traceback ends with ("ValueError: bad lr 7"), alone or after a rank's prefix.
_EXCEPTION = r"([A-Za-z_][\w.]*(?:Error|Exception|Exit|Interrupt)\b.*)"
_RANK_EXCEPTION = r"^\[rank{rank}\]: " + _EXCEPTION + "$"
_LOG_EXCEPTION = re.compile(r"^" + _EXCEPTION + "$", re.M)
TRACEBACK_HEADER = "Traceback (most recent call last):"
# How a launcher reports a child that failed; the child's own exception, printed before, is the
# cause (ModelTrainer's drivers run the script with `subprocess`, torchrun its workers).
_LAUNCHER_REPORTS = ("subprocess.CalledProcessError",
                     "torch.distributed.elastic.multiprocessing.errors.ChildFailedError")


@dataclass(frozen=True)
class HostFailure:
    """One failed host's failure text, when it happened (epoch s), and whether it is fallout."""

    host: str
    text: str
    written: float
    seen_first: bool = False  # the supervisor saw this host exit non-zero first
    consequence: bool | None = None  # None: judged from the text
    killed_by: str | None = None  # the signal that ended ddpjob-train before it wrote anything

    @property
    def is_consequence(self) -> bool:
        return is_consequence(self.text) if self.consequence is None else self.consequence


def choose(failures: list[HostFailure]) -> HostFailure | None:
    """The cause among the failed hosts' failures (None when there are none)."""
    return min(
        failures, key=lambda f: (f.is_consequence, f.written, not f.seen_first), default=None)


def read_host(host: str, job_dir: Path, exit_code: int, exited_at: float) -> HostFailure:
    """Host `host`'s failure from its root's `output/` folder (which its ranks write: nothing
    is followed, waited on or read past `READ_LIMIT`); a killed host wrote none: say so."""
    output = f"hosts/{host}/output"
    path = job_dir / output / FAILURE_FILE
    try:
        text = fsutil.read_below(job_dir, f"{output}/{FAILURE_FILE}", READ_LIMIT).decode(
            errors="replace")
        written = os.lstat(path).st_mtime
    except OSError:
        killed_by = signal.Signals(-exit_code).name if exit_code < 0 else None
        how = (f"was killed by {killed_by}" if killed_by
               else f"exited with code {exit_code} without a failure file")
        return HostFailure(host, f"host {host}: ddpjob-train {how}", exited_at,
                           consequence=False, killed_by=killed_by)
    info: dict = {}
    with contextlib.suppress(OSError, ValueError):
        info = json.loads(fsutil.read_below(job_dir, f"{output}/{TIME_FILE}", READ_LIMIT))
    when = info.get("time") if isinstance(info.get("time"), (int, float)) else None
    consequence = info.get("consequence") if isinstance(info.get("consequence"), bool) else None
    return HostFailure(host, text, when or written, consequence=consequence)


def clear(output_dir: Path) -> None:
    """Remove what a host's runtime wrote about its failure (before the host starts again)."""
    for name in (FAILURE_FILE, TIME_FILE):
        (output_dir / name).unlink(missing_ok=True)


def headline(failure: HostFailure) -> str:
    """The first line of `failure`'s text."""
    return failure.text.strip().split("\n", 1)[0]


def with_retries(reason: str, retries: list[str], limit: int) -> str:
    """`reason` with ", after N retries" on its headline and each retry's cause listed below."""
    first, _, rest = reason.partition("\n")
    count = f"{len(retries)} {'retry' if len(retries) == 1 else 'retries'}"
    lines = [f"{first}, after {count}", "retries (earlier):"]
    lines += [f"- retry {i} after: {cause[:_CONSEQUENCE_CHARS]}"
              for i, cause in enumerate(retries, 1)]
    return "\n".join([*lines, rest] if rest else lines)[:limit]


def reason(failures: list[HostFailure], limit: int) -> str | None:
    """`AlgorithmError: <the cause>`, then its consequences, in at most `limit` characters."""
    cause = choose(failures)
    if cause is None:
        return None
    first, _, details = cause.text.strip().partition("\n")
    others = sorted((f for f in failures if f is not cause), key=lambda f: f.written)
    lines = [f"AlgorithmError: {first}"]
    if others:
        lines.append("consequences (later):")
        lines += [f"- {headline(f)[:_CONSEQUENCE_CHARS]}" for f in others]
    text = "\n".join(lines) + (f"\n\n{details.strip()}" if details.strip() else "")
    return text[:limit]


def torchrun_root_cause(log: str) -> tuple[int, str] | None:
    """(rank, exception) of the root cause that torchrun reported last in a host's `log`
    (`Root Cause (first observed failure)` and that rank's `[rankN]: ValueError: ...` line),
    or None when the log holds no such report with an exception."""
    causes = _ROOT_CAUSE.findall(log)
    if not causes:
        return None
    rank = int(causes[-1])
    exceptions = re.findall(_RANK_EXCEPTION.format(rank=rank), log, re.M)
    return (rank, exceptions[-1].strip()) if exceptions else None


def python_exception(log: str) -> tuple[str, str] | None:
    """(exception, traceback) of the last Python traceback in `log` that ends in an exception
    line (`ValueError: bad lr 7`), passing over a launcher's report of its failed child for the
    child's own; the traceback is its last `TRACEBACK_LINES` lines. None without one."""
    for block in reversed(log.split(TRACEBACK_HEADER)[1:]):
        found = _LOG_EXCEPTION.search(block)
        if found and not found.group(1).startswith(_LAUNCHER_REPORTS):
            lines = (TRACEBACK_HEADER + block[: found.end()]).splitlines()
            return found.group(1).strip(), "\n".join(lines[-TRACEBACK_LINES:])
    return None


def program_cause(log: str, written: str, fallback: str,
                  signalled: bool = False) -> tuple[int | None, str, str]:
    """(rank, exception, details) of an image's program that failed, from the end of its host's
    `log`: the rank and exception of torchrun's report, else the last Python traceback's
    exception (no rank; not when a signal ended the program: the signal is the cause), else
    `fallback`. The details are the text the program `written` to `output/failure` (SageMaker's
    FailureReason), else the traceback found in the log."""
    if found := torchrun_root_cause(log):
        return found[0], found[1], written
    if not signalled and (traced := python_exception(log)):
        return None, traced[0], written or traced[1]
    return None, fallback, written
