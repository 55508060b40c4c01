"""The host's current phase, written atomically to platform.json's `status_file`."""

from __future__ import annotations

import time
from pathlib import Path

from ddpjob_runtime.shared import contract, fsutil

STATUS_FILE_ENV = contract.ENV_STATUS_FILE


def write_phase(status_file: str | Path | None, phase: str, message: str | None = None) -> None:
    """Replace `status_file` with `{"phase": phase, "time": <epoch s>}`; no-op without a file.

    `message` (e.g. `restart 1 of 2 after: ...`) goes into the job's status history.
    """
    if not status_file:
        return
    if phase not in contract.REPORTED_PHASES:
        raise ValueError(f"unknown phase {phase!r}; allowed: {', '.join(contract.REPORTED_PHASES)}")
    info = {"phase": phase, "time": time.time()}
    # A reader in another process must never see a half-written file.
    fsutil.write_json(status_file, {**info, "message": message} if message else info, mode=0o600)
