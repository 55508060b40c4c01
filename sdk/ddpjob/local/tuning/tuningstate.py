"""A local tuning job's state (`state.json` in its folder): its status, moved only through the
move table, and each trial's record as its controller last saw it.

Times are epoch seconds. A trial's record is what DescribeHyperParameterTuningJob and
ListTrainingJobsForHyperParameterTuningJob answer from: its training job's status and times, its
tuned values and its final objective.
"""

from __future__ import annotations

import dataclasses
import enum
import time
from dataclasses import dataclass, field
from typing import Any

from ddpjob.job_status import InvalidTransition


class TuningStatus(enum.Enum):
    """`HyperParameterTuningJobStatus` (Deleting and DeleteFailed: a local delete is at once)."""

    IN_PROGRESS = "InProgress"
    STOPPING = "Stopping"
    STOPPED = "Stopped"
    COMPLETED = "Completed"
    FAILED = "Failed"


S = TuningStatus
#: The one table of the moves a tuning job's status may make.
ALLOWED_TUNING_MOVES: dict[TuningStatus, frozenset[TuningStatus]] = {
    S.IN_PROGRESS: frozenset({S.STOPPING, S.COMPLETED, S.FAILED}),
    S.STOPPING: frozenset({S.STOPPED, S.FAILED}),
    S.STOPPED: frozenset(), S.COMPLETED: frozenset(), S.FAILED: frozenset(),
}
TERMINAL = frozenset(s for s, moves in ALLOWED_TUNING_MOVES.items() if not moves)


@dataclass
class Trial:
    """One trial: a training job of the tuning job, as its controller last saw it."""

    name: str
    values: dict[str, str]  # the tuned hyperparameters
    status: str = "InProgress"  # its TrainingJobStatus
    creation_time: float = 0.0
    start_time: float | None = None
    end_time: float | None = None
    objective: float | None = None  # the objective metric's final value, when it was printed
    failure_reason: str | None = None
    diagnosis: str | None = None  # why it has no objective (`diagnostics`)

    @property
    def ended(self) -> bool:
        return self.status in ("Completed", "Failed", "Stopped")

    @property
    def objective_status(self) -> str:
        """Succeeded (ended with an objective), Failed (ended without), Pending (running)."""
        if not self.ended:
            return "Pending"
        return "Succeeded" if self.status == "Completed" and self.objective is not None \
            else "Failed"


@dataclass
class TuningState:
    """Everything that changes while a tuning job runs."""

    name: str
    status: TuningStatus
    creation_time: float
    last_modified_time: float
    end_time: float | None = None
    failure_reason: str | None = None
    controller_pid: int | None = None
    controller_started: int | None = None  # with the pid, the controller's identity
    note: str | None = None  # why fewer trials than MaxParallelTrainingJobs run at once
    diagnostics: list[str] = field(default_factory=list)  # what its trials lost or got wrong
    trials: list[Trial] = field(default_factory=list)

    @classmethod
    def new(cls, name: str, now: float | None = None) -> TuningState:
        now = time.time() if now is None else now
        return cls(name, S.IN_PROGRESS, now, now)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> TuningState:
        return cls(**{**data, "status": TuningStatus(data["status"]),
                      "trials": [Trial(**t) for t in data.get("trials", [])]})

    def to_json(self) -> dict[str, Any]:
        return {**dataclasses.asdict(self), "status": self.status.value}

    @property
    def is_terminal(self) -> bool:
        return self.status in TERMINAL

    def move(self, new: TuningStatus, reason: str | None = None,
             now: float | None = None) -> bool:
        """The one place the status changes (InvalidTransition when the table forbids it)."""
        if new is self.status:
            return False
        if new not in ALLOWED_TUNING_MOVES[self.status]:
            raise InvalidTransition(f"a tuning job cannot move from {self.status.value} to "
                                    f"{new.value}")
        now = time.time() if now is None else now
        self.status, self.last_modified_time = new, now
        if new in TERMINAL:
            self.end_time = now
        if reason:
            self.failure_reason = reason
        return True

    def request_stop(self) -> bool:
        """StopHyperParameterTuningJob: Stopping (False when the job has ended already)."""
        return not self.is_terminal and self.move(S.STOPPING)

    def running(self) -> list[Trial]:
        return [t for t in self.trials if not t.ended]

    def succeeded(self) -> list[Trial]:
        return [t for t in self.trials if t.objective_status == "Succeeded"]
