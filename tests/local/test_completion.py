"""Completion criteria: a target objective, or N trials without a 1% improvement (pure)."""

from __future__ import annotations

from ddpjob.local.tuning.completion import details, not_improving, reached
from ddpjob.local.tuning.tuningstate import Trial, TuningState


def _state(*objectives: float | None) -> TuningState:
    """Trials that ended in this order; None: a trial that failed."""
    state = TuningState.new("job", now=0.0)
    for number, value in enumerate(objectives):
        status = "Failed" if value is None else "Completed"
        state.trials.append(Trial(f"job-{number:03d}", {}, status, end_time=float(number),
                                  objective=value))
    return state


def test_trials_not_improving_by_one_percent_are_counted_since_the_last_that_did() -> None:
    assert not_improving([], minimize=True) == 0
    assert not_improving([10.0], minimize=True) == 0
    assert not_improving([10.0, 9.95, 10.5, 9.0], minimize=True) == 0  # 9.0: 10% better
    assert not_improving([10.0, 9.95, 10.5], minimize=True) == 2  # 0.5% is not 1%
    assert not_improving([10.0, 9.95, 9.9], minimize=True) == 2  # each under 1% of the best
    assert not_improving([1.0, 1.02, 1.0], minimize=False) == 1
    assert not_improving([0.0, -0.001], minimize=True) == 0  # from 0: any improvement


def test_a_target_reached_or_too_many_trials_not_improving_completes_the_job() -> None:
    assert reached(None, _state(0.0), minimize=True) is None
    assert reached({"TargetObjectiveMetricValue": 0.5}, _state(0.7, None), True) is None
    assert "TargetObjectiveMetricValue 0.5" in reached(
        {"TargetObjectiveMetricValue": 0.5}, _state(0.7, 0.5), minimize=True)
    assert reached({"TargetObjectiveMetricValue": 0.9}, _state(0.7), minimize=False) is None
    criteria = {"BestObjectiveNotImproving": {"MaxNumberOfTrainingJobsNotImproving": 3}}
    assert reached(criteria, _state(1.0, 2.0, None, 3.0), minimize=True) is None  # failed: no
    assert "3 trials in a row" in reached(criteria, _state(1.0, 2.0, None, 3.0, 1.0), True)


def test_the_description_counts_the_trials_not_improving() -> None:
    criteria = {"TargetObjectiveMetricValue": 0.0}
    assert details(criteria, _state(1.0, 2.0), minimize=True) == {
        "TuningJobCompletionDetails": {"NumberOfTrainingJobsObjectiveNotImproving": 1}}
    assert details(None, _state(1.0), minimize=True) == {}
