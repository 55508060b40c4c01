"""What the supervisor does next, from what it sees: a pure function, tested without any job.

The supervisor observes its hosts (phases, exit codes), the stop request and the clock, asks
`decide`, and applies the answer; it holds no rule of its own.
"""

from __future__ import annotations

from dataclasses import dataclass

from ddpjob.job_status import EndCause, SecondaryStatus, job_progress


@dataclass(frozen=True)
class Observation:
    """One look at a running job."""

    phases: dict[str, str]  # host -> phase from its status file ("Starting" before it wrote)
    exit_codes: dict[str, int | None]  # host -> exit code, None while it runs
    stop_requested: bool = False
    running_s: float = 0.0  # since training started (or the job was created)
    max_run_s: float | None = None  # MaxRuntimeInSeconds
    ending: EndCause | None = None  # what already made the supervisor end the hosts


@dataclass(frozen=True)
class Decision:
    """What to do: start ending the hosts (and why), or record progress; `done` once all ended."""

    end: EndCause | None = None
    failed_host: str | None = None  # the first host seen exiting non-zero
    progress: SecondaryStatus | None = None
    done: bool = False


def decide(seen: Observation) -> Decision:
    """The next step for the job seen in `seen`.

    Once the hosts are being ended nothing else is decided until they all exited. A stop
    request comes first, then MaxRuntimeInSeconds, then a host that failed; otherwise the job
    is as far as its slowest host (a host that exited 0 is "Done").
    """
    done = all(code is not None for code in seen.exit_codes.values())
    if seen.ending is not None:
        return Decision(done=done)
    if seen.stop_requested:
        return Decision(end=EndCause.STOP_REQUESTED, done=done)
    if seen.max_run_s and seen.running_s > seen.max_run_s:
        return Decision(end=EndCause.MAX_RUNTIME, done=done)
    failed = [host for host, code in seen.exit_codes.items() if code not in (None, 0)]
    if failed:
        return Decision(end=EndCause.HOST_FAILED, failed_host=failed[0], done=done)
    phases = ["Done" if seen.exit_codes.get(host) == 0 else phase
              for host, phase in seen.phases.items()]
    return Decision(progress=job_progress(phases), done=done)
