"""`wait_for_job` / `logs_for_job` of every session, with the official SageMaker SDK's semantics.

A job that ends Failed raises JobFailedError (the official SDK's UnexpectedStatusException);
one that ends Stopped is returned with a warning, as the official SDK does. Log lines come from
the session's own `logs` (CloudWatch or the local host logs), printed as `[algo-1] line`.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections.abc import Iterator
from typing import Any, TypeVar

from ddpjob import log_lines, validation
from ddpjob.errors import UserInputError
from ddpjob.job_status import JobDescription, TrainingJobStatus
from ddpjob.training_job import (
    JobControl,
    TrainingJob,
    WaitTimeoutError,  # noqa: F401 - where callers import it from
    job_failure,
    print_times,
)

logger = logging.getLogger(__name__)
T = TypeVar("T")

#: `log_type` values of the official SDK -> whether the training log lines are printed. We run
#: no Debugger/Profiler rules, so "Rules" has nothing to print.
LOG_TYPES = {"All": True, "Training": True, "Rules": False, "None": False,
             True: True, False: False}


def shows_training_logs(log_type: bool | str) -> bool:
    """Whether `log_type` asks for the training log lines (UserInputError when unknown)."""
    if isinstance(log_type, bool) or (isinstance(log_type, str) and log_type in LOG_TYPES):
        return LOG_TYPES[log_type]
    raise UserInputError(f"log_type {log_type!r} is not one of 'All', 'Training', 'Rules', "
                         f"'None' (or True/False)")


def checked_end(job: JobDescription) -> dict[str, Any]:
    """The DescribeTrainingJob response of an ended job; JobFailedError when it Failed, a
    warning when Stopped."""
    if job.status is TrainingJobStatus.FAILED:
        raise job_failure(job)  # type: ignore[misc] - a Failed job always has one
    if job.status is TrainingJobStatus.STOPPED:
        logger.warning("Job %s ended with status 'Stopped' rather than 'Completed': it may have "
                       "timed out or been stopped early", job.name)
    return dict(job.raw)


def _until(items: Iterator[T], deadline: float | None) -> Iterator[T]:
    """`items` until they end or the monotonic `deadline` passes (even while none arrives)."""
    if deadline is None:
        yield from items
        return
    found: queue.Queue = queue.Queue(maxsize=1000)
    done, stop = object(), threading.Event()

    def pump() -> None:  # a follower blocks between lines; this thread waits for it
        try:
            for item in items:
                if stop.is_set():
                    return
                found.put(item)
        finally:
            found.put(done)

    threading.Thread(target=pump, daemon=True, name="ddpjob-logs").start()
    try:
        while (left := deadline - time.monotonic()) > 0:
            try:
                item = found.get(timeout=left)
            except queue.Empty:
                return
            if item is done:
                return
            yield item
    finally:
        stop.set()  # the follower ends at its next line or when the job ends


def wait_for_job(session: JobControl, job: str, poll: float = 5) -> dict[str, Any]:
    """See `base_session.BaseSession.wait_for_job`."""
    validation.seconds(poll, "poll")
    return checked_end(TrainingJob(session, job, poll_seconds=poll).until_ended())


def logs_for_job(session: JobControl, job_name: str, wait: bool = False, poll: float = 10,
                 log_type: bool | str = "All", timeout: float | None = None) -> dict[str, Any]:
    """See `base_session.BaseSession.logs_for_job`."""
    show = shows_training_logs(log_type)
    validation.seconds(poll, "poll")
    if timeout is not None:
        validation.seconds(timeout, "timeout")
    deadline = None if timeout is None else time.monotonic() + timeout
    if show:
        for host, line in _until(session.logs(job_name, follow=wait), deadline):
            print(log_lines.shown(host, line), flush=True)
    if not wait:
        return dict(session.describe(job_name).raw)
    ended = checked_end(TrainingJob(session, job_name, poll_seconds=poll).until_ended(deadline))
    print_times(ended)
    return ended
