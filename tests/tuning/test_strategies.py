"""Random and Grid: the trials' tuned hyperparameters, from a request's ParameterRanges."""

from __future__ import annotations

import math
from collections import Counter

import pytest
from ddpjob import CategoricalParameter, ContinuousParameter, IntegerParameter
from ddpjob.errors import UserInputError
from ddpjob.tuning import parameters
from ddpjob.tuning.strategies import RandomSearch, grid, grid_size


def _member(**ranges: object) -> dict:
    return parameters.parameter_ranges_member(parameters.check_ranges(ranges))


RANGES = _member(lr=ContinuousParameter(1e-4, 1e-1, "Logarithmic"),
                 momentum=ContinuousParameter(0.9, 0.999, "ReverseLogarithmic"),
                 dropout=ContinuousParameter(0.0, 0.5), layers=IntegerParameter(1, 3),
                 width=IntegerParameter(1, 1000, "Logarithmic"),
                 optimizer=CategoricalParameter(["adam", "sgd"]))


def _take(search: RandomSearch, count: int) -> list[dict[str, str]]:
    return [search.suggest() for _ in range(count)]


def test_the_same_seed_gives_the_same_trials() -> None:
    first = _take(RandomSearch(RANGES, seed=7), 20)
    assert first == _take(RandomSearch(RANGES, seed=7), 20)
    assert first != _take(RandomSearch(RANGES, seed=8), 20)
    reordered = {key: list(reversed(value)) for key, value in reversed(RANGES.items())}
    assert _take(RandomSearch(reordered, seed=7), 20) == first  # by name, not list order
    assert set(first[0]) == {"lr", "momentum", "dropout", "layers", "width", "optimizer"}


def test_values_stay_in_their_ranges_and_integers_include_both_bounds() -> None:
    trials = _take(RandomSearch(RANGES, seed=1), 2000)
    assert all(1e-4 <= float(t["lr"]) <= 1e-1 for t in trials)
    assert all(0.9 <= float(t["momentum"]) < 0.999 for t in trials)
    assert all(0.0 <= float(t["dropout"]) <= 0.5 for t in trials)
    assert {t["layers"] for t in trials} == {"1", "2", "3"}
    assert {t["optimizer"] for t in trials} == {'"adam"', '"sgd"'}
    widths = [int(t["width"]) for t in trials]
    assert min(widths) == 1 and max(widths) <= 1000


def test_logarithmic_scaling_is_uniform_in_log_space() -> None:
    """Each decade of [1e-4, 1e-1] gets about a third of the draws (linear would give the
    last decade 90%)."""
    draws = [float(t["lr"]) for t in _take(RandomSearch(RANGES, seed=3), 3000)]
    decades = Counter(min(int(math.floor(-math.log10(value))), 3) for value in draws)
    assert all(abs(decades[d] / len(draws) - 1 / 3) < 0.05 for d in (1, 2, 3)), decades
    widths = [int(t["width"]) for t in _take(RandomSearch(RANGES, seed=3), 3000)]
    assert abs(sum(w < 32 for w in widths) / len(widths) - 0.5) < 0.05  # sqrt(1000) ~ 31.6


def test_reverse_logarithmic_scaling_crowds_values_near_one() -> None:
    draws = [float(t["momentum"]) for t in _take(RandomSearch(RANGES, seed=5), 3000)]
    # uniform in log(1 - x): half of the draws have 1 - x below sqrt(0.1 * 0.001) = 0.01
    assert abs(sum(1 - value < 0.01 for value in draws) / len(draws) - 0.5) < 0.05


def test_grid_is_every_categorical_combination_in_a_fixed_order() -> None:
    ranges = _member(optimizer=CategoricalParameter(["adam", "sgd"]),
                     batch=CategoricalParameter([32, 64, 128]))
    assert grid_size(ranges) == 6
    assert grid(ranges) == [
        {"batch": '"32"', "optimizer": '"adam"'}, {"batch": '"32"', "optimizer": '"sgd"'},
        {"batch": '"64"', "optimizer": '"adam"'}, {"batch": '"64"', "optimizer": '"sgd"'},
        {"batch": '"128"', "optimizer": '"adam"'}, {"batch": '"128"', "optimizer": '"sgd"'}]


def test_grid_refuses_numeric_ranges() -> None:
    with pytest.raises(UserInputError, match=r"the Grid strategy supports only categorical "
                                             r"parameters; layers, lr are integer or continuous"):
        grid_size(_member(lr=ContinuousParameter(0.1, 1.0), layers=IntegerParameter(1, 2),
                          optimizer=CategoricalParameter(["adam"])))
