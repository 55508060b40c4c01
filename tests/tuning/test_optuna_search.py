"""Bayesian and Hyperband through Optuna (the `tune` extra): seeded, told each trial's end,
Hyperband's stops by rung; and the one line without Optuna, which `import ddpjob` never loads."""

from __future__ import annotations

import statistics
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from ddpjob.errors import UserInputError
from ddpjob.tuning import optuna_search, searches, strategies
from ddpjob.tuning.strategies import KnownTrial

LEVEL = {"ContinuousParameterRanges": [
    {"Name": "level", "MinValue": "0", "MaxValue": "6", "ScalingType": "Linear"}]}
EVERY_KIND = {
    "ContinuousParameterRanges": [
        {"Name": "lr", "MinValue": "0.0001", "MaxValue": "0.1", "ScalingType": "Logarithmic"},
        {"Name": "momentum", "MinValue": "0.9", "MaxValue": "0.999",
         "ScalingType": "ReverseLogarithmic"}],
    "IntegerParameterRanges": [
        {"Name": "width", "MinValue": "1", "MaxValue": "1000", "ScalingType": "Logarithmic"},
        {"Name": "layers", "MinValue": "1", "MaxValue": "3", "ScalingType": "Auto"}],
    "CategoricalParameterRanges": [{"Name": "optimizer", "Values": ['"adam"', '"sgd"']}]}


def _config(strategy: str = "Bayesian", ranges: dict | None = None, seed: int = 7,
            **extra: Any) -> dict[str, Any]:
    return {"Strategy": strategy, "RandomSeed": seed, "ParameterRanges": ranges or LEVEL,
            "HyperParameterTuningJobObjective": {"Type": "Minimize", "MetricName": "loss"},
            **extra}


def _loss(values: dict[str, str]) -> float:
    return (float(values["level"]) - 3) ** 2


def _run(search: strategies.Search, trials: int,
         objective: Callable[[dict[str, str]], float] = _loss) -> list[dict[str, str]]:
    """Suggest and tell `trials` trials one at a time; their values."""
    drawn = []
    for number in range(trials):
        values = search.suggest(f"t{number}")
        assert values is not None
        search.tell(f"t{number}", objective(values))
        drawn.append(values)
    return drawn


def test_bayesian_is_seeded_and_its_values_follow_the_told_objectives() -> None:
    first = _run(searches.for_request(_config(), {}, "job"), 8)
    assert first == _run(searches.for_request(_config(), {}, "job"), 8)  # reproducible
    assert first != _run(searches.for_request(_config(seed=8), {}, "job"), 8)
    told_otherwise = _run(searches.for_request(_config(), {}, "job"), 8,
                          lambda v: -_loss(v))  # the opposite objectives
    startup = optuna_search.STARTUP_TRIALS
    assert told_otherwise[:startup] == first[:startup]  # drawn at random: the same
    assert told_otherwise[startup:] != first[startup:]  # then each follows what it was told


def test_bayesian_closes_in_on_the_best_region() -> None:
    drawn = _run(searches.for_request(_config(), {}, "job"), 30)
    assert statistics.median(_loss(v) for v in drawn[-10:]) < 0.5  # uniform: median 2.25


def test_every_kind_of_range_is_sampled_within_its_bounds() -> None:
    search = searches.for_request(_config(ranges=EVERY_KIND), {}, "job")
    drawn = _run(search, 25, lambda v: float(v["lr"]))
    for values in drawn:
        assert 0.0001 <= float(values["lr"]) <= 0.1
        assert 0.9 <= float(values["momentum"]) <= 0.999
        assert 1 <= int(values["width"]) <= 1000 and 1 <= int(values["layers"]) <= 3
        assert values["optimizer"] in ('"adam"', '"sgd"')
    assert {v["layers"] for v in drawn} == {"1", "2", "3"}


def test_a_failed_trial_is_told_without_an_objective() -> None:
    search = searches.for_request(_config(), {}, "job")
    for number in range(5):
        search.suggest(f"t{number}")
        search.tell(f"t{number}", None)  # failed: Optuna learns nothing from it
    assert search.suggest("t5") is not None


def test_warm_start_trials_seed_the_search_with_the_values_the_ranges_still_hold() -> None:
    fresh = _run(searches.for_request(_config(), {}, "job"), 2)
    outside = searches.for_request(_config(), {}, "job")
    outside.learn([KnownTrial({"level": "9"}, 36.0), KnownTrial({"gone": "1"}, 1.0)])
    assert _run(outside, 2) == fresh  # nothing it could use: as if it had no parents
    learned = searches.for_request(_config(), {}, "job")
    learned.learn([KnownTrial({"level": str(x)}, (x - 3) ** 2) for x in (0.5, 2.9, 3.1, 5.5)])
    assert _run(learned, 2) != fresh  # past its random start: the parents' trials count


def test_random_and_grid_ignore_results_and_the_grid_ends() -> None:
    grid = searches.for_request(_config("Grid", ranges={"CategoricalParameterRanges": [
        {"Name": "level", "Values": ["1", "2"]}]}), {}, "job")
    grid.learn([KnownTrial({"level": "1"}, 4.0)])
    assert [grid.suggest(), grid.suggest(), grid.suggest()] == [{"level": "1"}, {"level": "2"},
                                                                 None]
    search = searches.for_request(_config("Random"), {}, "job")
    assert isinstance(search, strategies.RandomSearch) and not search.prunes
    assert not search.should_stop("t0", [9.0, 9.0])


def _hyperband(study: str = "hb") -> strategies.Search:
    config = _config("Hyperband", StrategyConfig={"HyperbandStrategyConfig": {
        "MinResource": 1, "MaxResource": 9}})
    return searches.for_request(config, {}, study)


def test_hyperband_stops_worse_trials_at_its_rungs_and_never_the_best() -> None:
    """Trial k's loss is k every epoch: each later trial is worse than all before it, so it
    stops at the first rung of its bracket that holds a better trial (1, 3 or 9 epochs:
    MinResource 1, reduction factor 3), and the first trial never stops."""
    search = _hyperband()
    assert search.prunes
    stopped_at: dict[int, int] = {}
    for number in range(8):
        name = f"t{number}"
        search.suggest(name)
        series = [float(number)] * 9
        step = next((epoch for epoch in range(1, 10) if search.should_stop(name, series[:epoch])),
                    None)
        if step is not None:
            stopped_at[number] = step
        search.tell(name, None if step is not None else series[-1], stopped=step is not None)
    assert 0 not in stopped_at
    assert stopped_at and set(stopped_at.values()) <= {1, 3, 9}
    assert any(step < 9 for step in stopped_at.values())  # some stop before MaxResource


def test_hyperband_takes_max_resource_from_the_static_epochs() -> None:
    config = _config("Hyperband")
    assert searches.for_request(config, {"epochs": '"4"'}, "hb").prunes
    with pytest.raises(UserInputError, match="MaxResource is needed"):
        searches.for_request(config, {}, "hb")


def test_without_optuna_bayesian_and_hyperband_are_one_line(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "optuna", None)  # as if it were not installed
    for strategy in strategies.OPTUNA_STRATEGIES:
        with pytest.raises(UserInputError) as refused:
            strategies.require_engine(strategy)
        assert str(refused.value) == (f"strategy {strategy} needs the `tune` extra: "
                                      f"pip install 'ddpjob[tune]'")
    strategies.require_engine("Random")
    assert searches.for_request(_config("Random"), {}, "job").suggest() is not None


def test_the_tuner_on_a_local_session_refuses_bayesian_without_optuna(
        local_estimator: Callable[..., Any], monkeypatch: pytest.MonkeyPatch) -> None:
    from ddpjob import ContinuousParameter, HyperparameterTuner

    monkeypatch.setitem(sys.modules, "optuna", None)
    ranges = {"lr": ContinuousParameter(0.01, 0.1)}
    with pytest.raises(UserInputError, match=r"^strategy Bayesian needs the `tune` extra"):
        HyperparameterTuner(local_estimator(), "loss", ranges)  # Bayesian: v2's default
    HyperparameterTuner(local_estimator(), "loss", ranges, strategy="Random")


def test_ddpjob_and_the_local_tuning_modules_import_no_optuna(src: Path) -> None:
    """Optuna is imported by a Bayesian or Hyperband search only, never by `import ddpjob`,
    the tuner, or the local tuning plane and controller."""
    code = ("import sys, ddpjob, ddpjob.tuning.strategies, ddpjob.local.tuning.tuning_plane, "
            "ddpjob.local.tuning.controller\n"
            "from ddpjob import HyperparameterTuner, LocalSession, PyTorch, ContinuousParameter\n"
            "estimator = PyTorch(entry_point='train.py', source_dir=sys.argv[1],\n"
            "                    session=LocalSession(home=sys.argv[2]))\n"
            "HyperparameterTuner(estimator, 'loss', {'lr': ContinuousParameter(0.1, 1)},\n"
            "                    metric_definitions=[{'Name': 'loss', 'Regex': 'l=(.*)'}])\n"
            "print(sorted(m for m in sys.modules if m.split('.')[0] in ('optuna', 'torch')))")
    out = subprocess.run([sys.executable, "-c", code, str(src), str(src.parent / "home")],
                         capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_optuna_is_the_tune_extra_and_no_base_dependency() -> None:
    import tomllib

    project = tomllib.loads(Path(__file__).parents[2].joinpath("pyproject.toml").read_text())
    extras = project["project"]["optional-dependencies"]
    assert not [d for d in project["project"]["dependencies"] if d.startswith("optuna")]
    assert [d for d in extras["tune"] if d.startswith("optuna")] == [
        d for d in extras["dev"] if d.startswith("optuna")]  # CI's dev install runs them
