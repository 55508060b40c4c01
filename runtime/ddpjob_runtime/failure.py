"""Why a host failed: per-rank records written by workers, and the `output/failure` text."""

from __future__ import annotations

import json
import os
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from ddpjob_runtime import contract, fsutil

# The folder where workers record their failure; set by the bootstrap for its workers.
RECORD_DIR_ENV = contract.ENV_FAILURE_DIR
REASON_CHARS = 1024  # what SageMaker keeps of output/failure as the job's FailureReason


@dataclass(frozen=True)
class RankFailure:
    """One worker's failure: its rank, exit code and the user's exception."""

    rank: int
    exit_code: int
    exception: str  # "ValueError: bad batch" (last line of the traceback), or a short reason
    traceback: str = ""
    time: float = 0.0


def record(rank_failure: RankFailure, folder: str | Path | None = None) -> None:
    """Write one rank's failure as `rank-<n>.json` (atomically) into the record folder."""
    folder = folder or os.environ.get(RECORD_DIR_ENV)
    if not folder:
        return
    path = Path(folder) / f"rank-{rank_failure.rank}.json"
    fsutil.write_json(path, {**asdict(rank_failure), "time": rank_failure.time or time.time()},
                      mode=0o600)


def first_failure(folder: Path) -> RankFailure | None:
    """The earliest recorded failure in `folder` (the cause; later ones are usually fallout)."""
    failures = []
    for path in folder.glob("rank-*.json"):
        try:
            failures.append(RankFailure(**json.loads(path.read_text())))
        except (OSError, ValueError, TypeError):
            continue
    return min(failures, key=lambda f: (f.time, f.rank), default=None)


def reason(host: str, rank: int | None, exit_code: int, exception: str, details: str = "") -> str:
    """The failure text: headline first, so host, rank, code and exception fit in 1024 chars."""
    where = f"host {host}" + (f", rank {rank}" if rank is not None else "")
    headline = f"{where}, exit code {exit_code}: {exception.strip()}"[: REASON_CHARS - 24]
    return headline + (f"\n\n{details.strip()}\n" if details.strip() else "\n")


def write_failure(output_dir: Path, text: str) -> None:
    """Write `output/failure` (SageMaker reads its first 1024 characters)."""
    output_dir.mkdir(parents=True, exist_ok=True)
    (output_dir / "failure").write_text(text)
