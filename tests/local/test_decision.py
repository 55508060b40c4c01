"""The supervisor's decision step, a pure function of what it sees."""

from __future__ import annotations

from ddpjob.job_status import EndCause, SecondaryStatus
from ddpjob.local.decision import Decision, Observation, decide

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
