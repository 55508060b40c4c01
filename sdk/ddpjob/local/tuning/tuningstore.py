"""The tuning jobs under `<home>/tuning-jobs`: the job store's folders, lock and atomic writes,
with a tuning job's request and state."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from ddpjob.local.base.jobstore import REQUEST, STATE, JobStore, read_json, write_json
from ddpjob.local.tuning.tuningstate import TuningState


class TuningStore(JobStore):
    """One folder per tuning job: `request.json` (as created), `state.json`, the lock."""

    FOLDER = "tuning-jobs"

    def create_tuning(self, request: dict[str, Any], state: TuningState) -> Path:
        """Write the request, then the first state (which makes it exist) of a reserved name."""
        target = self.job_dir(state.name)
        write_json(target / REQUEST, request)
        write_json(target / STATE, state.to_json())
        return target

    def state(self, name: str) -> TuningState:  # type: ignore[override]
        return TuningState.from_json(read_json(self.job_dir(name) / STATE))

    def update(self, name: str,  # type: ignore[override]
               change: Callable[[TuningState], bool]) -> TuningState:
        return super().update(name, change)  # type: ignore[arg-type, return-value]
