"""The state document of a local job (`state.json`) and the only way to change its status.

Times are epoch seconds. Every status change goes through `move`, which enforces the allowed
moves of `ddpjob.job_status` and keeps SageMaker's `SecondaryStatusTransitions`.
"""

from __future__ import annotations

import time
from typing import Any

from ddpjob.job_status import SecondaryStatus, check_move

# SageMaker's wording of each secondary status, shown as the transition's StatusMessage.
MESSAGES = {
    SecondaryStatus.STARTING: "Preparing the instances for training",
    SecondaryStatus.DOWNLOADING: "Downloading the code, input data and checkpoints",
    SecondaryStatus.TRAINING: "Training in progress",
    SecondaryStatus.UPLOADING: "Uploading generated training model",
    SecondaryStatus.STOPPING: "Stopping the training job",
    SecondaryStatus.COMPLETED: "Training job completed",
    SecondaryStatus.FAILED: "Training job failed",
    SecondaryStatus.STOPPED: "The training job has stopped",
    SecondaryStatus.MAX_RUNTIME_EXCEEDED: "The job exceeded MaxRuntimeInSeconds and was stopped",
}


def new_state(name: str, now: float | None = None) -> dict[str, Any]:
    """The state of a job that was just created (InProgress / Starting)."""
    now = time.time() if now is None else now
    status = SecondaryStatus.STARTING
    first = {"Status": status.value, "StartTime": now, "StatusMessage": MESSAGES[status]}
    return {
        "name": name,
        "secondary_status": status.value,
        "transitions": [first],
        "creation_time": now,
        "last_modified_time": now,
        "training_start_time": None,
        "training_end_time": None,
        "failure_reason": None,
        "supervisor_pid": None,
        "hosts": {},  # host -> {"pid": int, "exit_code": int | None}
    }


def status(state: dict[str, Any]) -> SecondaryStatus:
    """The job's secondary status."""
    return SecondaryStatus(state["secondary_status"])


def move(
    state: dict[str, Any], new: SecondaryStatus, message: str | None = None,
    now: float | None = None,
) -> None:  # fmt: skip
    """Move the job to `new` (InvalidTransition when not allowed), recording the transition."""
    current = status(state)
    check_move(current, new)
    now = time.time() if now is None else now
    transitions = state["transitions"]
    if transitions and "EndTime" not in transitions[-1]:
        transitions[-1]["EndTime"] = now
    entry = {"Status": new.value, "StartTime": now, "StatusMessage": message or MESSAGES[new]}
    if new.is_terminal:
        entry["EndTime"] = now
        state["training_end_time"] = now
    transitions.append(entry)
    if new is SecondaryStatus.TRAINING and state["training_start_time"] is None:
        state["training_start_time"] = now
    state["secondary_status"] = new.value
    state["last_modified_time"] = now


def note(state: dict[str, Any], message: str, now: float | None = None) -> bool:
    """Record `message` (a worker restart) as a new Training transition; only while Training."""
    if status(state) is not SecondaryStatus.TRAINING:
        return False
    now = time.time() if now is None else now
    state["transitions"][-1].setdefault("EndTime", now)
    state["transitions"].append({"Status": status(state).value, "StartTime": now,
                                 "StatusMessage": message})  # fmt: skip
    state["last_modified_time"] = now
    return True
