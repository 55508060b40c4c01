"""What the supervisor does next, from what it sees: a pure function, tested without any job.

The supervisor observes its hosts (phases, exit codes), the stop request and the clock, asks
`decide`, and applies the answer; it holds no rule of its own.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ddpjob.job_status import EndCause, SecondaryStatus, job_progress
from ddpjob.local.base.failure_cause import HostFailure, choose

#: How long the other hosts may go on after hosts failed of consequences only (a peer's
#: connection closed), to end of themselves: a rank's error ends its peers' collectives too,
#: and a peer's host can exit first; ending the failing host before its agent recorded the
#: error would name a consequence as the cause.
SETTLE_S = 5.0


@dataclass(frozen=True)
class Observation:
    """One look at a running job."""

    phases: dict[str, str]  # host -> phase from its status file ("Starting" before it wrote)
    exit_codes: dict[str, int | None]  # host -> exit code, None while it runs
    stop_requested: bool = False
    running_s: float = 0.0  # since training started (or the job was created)
    max_run_s: float | None = None  # MaxRuntimeInSeconds
    ending: EndCause | None = None  # what already made the supervisor end the hosts
    waited_s: float = 0.0  # since the job was created
    max_wait_s: float | None = None  # MaxWaitTimeInSeconds of a spot job
    interruption: Mapping[str, Any] | None = None  # asked for or planned, due now
    failed_for_s: float = 0.0  # since a host was first seen exiting non-zero
    cause_known: bool = True  # a failed host's failure is a cause, not a consequence


@dataclass(frozen=True)
class Decision:
    """What to do: start ending the hosts (and why), or record progress; `done` once all ended."""

    end: EndCause | None = None
    failed_host: str | None = None  # the first host seen exiting non-zero
    progress: SecondaryStatus | None = None
    done: bool = False
    interrupt: Mapping[str, Any] | None = None  # the interruption to fire now


def decide(seen: Observation) -> Decision:
    """The next step for the job seen in `seen`.

    Once the hosts are being ended nothing else is decided until they all exited, but
    MaxWaitTimeInSeconds, which bounds an interruption's notice too. A stop request comes
    first, then MaxWaitTimeInSeconds, MaxRuntimeInSeconds, an interruption (with notice it ends
    the hosts; a lost host is only killed: its failure comes next), then a host that failed
    (the others ended at once, or, while only consequences are known, once they all exited or
    SETTLE_S passed); otherwise the job is as far as its slowest host (exited 0: "Done").
    """
    done = all(code is not None for code in seen.exit_codes.values())
    past_max_wait = bool(seen.max_wait_s and seen.waited_s > seen.max_wait_s)
    if seen.ending is EndCause.INTERRUPTED and past_max_wait and not seen.stop_requested:
        return Decision(end=EndCause.MAX_WAIT, done=done)
    if seen.ending is not None:
        return Decision(done=done)
    if seen.stop_requested:
        return Decision(end=EndCause.STOP_REQUESTED, done=done)
    if past_max_wait:
        return Decision(end=EndCause.MAX_WAIT, done=done)
    if seen.max_run_s and seen.running_s > seen.max_run_s:
        return Decision(end=EndCause.MAX_RUNTIME, done=done)
    if seen.interruption is not None and not done:
        end = EndCause.INTERRUPTED if seen.interruption["notice"] else None
        return Decision(end=end, interrupt=seen.interruption)
    failed = [host for host, code in seen.exit_codes.items() if code not in (None, 0)]
    if failed and (done or seen.cause_known or seen.failed_for_s >= SETTLE_S):
        return Decision(end=EndCause.HOST_FAILED, failed_host=failed[0], done=done)
    if failed:
        return Decision()
    phases = ["Done" if seen.exit_codes.get(host) == 0 else phase
              for host, phase in seen.phases.items()]
    return Decision(progress=job_progress(phases), done=done)


def platform_failure(
    ended_by: EndCause | None, failures: list[HostFailure], signalled_at: float | None
) -> HostFailure | None:
    """The failure of the platform that ended the job, if that is what ended it: the first
    failure is a host's `ddpjob-train` killed by a signal the supervisor had not sent (it
    wrote no `output/failure`). A failure of the user's script is never the platform's."""
    cause = choose(failures) if ended_by is EndCause.HOST_FAILED else None
    if cause is None or cause.killed_by is None:
        return None
    return cause if signalled_at is None or cause.written < signalled_at else None


def should_retry(cause: HostFailure | None, attempts_done: int, max_attempts: int) -> bool:
    """Whether the job starts again (RetryStrategy.MaximumRetryAttempts), as SageMaker
    retries a job after an internal error: only for a platform failure, `max_attempts` times."""
    return cause is not None and attempts_done < max_attempts
