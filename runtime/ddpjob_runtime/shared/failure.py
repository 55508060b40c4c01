"""Why a host failed: per-rank records written by workers, and the `output/failure` text."""

from __future__ import annotations

import json
import os
import re
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from ddpjob_runtime.shared import contract, fsutil

# The folder where workers record their failure; set by the bootstrap for its workers.
RECORD_DIR_ENV = contract.ENV_FAILURE_DIR
REASON_CHARS = 1024  # what SageMaker keeps of output/failure as the job's FailureReason
TRACEBACK_LINES = 40  # of a failed rank's traceback, kept below the failure's headline
RESTART_COUNT_ENV = contract.ENV_RESTART_COUNT
RESTARTS_FILE = "restarts.jsonl"  # in the record folder: one line per worker restart
FAILURE_FILE = "failure"  # under output/: SageMaker reads its first 1024 characters
TIME_FILE = "failure.json"  # beside output/failure: when the failure happened, and its kind

# What a rank or host reports when another one's death broke the collective it waited in, or
# when it was stopped because another failed: a consequence, not a cause.
_CONSEQUENCE = re.compile(
    r"gloo|nccl|connection (closed|reset)|broken pipe|DistBackendError|DistNetworkError|"
    r"DistStoreError|stopped by SIG",
    re.IGNORECASE)


def is_consequence(text: str) -> bool:
    """Whether a failure's headline reads like the consequence of another rank's failure."""
    return bool(_CONSEQUENCE.search(text.strip().split("\n", 1)[0]))


@dataclass(frozen=True)
class RankFailure:
    """One worker's failure: its rank, exit code and the user's exception."""

    rank: int
    exit_code: int
    exception: str  # "ValueError: bad batch" (last line of the traceback), or a short reason
    traceback: str = ""
    time: float = 0.0
    attempt: int = -1  # torchrun's restart count when it failed; -1: this process's

    def headline(self, host: str) -> str:
        """`host algo-2, rank 3, exit code 137: the worker was killed by SIGKILL`."""
        return reason(host, self.rank, self.exit_code, self.exception).strip()


def current_attempt() -> int:
    """This worker's attempt: torchrun's restart count (0 on the first attempt)."""
    try:
        return int(os.environ.get(RESTART_COUNT_ENV, "0"))
    except ValueError:
        return 0


def record(rank_failure: RankFailure, folder: str | Path | None = None,
           keep_existing: bool = False) -> None:
    """Write one rank's failure as `attempt-<a>-rank-<n>.json` (atomically) into the folder.

    The attempt (torchrun's restart count) keeps each restart's failures apart.
    `keep_existing`: the launcher's record of a rank does not replace the rank's own.
    """
    folder = folder or os.environ.get(RECORD_DIR_ENV)
    if not folder:
        return
    attempt = rank_failure.attempt if rank_failure.attempt >= 0 else current_attempt()
    path = Path(folder) / f"attempt-{attempt}-rank-{rank_failure.rank}.json"
    if keep_existing and path.exists():
        return
    data = {**asdict(rank_failure), "time": rank_failure.time or time.time(), "attempt": attempt}
    fsutil.write_json(path, data, mode=0o600)


def first_failure(folder: Path, attempt: int | None = None) -> RankFailure | None:
    """The cause among the failures recorded for `attempt` (default: the last one recorded):
    the earliest that is not a consequence."""
    failures = []
    for path in folder.glob("attempt-*-rank-*.json"):
        try:
            failures.append(RankFailure(**json.loads(path.read_text())))
        except (OSError, ValueError, TypeError):
            continue
    if attempt is None:
        attempt = max((f.attempt for f in failures), default=0)
    failures = [f for f in failures if f.attempt == attempt]
    return min(failures, key=lambda f: (is_consequence(f.exception), f.time, f.rank), default=None)


def record_restart(folder: str | Path, line: str) -> None:
    """Append one restart's line (`restart 1 of 2 after: ...`) to the folder's restart log."""
    path = Path(folder) / RESTARTS_FILE
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a") as f:
        f.write(json.dumps(line) + "\n")


def restarts(folder: Path) -> list[str]:
    try:
        return [json.loads(line) for line in (folder / RESTARTS_FILE).read_text().splitlines()]
    except (OSError, ValueError):
        return []


def reason(host: str, rank: int | None, exit_code: int, exception: str, details: str = "") -> str:
    """The failure text: headline first, so host, rank, code and exception fit in 1024 chars."""
    where = f"host {host}" + (f", rank {rank}" if rank is not None else "")
    headline = f"{where}, exit code {exit_code}: {exception.strip()}"[: REASON_CHARS - 24]
    return headline + (f"\n\n{details.strip()}\n" if details.strip() else "\n")


def write_failure(output_dir: Path, text: str, when: float | None = None) -> None:
    """Write `output/failure` (SageMaker reads its first 1024 characters) and `failure.json`.

    `failure.json` says when the failure happened (`when`, default now) and whether it is a
    consequence of another's, so that a supervisor can name the first cause among hosts.
    """
    output_dir.mkdir(parents=True, exist_ok=True)
    (output_dir / FAILURE_FILE).write_text(text)
    info = {"time": when or time.time(), "consequence": is_consequence(text)}
    (output_dir / TIME_FILE).write_text(json.dumps(info))
