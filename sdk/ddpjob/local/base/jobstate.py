"""A local job's state (`state.json`): a typed record whose methods are its only transitions.

Times are epoch seconds. `JobState._set_state` is the one place a status changes: it enforces
the allowed moves of `ddpjob.job_status` and keeps SageMaker's `SecondaryStatusTransitions`.
The other methods say what happened (progress, a stop request, the end, a lost supervisor) and
decide from the current status whether it changes anything; each returns whether it did.
"""

from __future__ import annotations

import copy
import dataclasses
import time
from dataclasses import dataclass, field
from typing import Any

from ddpjob.job_status import SecondaryStatus, advance, check_move

S = SecondaryStatus
# SageMaker's wording of each secondary status, shown as the transition's StatusMessage.
MESSAGES = {
    S.STARTING: "Preparing the instances for training",
    S.DOWNLOADING: "Downloading the code, input data and checkpoints",
    S.TRAINING: "Training in progress",
    S.UPLOADING: "Uploading generated training model",
    S.STOPPING: "Stopping the training job",
    S.COMPLETED: "Training job completed",
    S.FAILED: "Training job failed",
    S.STOPPED: "The training job has stopped",
    S.MAX_RUNTIME_EXCEEDED: "The job exceeded MaxRuntimeInSeconds and was stopped",
    S.RESTARTING: "Restarting the training job after an internal error",
    S.INTERRUPTED: "The training job was interrupted: spot capacity was reclaimed",
    S.MAX_WAIT_TIME_EXCEEDED: "The job exceeded MaxWaitTimeInSeconds and was stopped",
}


@dataclass
class HostRecord:
    """One simulated host's process: its pid, and its exit code once it ended."""

    pid: int | None = None
    exit_code: int | None = None


@dataclass
class JobState:
    """What a local job's status is and how it got there; `state.json` holds `to_json()`."""

    name: str
    status: SecondaryStatus
    creation_time: float
    last_modified_time: float
    transitions: list[dict[str, Any]] = field(default_factory=list)
    training_start_time: float | None = None
    training_end_time: float | None = None
    failure_reason: str | None = None
    supervisor_pid: int | None = None
    supervisor_started: int | None = None  # with the pid, the supervisor's identity (`proctree`)
    hosts: dict[str, HostRecord] = field(default_factory=dict)
    # Attempts (job retries, spot restarts): the current one, when its training started, the
    # seconds earlier attempts trained (TrainingTimeInSeconds, and what MaxRuntime bounds).
    attempt: int = 1
    attempt_start_time: float | None = None
    training_seconds: float = 0.0
    # Interruptions (`interruptions`): planned per attempt, the one asked for and not yet
    # fired (`interrupt`), and those fired.
    schedule: list[dict[str, Any]] = field(default_factory=list)
    pending: dict[str, Any] | None = None
    interruptions: list[dict[str, Any]] = field(default_factory=list)
    tuning_job_arn: str | None = None  # the tuning job whose trial this job is

    @classmethod
    def new(cls, name: str, now: float | None = None) -> JobState:
        now = time.time() if now is None else now
        message = MESSAGES[S.STARTING]
        return cls(name, S.STARTING, now, now,
                   [{"Status": S.STARTING.value, "StartTime": now, "StatusMessage": message}])

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> JobState:
        fields = {**data, "status": SecondaryStatus(data["status"])}
        fields["hosts"] = {h: HostRecord(**r) for h, r in data.get("hosts", {}).items()}
        return cls(**fields)

    def to_json(self) -> dict[str, Any]:
        data = dataclasses.asdict(self)
        data["status"] = self.status.value
        return data

    @property
    def is_terminal(self) -> bool:
        return self.status.is_terminal

    # --- the one place a status changes --------------------------------------------------

    def _set_state(self, new: SecondaryStatus, message: str | None, now: float | None) -> bool:
        check_move(self.status, new)
        now = time.time() if now is None else now
        if self.transitions and "EndTime" not in self.transitions[-1]:
            self.transitions[-1]["EndTime"] = now
        entry = {"Status": new.value, "StartTime": now, "StatusMessage": message or MESSAGES[new]}
        if new.is_terminal:
            entry["EndTime"] = self.training_end_time = now
        self.transitions.append(entry)
        if new is S.TRAINING and self.training_start_time is None:
            self.training_start_time = now
        if new is S.TRAINING and self.attempt_start_time is None:
            self.attempt_start_time = now
        if (new is S.RESTARTING or new.is_terminal) and self.attempt_start_time is not None:
            self.training_seconds += now - self.attempt_start_time  # the attempt's hosts ended
            self.attempt_start_time = None
        self.status = new
        self.last_modified_time = now
        return True  # what every transition returns once it moved

    # --- transitions ---------------------------------------------------------------------

    def progress(self, observed: SecondaryStatus, now: float | None = None) -> bool:
        """The hosts are as far as `observed`: move forward to it (never backwards)."""
        new = advance(self.status, observed)
        if new is self.status:
            return False
        return self._set_state(new, None, now)

    def request_stop(self, now: float | None = None) -> bool:
        """A stop was asked for: Stopping, unless the job is already stopping or has ended."""
        if self.status is S.STOPPING or self.is_terminal:
            return False
        return self._set_state(S.STOPPING, None, now)

    def end(self, final: SecondaryStatus, reason: str | None, now: float | None = None) -> bool:
        """The job ended as `final` (with `reason` unless stopped); a stop asked for meanwhile
        wins over anything but a failure. False when another process declared the end first."""
        if self.is_terminal:
            return False
        if self.status is S.STOPPING and final is not S.FAILED:
            final = S.STOPPED
        if final is not S.STOPPED:
            self.failure_reason = reason
        return self._set_state(final, reason.split("\n", 1)[0] if reason else None, now)

    def retry(self, message: str, now: float | None = None) -> bool:
        """The platform failed and the job is retried (RetryStrategy): Restarting, with
        `message` saying why. False (no retry) once a stop was asked for or the job ended."""
        if self.status is S.STOPPING or self.is_terminal:
            return False
        return self._set_state(S.RESTARTING, message, now)

    def start_again(self, now: float | None = None) -> bool:
        """The retried job's hosts start again, the next attempt: Starting. False unless it is
        Restarting (a stop asked for meanwhile wins)."""
        if self.status is not S.RESTARTING:
            return False
        self.attempt += 1
        return self._set_state(S.STARTING, None, now)

    def training_s(self, now: float) -> float:
        """Seconds the job trained so far, over all its attempts."""
        current = now - self.attempt_start_time if self.attempt_start_time is not None else 0.0
        return self.training_seconds + current

    def request_interruption(self, host: str | None, notice: bool, source: str) -> bool:
        """Ask the supervisor to interrupt the job (`host`: one host; `notice`: a spot reclaim,
        else a lost host; `source`: who asked). False when it cannot be now: the job ended, is
        stopping, interrupted or restarting, or an interruption is already asked for."""
        if self.is_terminal or self.pending is not None or \
                self.status in (S.STOPPING, S.INTERRUPTED, S.RESTARTING):
            return False
        self.pending = {"host": host, "notice": notice, "source": source}
        return True

    def interrupted(self, event: dict[str, Any], message: str,
                    now: float | None = None) -> bool:
        """The supervisor fired the interruption `event` (host, notice, source): with notice
        the job is Interrupted, without it the lost host is noted in the history. False (the
        event is dropped) once a stop was asked for or the job ended."""
        if self.status is S.STOPPING or self.is_terminal:
            return False
        self.pending = None
        now = time.time() if now is None else now
        self.interruptions.append({**event, "attempt": self.attempt, "time": now,
                                   "message": message})
        if event["notice"]:
            return self._set_state(S.INTERRUPTED, message, now)
        self.transitions[-1].setdefault("EndTime", now)
        self.transitions.append({"Status": self.status.value, "StartTime": now,
                                 "StatusMessage": message})
        self.last_modified_time = now
        return True

    def scheduled_fired(self) -> bool:
        """Whether the current attempt's planned interruption already fired."""
        return any(i["source"] == "schedule" and i["attempt"] == self.attempt
                   for i in self.interruptions)

    def note(self, message: str, now: float | None = None) -> bool:
        """Record `message` (a worker restart) in the history as a new Training entry; the
        status stays Training. False (nothing recorded) in any other status."""
        if self.status is not S.TRAINING:
            return False
        now = time.time() if now is None else now
        self.transitions[-1].setdefault("EndTime", now)
        self.transitions.append({"Status": S.TRAINING.value, "StartTime": now,
                                 "StatusMessage": message})  # fmt: skip
        self.last_modified_time = now
        return True

    def note_start(self, message: str) -> bool:
        """Say `message` (the job starts on a warm pool) on the current Starting entry of the
        history. False in any other status."""
        if self.status is not S.STARTING:
            return False
        self.transitions[-1]["StatusMessage"] = message
        return True

    def with_lost_supervisor(self, log_path: str) -> JobState:
        """What this running job is once its supervisor is gone (a copy: readers never write).

        A job that was stopping is Stopped; any other is Failed with an InternalServerError.
        """
        seen = copy.deepcopy(self)
        now = self.last_modified_time
        reason = (
            f"InternalServerError: the local supervisor of this job (pid {self.supervisor_pid}) "
            f"ended without finishing the job; see {log_path}"
        )
        seen.end(S.FAILED if self.status is not S.STOPPING else S.STOPPED, reason, now)
        return seen

    # --- records -------------------------------------------------------------------------

    def record_supervisor(self, pid: int, started: int | None) -> bool:
        self.supervisor_pid, self.supervisor_started = pid, started
        return True

    def record_hosts(self, pids: dict[str, int]) -> bool:
        self.hosts = {host: HostRecord(pid) for host, pid in pids.items()}
        return True

    def record_exit_codes(self, codes: dict[str, int | None]) -> bool:
        for host, code in codes.items():
            self.hosts.setdefault(host, HostRecord()).exit_code = code
        return True
