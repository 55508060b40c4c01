"""Spot interruptions' pure rules: `Interruption` and its checks, the decision step, the state
moves and times of an interrupted job, its description. No job is started."""

from __future__ import annotations

import pytest
from ddpjob.errors import UserInputError
from ddpjob.job_status import EndCause, JobDescription, SecondaryStatus, TrainingJobStatus, ending
from ddpjob.local.base import interruptions
from ddpjob.local.base.interruptions import Interruption
from ddpjob.local.base.jobstate import JobState
from ddpjob.local.control import responses
from ddpjob.local.run.decision import Decision, Observation, decide

S = SecondaryStatus
HOSTS = ["algo-1", "algo-2"]
RUNNING = {"algo-1": None, "algo-2": None}
RECLAIM = {"host": None, "notice": True, "source": "interrupt"}
LOST = {"host": "algo-2", "notice": False, "source": "interrupt"}


def _request(spot: bool = True, max_run: int = 100, max_wait: int | None = 200) -> dict:
    stopping = {"MaxRuntimeInSeconds": max_run}
    if max_wait is not None:
        stopping["MaxWaitTimeInSeconds"] = max_wait
    return {"TrainingJobName": "j", "EnableManagedSpotTraining": spot,
            "StoppingCondition": stopping, "ResourceConfig": {"InstanceCount": 2},
            "OutputDataConfig": {"S3OutputPath": "file:///tmp/out"}}


def _seen(**changes: object) -> Observation:
    fields = {"phases": {"algo-1": "Training", "algo-2": "Training"}, "exit_codes": RUNNING}
    return Observation(**{**fields, **changes})  # type: ignore[arg-type]


# --- Interruption --------------------------------------------------------------------------

@pytest.mark.parametrize(("kwargs", "message"), [
    ({}, "exactly one of after_s"),
    ({"after_s": 1, "within_s": (1, 2)}, "exactly one of after_s"),
    ({"after_s": -1}, "after_s must be a finite number of seconds >= 0"),
    ({"after_s": True}, "after_s must be a finite number of seconds >= 0"),
    ({"after_s": 10**400}, "after_s must be a finite number of seconds >= 0, got an integer "
                           "of 401 digits"),
    ({"after_s": float("inf")}, "after_s must be a finite number of seconds >= 0, got inf"),
    ({"within_s": (0, 10**400)}, "within_s must be a finite number of seconds >= 0"),
    ({"within_s": (5, 5)}, r"low < high"),
    ({"within_s": (6, 5)}, r"low < high"),
    ({"within_s": (1,)}, r"within_s must be \(low, high\)"),
    ({"after_s": 1, "seed": "x"}, "seed must be an integer"),
    ({"after_s": 1, "host": 2}, "host must be a host name"),
    ({"after_s": 1, "notice": "yes"}, "notice must be True or False"),
])
def test_an_interruption_that_cannot_be_is_refused_when_made(kwargs: dict, message: str) -> None:
    with pytest.raises(UserInputError, match=message):
        Interruption(**kwargs)


def test_a_window_draws_the_same_moment_for_the_same_seed() -> None:
    first = Interruption(within_s=(10.0, 20.0), seed=7).moment()
    assert first == Interruption(within_s=(10.0, 20.0), seed=7).moment()
    assert 10.0 <= first <= 20.0
    assert Interruption(after_s=3).moment() == 3.0


@pytest.mark.parametrize(("items", "request_kwargs", "message"), [
    ([Interruption(after_s=1)], {"spot": False, "max_wait": None}, "does not use spot"),
    ([Interruption(after_s=1, host="algo-3")], {}, "'algo-3' is not a host of this job"),
    ([Interruption(after_s=100)], {}, "at or past the job's limit"),
    ([Interruption(within_s=(1, 150))], {"max_run": 200, "max_wait": 150},
     "at or past the job's limit"),
])
def test_a_schedule_that_cannot_fire_is_refused(items: list, request_kwargs: dict,
                                                message: str) -> None:
    with pytest.raises(UserInputError, match=message):
        interruptions.check_request(items, _request(**request_kwargs), HOSTS)


def test_a_lost_host_applies_to_any_job_and_defaults_to_the_last_host() -> None:
    lost = [Interruption(after_s=5, notice=False)]
    interruptions.check_request(lost, _request(spot=False, max_wait=None), HOSTS)
    assert interruptions.schedule(lost, HOSTS) == [
        {"at_s": 5.0, "host": "algo-2", "notice": False}]
    assert interruptions.schedule([Interruption(after_s=1)], HOSTS)[0]["host"] is None


def test_the_planned_interruption_of_an_attempt_is_due_once_its_moment_came() -> None:
    planned = interruptions.schedule([Interruption(after_s=5), Interruption(after_s=2)], HOSTS)
    assert interruptions.due(planned, 1, None) is None  # not training yet
    assert interruptions.due(planned, 1, 4.9) is None
    assert interruptions.due(planned, 1, 5.0) == planned[0]
    assert interruptions.due(planned, 2, 2.5) == planned[1]
    assert interruptions.due(planned, 3, 100.0) is None  # nothing planned for attempt 3


def test_a_job_spec_list_of_mappings_is_read_as_interruptions() -> None:
    items = interruptions.from_spec([{"within_s": [1, 2], "seed": 3}, {"after_s": 4,
                                     "notice": False}], "job spec x")
    assert items == [Interruption(within_s=(1, 2), seed=3), Interruption(after_s=4, notice=False)]
    assert len({*items, Interruption(within_s=(1.0, 2.0), seed=3)}) == 2  # a list became a tuple
    with pytest.raises(UserInputError, match="job spec x: each interruption is a mapping"):
        interruptions.from_spec([{"after": 4}], "job spec x")
    with pytest.raises(UserInputError, match="must be a list of mappings"):
        interruptions.from_spec({"after_s": 4}, "job spec x")


# --- the decision --------------------------------------------------------------------------

def test_an_interruption_with_notice_ends_the_hosts_a_lost_host_is_only_killed() -> None:
    assert decide(_seen(interruption=RECLAIM)) == Decision(end=EndCause.INTERRUPTED,
                                                           interrupt=RECLAIM)
    assert decide(_seen(interruption=LOST)) == Decision(interrupt=LOST)


def test_a_stop_and_the_limits_come_before_an_interruption() -> None:
    assert decide(_seen(interruption=RECLAIM, stop_requested=True)).end is \
        EndCause.STOP_REQUESTED
    waited = _seen(interruption=RECLAIM, waited_s=201, max_wait_s=200, running_s=201,
                   max_run_s=100)
    assert decide(waited).end is EndCause.MAX_WAIT  # checked before MaxRuntime
    assert decide(_seen(interruption=RECLAIM, running_s=101, max_run_s=100)).end is \
        EndCause.MAX_RUNTIME
    assert decide(_seen(interruption=RECLAIM, ending=EndCause.INTERRUPTED)) == Decision()


def test_an_interruption_after_every_host_ended_changes_nothing() -> None:
    done = decide(_seen(interruption=RECLAIM, exit_codes={"algo-1": 0, "algo-2": 0}))
    assert done.interrupt is None and done.done
    assert ending([0, 0], EndCause.INTERRUPTED) is S.COMPLETED
    assert ending([0, 0], EndCause.MAX_WAIT) is S.MAX_WAIT_TIME_EXCEEDED


# --- the state ------------------------------------------------------------------------------

def _interrupted_twice() -> JobState:
    state = JobState.new("j", now=0.0)
    state.progress(S.TRAINING, now=10.0)
    for attempt, start in ((1, 10.0), (2, 60.0)):
        assert state.request_interruption(None, True, "interrupt")
        assert not state.request_interruption(None, True, "interrupt")  # one at a time
        assert state.interrupted(dict(RECLAIM), f"reclaimed {attempt}", now=start + 20)
        assert not state.request_interruption("algo-1", False, "interrupt")  # Interrupted
        assert state.retry("again", now=start + 30)
        assert state.start_again(now=start + 35)
        assert state.progress(S.TRAINING, now=start + 50)
    return state


def test_each_attempt_counts_its_training_seconds_and_the_history_shows_the_interruptions(
) -> None:
    state = _interrupted_twice()
    assert state.attempt == 3 and state.pending is None
    assert state.training_seconds == 30 + 30  # each attempt from its Training to Restarting
    assert state.training_s(120.0) == 60 + 10
    assert state.end(S.COMPLETED, None, now=130.0)
    assert state.training_seconds == 80
    statuses = [t["Status"] for t in state.transitions]
    assert statuses == ["Starting", "Training", "Interrupted", "Restarting", "Starting",
                        "Training", "Interrupted", "Restarting", "Starting", "Training",
                        "Completed"]
    assert [i["attempt"] for i in state.interruptions] == [1, 2]
    assert JobState.from_json(state.to_json()) == state


def test_the_description_shows_attempts_and_discounts_a_spot_jobs_bill() -> None:
    state = _interrupted_twice()
    state.end(S.COMPLETED, None, now=130.0)
    raw = responses.describe(_request(), state)
    assert (raw["TrainingTimeInSeconds"], raw["BillableTimeInSeconds"]) == (80, 24)
    job = JobDescription.from_response(raw)
    assert job.attempts == 3
    assert [t["StatusMessage"] for t in job.interruptions] == ["reclaimed 1", "reclaimed 2"]
    on_demand = responses.describe(_request(spot=False, max_wait=None), state)
    assert on_demand["BillableTimeInSeconds"] == on_demand["TrainingTimeInSeconds"] == 80


def test_a_lost_host_is_noted_without_leaving_the_status_and_a_stop_drops_an_interruption(
) -> None:
    state = JobState.new("j", now=0.0)
    state.progress(S.TRAINING, now=1.0)
    assert state.request_interruption("algo-2", False, "interrupt")
    assert state.interrupted(dict(LOST), "lost algo-2", now=2.0)
    assert (state.status, state.transitions[-1]["StatusMessage"]) == (S.TRAINING, "lost algo-2")
    assert state.request_interruption(None, True, "interrupt")
    assert state.request_stop(now=3.0)
    assert not state.interrupted(dict(RECLAIM), "too late", now=4.0)
    assert state.status is S.STOPPING
    assert S.INTERRUPTED.primary is TrainingJobStatus.IN_PROGRESS


def test_the_official_sdks_time_lines_are_printed_for_all_hosts(
    capsys: pytest.CaptureFixture[str],
) -> None:
    from ddpjob.training_job import print_times

    spot = {"ResourceConfig": {"InstanceCount": 2}, "EnableManagedSpotTraining": True,
            "TrainingTimeInSeconds": 40, "BillableTimeInSeconds": 12}
    print_times(spot)
    assert capsys.readouterr().out == ("Training seconds: 80\nBillable seconds: 24\n"
                                       "Managed Spot Training savings: 70.0%\n")
    print_times({**spot, "EnableManagedSpotTraining": False, "BillableTimeInSeconds": 40})
    assert capsys.readouterr().out == "Training seconds: 80\nBillable seconds: 80\n"
    print_times({"ResourceConfig": {"InstanceCount": 1}})  # never trained: nothing to say
    assert capsys.readouterr().out == ""
