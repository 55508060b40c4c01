"""The host's current phase, written atomically to platform.json's `status_file`."""

from __future__ import annotations

import time
from pathlib import Path

from ddpjob_runtime import contract, fsutil

PHASES = contract.REPORTED_PHASES


def write_phase(status_file: str | Path | None, phase: str) -> None:
    """Replace `status_file` with `{"phase": phase, "time": <epoch s>}`; no-op without a file."""
    if not status_file:
        return
    if phase not in PHASES:
        raise ValueError(f"unknown phase {phase!r}; allowed: {', '.join(PHASES)}")
    # A reader in another process must never see a half-written file.
    fsutil.write_json(status_file, {"phase": phase, "time": time.time()}, mode=0o600)
