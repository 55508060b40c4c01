"""Why a host failed: per-rank records written by workers, and the `output/failure` text."""

from __future__ import annotations

import json
import os
import re
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from ddpjob_runtime import contract, fsutil

# The folder where workers record their failure; set by the bootstrap for its workers.
RECORD_DIR_ENV = contract.ENV_FAILURE_DIR
REASON_CHARS = 1024  # what SageMaker keeps of output/failure as the job's FailureReason
TIME_FILE = "failure.json"  # beside output/failure: when the failure happened, and its kind

# What a rank or host reports when another one's death broke the collective it waited in, or
# when it was stopped because another failed: a consequence, not a cause.
_CONSEQUENCE = re.compile(
    r"gloo|nccl|connection (closed|reset)|broken pipe|DistBackendError|DistNetworkError|"
    r"DistStoreError|stopped by SIG",
    re.IGNORECASE,
)


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


def record(
    rank_failure: RankFailure, folder: str | Path | None = None, keep_existing: bool = False
) -> None:
    """Write one rank's failure as `rank-<n>.json` (atomically) into the record folder.

    `keep_existing`: the launcher's record of a rank does not replace the rank's own.
    """
    folder = folder or os.environ.get(RECORD_DIR_ENV)
    if not folder:
        return
    path = Path(folder) / f"rank-{rank_failure.rank}.json"
    if keep_existing and path.exists():
        return
    fsutil.write_json(path, {**asdict(rank_failure), "time": rank_failure.time or time.time()},
                      mode=0o600)


def first_failure(folder: Path) -> RankFailure | None:
    """The cause among the recorded failures: the earliest that is not a consequence."""
    failures = []
    for path in folder.glob("rank-*.json"):
        try:
            failures.append(RankFailure(**json.loads(path.read_text())))
        except (OSError, ValueError, TypeError):
            continue
    return min(failures, key=lambda f: (is_consequence(f.exception), f.time, f.rank), default=None)


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
    (output_dir / "failure").write_text(text)
    info = {"time": when or time.time(), "consequence": is_consequence(text)}
    (output_dir / TIME_FILE).write_text(json.dumps(info))
