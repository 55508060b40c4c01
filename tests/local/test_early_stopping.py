"""Early stopping "Auto": AWS's median rule on the trials' objective series (pure)."""

from __future__ import annotations

from ddpjob.local.tuning.early_stopping import MIN_PREVIOUS, objective_series, should_stop

BEFORE = [[4.0, 3.0, 2.0], [5.0, 4.0, 3.0], [6.0, 5.0, 4.0]]  # running averages at epoch 2: 3.5,
# 4.5, 5.5: median 4.5


def test_a_trial_worse_than_the_median_of_the_running_averages_is_stopped() -> None:
    assert should_stop([9.0, 4.6], BEFORE, minimize=True)
    assert not should_stop([9.0, 4.4], BEFORE, minimize=True)  # only the epoch's value counts
    assert should_stop([0.0, 4.4], BEFORE, minimize=False)
    assert not should_stop([0.0, 4.6], BEFORE, minimize=False)


def test_only_trials_that_reached_the_epoch_count_and_too_few_stop_nothing() -> None:
    short = [[1.0]] * 10  # stopped at epoch 1: no average at epoch 2
    assert not should_stop([9.0, 9.0], short + BEFORE[:MIN_PREVIOUS - 1], minimize=True)
    assert should_stop([9.0, 9.0], short + BEFORE, minimize=True)
    assert not should_stop([], BEFORE, minimize=True)


def test_a_trials_series_is_its_first_hosts() -> None:
    records = [{"MetricName": "loss", "Value": v, "Host": h}
               for v, h in ((3, "algo-2"), (1, "algo-1"), (9, "algo-2"), (2, "algo-1"))]
    records.append({"MetricName": "acc", "Value": 7, "Host": "algo-1"})
    assert objective_series(records, "loss") == [1.0, 2.0]
    assert objective_series(records, "none") == []
