"""The Random and Grid strategies: each trial's tuned hyperparameters, from a request's
`ParameterRanges` member (AWS's shape, whoever built the request). No dependency.

A trial's values are strings, as they go into its CreateTrainingJob `HyperParameters`: integers
and floats written out, categorical values as the range lists them (JSON-quoted by framework
clients). Where AWS documents no rule, the choice is ours and said so (docs/tuning.md):
- ranges are visited by name, so a seed gives the same trials whatever the order of the lists;
- `Auto` scaling samples linearly;
- a logarithmic integer range samples `floor(exp(u))`, u uniform in [log min, log(max + 1)),
  so each integer k is drawn with probability proportional to log((k + 1) / k);
- the grid's combinations are in the order of `itertools.product` over the names' order, each
  range's values in the order listed.
"""

from __future__ import annotations

import itertools
import math
import random
from collections.abc import Iterator, Mapping
from typing import Any

from ddpjob.errors import UserInputError

TrialValues = dict[str, str]
_KIND = {"IntegerParameterRanges": "Integer", "ContinuousParameterRanges": "Continuous",
         "CategoricalParameterRanges": "Categorical"}


def _entries(parameter_ranges: Mapping[str, Any]) -> list[tuple[str, str, Mapping[str, Any]]]:
    """`(name, kind, entry)` of every range, by name."""
    entries = [(entry["Name"], kind, entry) for member, kind in _KIND.items()
               for entry in parameter_ranges.get(member) or ()]
    return sorted(entries, key=lambda item: item[0])


class RandomSearch:
    """Values drawn uniformly within each range's scaling; `seed` (the request's RandomSeed)
    makes the sequence of trials the same every time."""

    def __init__(self, parameter_ranges: Mapping[str, Any], seed: int | None = None):
        self._entries = _entries(parameter_ranges)
        self._random = random.Random(seed)

    def suggest(self) -> TrialValues:
        """The next trial's tuned hyperparameters."""
        return {name: self._draw(kind, entry) for name, kind, entry in self._entries}

    def __iter__(self) -> Iterator[TrialValues]:
        while True:
            yield self.suggest()

    def _draw(self, kind: str, entry: Mapping[str, Any]) -> str:
        if kind == "Categorical":
            return self._random.choice(list(entry["Values"]))
        scaling = entry.get("ScalingType", "Auto")
        if kind == "Integer":
            low, high = int(entry["MinValue"]), int(entry["MaxValue"])
            if scaling != "Logarithmic":
                return str(self._random.randint(low, high))
            drawn = math.floor(math.exp(self._random.uniform(math.log(low), math.log(high + 1))))
            return str(min(max(drawn, low), high))  # the bounds hold despite rounding
        low, high = float(entry["MinValue"]), float(entry["MaxValue"])
        if scaling == "Logarithmic":
            value = math.exp(self._random.uniform(math.log(low), math.log(high)))
        elif scaling == "ReverseLogarithmic":  # uniform in log(1 - x)
            value = 1 - math.exp(self._random.uniform(math.log(1 - high), math.log(1 - low)))
        else:
            value = self._random.uniform(low, high)
        return str(min(max(value, low), high))


def _categorical_only(parameter_ranges: Mapping[str, Any]) -> list[tuple[str, list[str]]]:
    entries = _entries(parameter_ranges)
    numeric = [name for name, kind, _ in entries if kind != "Categorical"]
    if numeric:
        raise UserInputError(f"the Grid strategy supports only categorical parameters; "
                             f"{', '.join(numeric)} {'is' if len(numeric) == 1 else 'are'} "
                             f"integer or continuous ranges: make them CategoricalParameter "
                             f"or use another strategy")
    return [(name, list(entry["Values"])) for name, _, entry in entries]


def grid_size(parameter_ranges: Mapping[str, Any]) -> int:
    """The number of distinct categorical combinations: AWS's training job count for Grid."""
    return math.prod(len(values) for _, values in _categorical_only(parameter_ranges))


def grid(parameter_ranges: Mapping[str, Any]) -> list[TrialValues]:
    """Every combination of the categorical values, in a fixed order."""
    ranges = _categorical_only(parameter_ranges)
    names = [name for name, _ in ranges]
    return [dict(zip(names, combination, strict=True))
            for combination in itertools.product(*(values for _, values in ranges))]
