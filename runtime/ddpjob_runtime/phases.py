"""The host's current phase, written atomically to platform.json's `status_file`."""

from __future__ import annotations

import json
import os
import tempfile
import time
from pathlib import Path

PHASES = ("Downloading", "Training", "Uploading")
STATUS_FILE_ENV = "DDPJOB_STATUS_FILE"  # the status file, for the torchrun agent's restarts


def write_phase(status_file: str | Path | None, phase: str, message: str | None = None) -> None:
    """Replace `status_file` with `{"phase": phase, "time": <epoch s>}`; no-op without a file.

    `message` (e.g. `restart 1 of 2 after: ...`) goes into the job's status history.
    """
    if not status_file:
        return
    if phase not in PHASES:
        raise ValueError(f"unknown phase {phase!r}; allowed: {', '.join(PHASES)}")
    path = Path(status_file)
    path.parent.mkdir(parents=True, exist_ok=True)
    # A reader in another process must never see a half-written file: write aside, then rename.
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        with os.fdopen(fd, "w") as f:
            info = {"phase": phase, "time": time.time()}
            json.dump({**info, "message": message} if message else info, f)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
