"""A training job's states as SageMaker names them, the allowed moves, and pure rules over them.

`TrainingJobStatus` is the primary status; `SecondaryStatus` refines it. Each secondary status
belongs to exactly one primary status (SageMaker's DescribeTrainingJob documentation), so the
local backend only ever stores the secondary status and derives the primary one.
"""

from __future__ import annotations

import datetime as dt
import enum
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, TypedDict

from ddpjob_runtime.shared import contract


class TrainingJobStatus(str, enum.Enum):
    """DescribeTrainingJob's `TrainingJobStatus`: equal to, and printed as, its value
    (`TrainingJobStatus.FAILED == "Failed"`), so code that compares strings keeps working."""

    IN_PROGRESS = "InProgress"
    COMPLETED = "Completed"
    FAILED = "Failed"
    STOPPING = "Stopping"
    STOPPED = "Stopped"
    DELETING = "Deleting"

    __str__ = str.__str__  # "Failed", not "TrainingJobStatus.FAILED" (Python < 3.11 too)
    __format__ = str.__format__

    @classmethod
    def _missing_(cls, value: object) -> TrainingJobStatus | None:
        """A status a newer service answers: kept as it is spelled, not an error."""
        if not isinstance(value, str):
            return None
        member = str.__new__(cls, value)
        member._name_, member._value_ = value.upper(), value
        return member


#: The one set of ended `TrainingJobStatus` values.
TERMINAL_STATUSES = frozenset({TrainingJobStatus.COMPLETED, TrainingJobStatus.FAILED,
                               TrainingJobStatus.STOPPED})


class SecondaryStatus(str, enum.Enum):
    """DescribeTrainingJob's `SecondaryStatus`, as far as a local job goes through them."""

    STARTING = "Starting"
    DOWNLOADING = "Downloading"
    TRAINING = "Training"
    UPLOADING = "Uploading"
    STOPPING = "Stopping"
    COMPLETED = "Completed"
    FAILED = "Failed"
    STOPPED = "Stopped"
    MAX_RUNTIME_EXCEEDED = "MaxRuntimeExceeded"
    RESTARTING = "Restarting"  # a retry after an internal error (RetryStrategy), then Starting
    INTERRUPTED = "Interrupted"  # spot capacity reclaimed: the hosts end, then Restarting
    MAX_WAIT_TIME_EXCEEDED = "MaxWaitTimeExceeded"  # a spot job past MaxWaitTimeInSeconds

    @property
    def primary(self) -> TrainingJobStatus:
        """The primary status this secondary status belongs to: a running, interrupted or
        restarting job is InProgress, MaxRuntimeExceeded and MaxWaitTimeExceeded are Stopped,
        the others share their primary's name."""
        if self in _RUNNING or self in (SecondaryStatus.RESTARTING, SecondaryStatus.INTERRUPTED):
            return TrainingJobStatus.IN_PROGRESS
        if self in (SecondaryStatus.MAX_RUNTIME_EXCEEDED, SecondaryStatus.MAX_WAIT_TIME_EXCEEDED):
            return TrainingJobStatus.STOPPED
        return TrainingJobStatus(self.value)

    @property
    def is_terminal(self) -> bool:
        """True once the job can no longer change."""
        return self.primary in TERMINAL_STATUSES


@dataclass(frozen=True)
class JobDescription:
    """What a scheduler's `describe` answers: the DescribeTrainingJob response, typed where
    ddpjob reads it; `raw` is the whole response (what the official SDK's `describe()` gives)."""

    name: str
    status: TrainingJobStatus
    secondary_status: str
    failure_reason: str
    creation_time: dt.datetime
    training_start_time: dt.datetime | None
    training_end_time: dt.datetime | None
    model_artifacts: str | None
    metric_names: tuple[str, ...]
    raw: Mapping[str, Any]

    @classmethod
    def from_response(cls, response: Mapping[str, Any]) -> JobDescription:
        """The description of a DescribeTrainingJob response (SageMaker's or the local one)."""
        definitions = (response.get("AlgorithmSpecification") or {}).get("MetricDefinitions")
        return cls(
            name=response["TrainingJobName"],
            status=TrainingJobStatus(response["TrainingJobStatus"]),
            secondary_status=response.get("SecondaryStatus", ""),
            failure_reason=response.get("FailureReason", ""),
            creation_time=response["CreationTime"],
            training_start_time=response.get("TrainingStartTime"),
            training_end_time=response.get("TrainingEndTime"),
            model_artifacts=(response.get("ModelArtifacts") or {}).get("S3ModelArtifacts"),
            metric_names=tuple(d["Name"] for d in definitions or ()),
            raw=response)

    @property
    def is_terminal(self) -> bool:
        """True once the job has ended (Completed, Failed, Stopped)."""
        return self.status in TERMINAL_STATUSES

    @property
    def attempts(self) -> int:
        """How many times the job's hosts started: 1, plus one per restart (a retry after an
        internal error, a spot interruption)."""
        history = self.raw.get("SecondaryStatusTransitions") or ()
        return 1 + sum(t.get("Status") == SecondaryStatus.RESTARTING.value for t in history)

    @property
    def interruptions(self) -> list[Mapping[str, Any]]:
        """The `Interrupted` entries of the job's SecondaryStatusTransitions (spot reclaims)."""
        history = self.raw.get("SecondaryStatusTransitions") or ()
        return [t for t in history if t.get("Status") == SecondaryStatus.INTERRUPTED.value]


S = SecondaryStatus
# The progress of a running job only moves forward; any running state may fail or be stopped,
# or be retried after an internal error: Restarting, then Starting again (SageMaker's
# RetryStrategy documentation: "When the job is retried, its SecondaryStatus is changed to
# STARTING"). A spot job is Interrupted when its capacity is reclaimed, then Restarting once
# its hosts ended (or Completed when they had finished), until MaxWaitTimeInSeconds ends it.
_RUNNING = (S.STARTING, S.DOWNLOADING, S.TRAINING, S.UPLOADING)
_ENDINGS = (S.STOPPING, S.FAILED, S.MAX_RUNTIME_EXCEEDED, S.MAX_WAIT_TIME_EXCEEDED)
_AGAIN = (S.RESTARTING, S.INTERRUPTED)
ALLOWED_MOVES: dict[SecondaryStatus, frozenset[SecondaryStatus]] = {
    S.STARTING: frozenset({S.DOWNLOADING, S.TRAINING, S.UPLOADING, S.COMPLETED, *_AGAIN,
                           *_ENDINGS}),
    S.DOWNLOADING: frozenset({S.TRAINING, S.UPLOADING, S.COMPLETED, *_AGAIN, *_ENDINGS}),
    S.TRAINING: frozenset({S.UPLOADING, S.COMPLETED, *_AGAIN, *_ENDINGS}),
    S.UPLOADING: frozenset({S.COMPLETED, *_AGAIN, *_ENDINGS}),
    S.INTERRUPTED: frozenset({S.RESTARTING, S.COMPLETED, *_ENDINGS}),
    S.RESTARTING: frozenset({S.STARTING, *_ENDINGS}),
    # A stop request wins over whatever the hosts do next, except a failure that already
    # happened (SageMaker reports a job that failed while stopping as Failed).
    S.STOPPING: frozenset({S.STOPPED, S.FAILED}),
    S.COMPLETED: frozenset(),
    S.FAILED: frozenset(),
    S.STOPPED: frozenset(),
    S.MAX_RUNTIME_EXCEEDED: frozenset(),
    S.MAX_WAIT_TIME_EXCEEDED: frozenset(),
}


class MetricRow(TypedDict):
    """One point of a job's metric series (`metric_series`): seconds since training started."""

    timestamp: float
    metric_name: str
    value: float


class InvalidTransition(ValueError):
    """A move the state machine does not allow (a bug in whoever asked for it)."""


def check_move(current: SecondaryStatus, new: SecondaryStatus) -> None:
    """Raise InvalidTransition unless `current` -> `new` is allowed."""
    if new not in ALLOWED_MOVES[current]:
        raise InvalidTransition(f"a training job cannot move from {current.value} to {new.value}")


def job_progress(host_phases: Iterable[str]) -> SecondaryStatus:
    """The running job's secondary status from its hosts' phases.

    The job is as far as its slowest host: it is Training once every host trains, Uploading
    while the first host uploads and the others are done. A host that exited 0 counts as "Done".
    """
    phases = contract.HOST_PHASES  # as the runtime writes them to its status file, then "Done"
    slowest = min((phases.index(p) for p in host_phases), default=0)
    return SecondaryStatus(phases[min(slowest, phases.index("Uploading"))])


def advance(current: SecondaryStatus, progress: SecondaryStatus) -> SecondaryStatus:
    """The status after observing `progress`: never backwards, never out of a stop or an end."""
    if current not in _RUNNING or progress not in _RUNNING:
        return current
    return progress if _RUNNING.index(progress) > _RUNNING.index(current) else current


class EndCause(str, enum.Enum):
    """What made the supervisor end the hosts before they all finished on their own."""

    HOST_FAILED = "host failed"
    STOP_REQUESTED = "stop requested"
    MAX_RUNTIME = "max runtime exceeded"
    MAX_WAIT = "max wait time exceeded"
    INTERRUPTED = "spot interruption"


def ending(exit_codes: Iterable[int], cause: EndCause | None) -> SecondaryStatus:
    """How a job ends once every host exited, given what (if anything) ended it first.

    A stop makes hosts exit non-zero on purpose, so the first cause decides, not the codes.
    """
    if cause is EndCause.MAX_RUNTIME:
        return S.MAX_RUNTIME_EXCEEDED
    if cause is EndCause.MAX_WAIT:
        return S.MAX_WAIT_TIME_EXCEEDED
    if cause is EndCause.STOP_REQUESTED:
        return S.STOPPED
    if cause in (None, EndCause.INTERRUPTED) and all(code == 0 for code in exit_codes):
        return S.COMPLETED  # an interruption that came after every host had finished
    return S.FAILED
