"""The supervisor's decision step, a pure function of what it sees."""

from __future__ import annotations

from ddpjob.job_status import EndCause, SecondaryStatus
from ddpjob.local.base.failure_cause import HostFailure
from ddpjob.local.run.decision import (
    SETTLE_S,
    Decision,
    Observation,
    decide,
    platform_failure,
    should_retry,
)

RUNNING = {"algo-1": None, "algo-2": None}


def _seen(**changes) -> Observation:
    fields = {"phases": {"algo-1": "Training", "algo-2": "Training"}, "exit_codes": RUNNING}
    return Observation(**{**fields, **changes})


def test_running_hosts_report_the_slowest_phase() -> None:
    assert decide(_seen()) == Decision(progress=SecondaryStatus.TRAINING)
    slow = _seen(phases={"algo-1": "Training", "algo-2": "Downloading"})
    assert decide(slow).progress is SecondaryStatus.DOWNLOADING
    one_done = _seen(phases={"algo-1": "Uploading", "algo-2": "Training"},
                     exit_codes={"algo-1": None, "algo-2": 0})
    assert decide(one_done).progress is SecondaryStatus.UPLOADING


def test_every_host_exited_0_is_done_without_an_end() -> None:
    assert decide(_seen(exit_codes={"algo-1": 0, "algo-2": 0})) == Decision(
        progress=SecondaryStatus.UPLOADING, done=True)


def test_a_failed_host_ends_the_job_and_is_named() -> None:
    decision = decide(_seen(exit_codes={"algo-1": None, "algo-2": 3}))
    assert (decision.end, decision.failed_host, decision.done) == (
        EndCause.HOST_FAILED, "algo-2", False)


def test_a_host_failed_of_a_consequence_leaves_its_peers_time_to_say_the_cause() -> None:
    failing = {"algo-1": None, "algo-2": 3}
    # Its peer may be failing of the cause itself: it gets SETTLE_S to end and say why.
    waiting = _seen(exit_codes=failing, cause_known=False, failed_for_s=SETTLE_S / 2)
    assert decide(waiting) == Decision()
    decision = decide(_seen(exit_codes=failing, cause_known=False, failed_for_s=SETTLE_S))
    assert (decision.end, decision.failed_host) == (EndCause.HOST_FAILED, "algo-2")
    ended = decide(_seen(exit_codes={"algo-1": 1, "algo-2": 3}, cause_known=False))
    assert (ended.end, ended.done) == (EndCause.HOST_FAILED, True)


def test_a_stop_comes_first_then_max_run_then_a_failure() -> None:
    failing = {"algo-1": 1, "algo-2": None}
    everything = _seen(exit_codes=failing, stop_requested=True, running_s=11, max_run_s=10)
    assert decide(everything).end is EndCause.STOP_REQUESTED
    too_long = _seen(exit_codes=failing, running_s=11, max_run_s=10)
    assert decide(too_long).end is EndCause.MAX_RUNTIME
    assert decide(_seen(running_s=9, max_run_s=10)).end is None


def test_once_ending_only_waits_for_the_hosts() -> None:
    ending = _seen(exit_codes={"algo-1": 143, "algo-2": None}, stop_requested=True,
                   ending=EndCause.STOP_REQUESTED)
    assert decide(ending) == Decision()
    ended = _seen(exit_codes={"algo-1": 143, "algo-2": 143}, ending=EndCause.STOP_REQUESTED)
    assert decide(ended) == Decision(done=True)


def test_max_wait_bounds_an_interruptions_notice_unless_a_stop_came() -> None:
    noticed = _seen(ending=EndCause.INTERRUPTED, waited_s=31, max_wait_s=30)
    assert decide(noticed) == Decision(end=EndCause.MAX_WAIT)
    assert decide(_seen(ending=EndCause.INTERRUPTED, waited_s=29, max_wait_s=30)) == Decision()
    stopped = _seen(ending=EndCause.INTERRUPTED, waited_s=31, max_wait_s=30, stop_requested=True)
    assert decide(stopped) == Decision()
    ended = _seen(ending=EndCause.MAX_WAIT, waited_s=31, max_wait_s=30)
    assert decide(ended) == Decision()  # decided once


# --- job retries (RetryStrategy): only a platform failure, only while attempts are left -----

def _killed(host: str = "algo-2", at: float = 10.0) -> HostFailure:
    """A host whose ddpjob-train was SIGKILLed before it wrote anything (read_host's view)."""
    return HostFailure(host, f"host {host}: ddpjob-train was killed by SIGKILL", at,
                       consequence=False, killed_by="SIGKILL")


_USER_ERROR = HostFailure("algo-2", "host algo-2, rank 3, exit code 1: ValueError: boom", 10.0)
_FALLOUT = HostFailure("algo-1", "host algo-1, exit code 143: stopped by SIGTERM", 12.0)


def test_a_host_killed_without_a_word_is_the_platforms_failure() -> None:
    cause = platform_failure(EndCause.HOST_FAILED, [_FALLOUT, _killed()], signalled_at=11.0)
    assert cause == _killed()
    assert platform_failure(EndCause.HOST_FAILED, [_killed()], signalled_at=None) == _killed()


def test_a_user_failure_or_our_own_signal_is_never_the_platforms() -> None:
    # The user's script failed first: never retried (SageMaker retries internal errors only).
    assert platform_failure(EndCause.HOST_FAILED, [_USER_ERROR, _killed(at=11.0)], None) is None
    # Killed after the supervisor signalled the hosts (its own SIGKILL after the grace).
    assert platform_failure(EndCause.HOST_FAILED, [_killed(at=12.0)], signalled_at=11.0) is None
    # The job was being stopped or ran out of time: the hosts' deaths are ours.
    for cause in (EndCause.STOP_REQUESTED, EndCause.MAX_RUNTIME, None):
        assert platform_failure(cause, [_killed()], signalled_at=None) is None


def test_a_platform_failure_is_retried_until_the_attempts_are_spent() -> None:
    assert should_retry(_killed(), attempts_done=0, max_attempts=1)
    assert should_retry(_killed(), attempts_done=2, max_attempts=3)
    assert not should_retry(_killed(), attempts_done=1, max_attempts=1)
    assert not should_retry(_killed(), attempts_done=0, max_attempts=0)  # no RetryStrategy
    assert not should_retry(None, attempts_done=0, max_attempts=30)
