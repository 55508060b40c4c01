"""Hyperparameter ranges: `IntegerParameter`, `ContinuousParameter`, `CategoricalParameter`.

The official SDK v2's classes (`sagemaker.parameter`), with AWS's rules checked when a range is
made (botocore's model documents them: a logarithmic range holds only values > 0, a reverse
logarithmic one lies within 0 <= x < 1 and is for continuous ranges only; a categorical range has
1 to 30 values; a tuning job has at most 30 ranges in all). Values are sent as strings, as v2
sends them; categorical values are JSON-quoted for framework containers, as v2's
`as_json_range` (every ddpjob estimator is a framework's).
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from typing import Any, ClassVar

from ddpjob_runtime.shared.hyperparameters import name_problem

from ddpjob.errors import UserInputError

SCALING_TYPES = ("Auto", "Linear", "Logarithmic", "ReverseLogarithmic")
INTEGER_SCALING_TYPES = ("Auto", "Linear", "Logarithmic")  # botocore's IntegerParameterRange
MAX_CATEGORICAL_VALUES = 30
MAX_PARAMETERS = 30
MAX_VALUE_LENGTH = 256  # botocore's ParameterValue
#: The ParameterRanges keys, in the order v2 writes them.
KINDS = ("Continuous", "Categorical", "Integer")


def _number(value: object, argument: str, integer: bool) -> int | float:
    allowed = (int,) if integer else (int, float)
    if isinstance(value, bool) or not isinstance(value, allowed) or (
            isinstance(value, float) and not math.isfinite(value)):
        kind = "an integer" if integer else "a finite number"
        raise UserInputError(f"{argument} must be {kind}, got {value!r}")
    return value


class ParameterRange:
    """A range of numbers to search: `min_value`, `max_value` and how they are scaled."""

    kind: ClassVar[str] = ""
    _integer: ClassVar[bool] = False
    _scalings: ClassVar[tuple[str, ...]] = SCALING_TYPES

    def __init__(self, min_value: int | float, max_value: int | float,
                 scaling_type: str = "Auto"):
        """Check the range now (UserInputError naming the argument and what is allowed)."""
        where = type(self).__name__
        self.min_value = _number(min_value, f"{where} min_value", self._integer)
        self.max_value = _number(max_value, f"{where} max_value", self._integer)
        if scaling_type not in self._scalings:
            raise UserInputError(f"{where} scaling_type must be one of "
                                 f"{', '.join(self._scalings)}, got {scaling_type!r}")
        self.scaling_type = scaling_type
        if self.min_value > self.max_value:
            raise UserInputError(f"{where}: min_value {self.min_value!r} is greater than "
                                 f"max_value {self.max_value!r}")
        if scaling_type == "Logarithmic" and self.min_value <= 0:
            raise UserInputError(f"{where}: Logarithmic scaling works only for ranges of values "
                                 f"greater than 0, got min_value {self.min_value!r}")
        if scaling_type == "ReverseLogarithmic" and not (
                self.min_value >= 0 and self.max_value < 1):
            raise UserInputError(f"{where}: ReverseLogarithmic scaling works only for ranges "
                                 f"within 0 <= x < 1.0, got [{self.min_value!r}, "
                                 f"{self.max_value!r}]")

    def as_tuning_range(self, name: str) -> dict[str, str]:
        """The range as CreateHyperParameterTuningJob names it (values as strings, as v2)."""
        return {"Name": name, "MinValue": str(self.min_value), "MaxValue": str(self.max_value),
                "ScalingType": self.scaling_type}

    def __eq__(self, other: object) -> bool:
        return type(other) is type(self) and vars(other) == vars(self)

    def __hash__(self) -> int:
        return hash((type(self).__name__, *vars(self).values()))

    def __repr__(self) -> str:
        return (f"{type(self).__name__}({self.min_value!r}, {self.max_value!r}, "
                f"scaling_type={self.scaling_type!r})")


class ContinuousParameter(ParameterRange):
    """Floating-point values between `min_value` and `max_value`."""

    kind = "Continuous"


class IntegerParameter(ParameterRange):
    """Integers from `min_value` to `max_value`, both included (no ReverseLogarithmic: AWS
    documents it for continuous ranges only)."""

    kind = "Integer"
    _integer = True
    _scalings = INTEGER_SCALING_TYPES


class CategoricalParameter:
    """A list of values (1 to 30), each sent as a string, as the official SDK does."""

    kind: ClassVar[str] = "Categorical"

    def __init__(self, values: Sequence[object] | object):
        """`values`: a list, or one value (v2 wraps it in a list)."""
        values = list(values) if isinstance(values, (list, tuple)) else [values]
        if not 1 <= len(values) <= MAX_CATEGORICAL_VALUES:
            raise UserInputError(f"CategoricalParameter values: AWS allows 1 to "
                                 f"{MAX_CATEGORICAL_VALUES} values, got {len(values)}")
        texts = [str(value) for value in values]
        too_long = [text for text in texts if not 1 <= len(text) <= MAX_VALUE_LENGTH]
        if too_long:
            raise UserInputError(f"CategoricalParameter values: each must be 1 to "
                                 f"{MAX_VALUE_LENGTH} characters as a string, got "
                                 f"{too_long[0]!r:.60}")
        if len(set(texts)) != len(texts):  # ours: a repeated value would be tried twice
            raise UserInputError(f"CategoricalParameter values: each value once, got {texts}")
        self.values = texts

    def as_tuning_range(self, name: str) -> dict[str, Any]:
        """The range with its values as given (v2's, for non-framework images)."""
        return {"Name": name, "Values": list(self.values)}

    def as_json_range(self, name: str) -> dict[str, Any]:
        """The range with JSON-quoted values (v2's, for framework containers, which
        `json.loads` every hyperparameter)."""
        return {"Name": name, "Values": [json.dumps(value) for value in self.values]}

    def __eq__(self, other: object) -> bool:
        return isinstance(other, CategoricalParameter) and other.values == self.values

    def __hash__(self) -> int:
        return hash(tuple(self.values))

    def __repr__(self) -> str:
        return f"CategoricalParameter({self.values!r})"


AnyRange = ParameterRange | CategoricalParameter
_CLASSES: dict[str, type[ParameterRange] | type[CategoricalParameter]] = {
    "Continuous": ContinuousParameter, "Integer": IntegerParameter,
    "Categorical": CategoricalParameter}


def _as_range(value: object) -> AnyRange:
    """Ours, or the official SDK's range (its instances' `__name__` names the kind, e.g.
    "Continuous") rebuilt and checked as ours."""
    if isinstance(value, (ParameterRange, CategoricalParameter)):
        return value
    kind = None if isinstance(value, type) else getattr(value, "__name__", None)
    if kind == "Categorical" and isinstance(getattr(value, "values", None), list):
        return CategoricalParameter(value.values)  # type: ignore[attr-defined]
    if kind in ("Continuous", "Integer") and hasattr(value, "min_value"):
        return _CLASSES[kind](value.min_value, value.max_value,  # type: ignore[attr-defined]
                              value.scaling_type)  # type: ignore[attr-defined]
    raise UserInputError(f"must be an IntegerParameter, ContinuousParameter or "
                         f"CategoricalParameter, got {type(value).__name__}")


def check_ranges(ranges: object, argument: str = "hyperparameter_ranges") -> dict[str, AnyRange]:
    """`{name: range}` checked: 1 to 30 ranges, names usable as hyperparameters, each range
    ours or the official SDK's (rebuilt as ours); UserInputError naming the entry."""
    if not isinstance(ranges, Mapping) or not ranges:
        raise UserInputError(f"{argument} must be a non-empty dict of hyperparameter name -> "
                             f"IntegerParameter/ContinuousParameter/CategoricalParameter, got "
                             f"{ranges!r:.80}")
    if len(ranges) > MAX_PARAMETERS:
        raise UserInputError(f"{argument}: {len(ranges)} ranges given; AWS allows at most "
                             f"{MAX_PARAMETERS} hyperparameters to tune in all")
    checked: dict[str, AnyRange] = {}
    for name, value in ranges.items():
        problem = name_problem(name)
        if problem:
            raise UserInputError(f"{argument}: hyperparameter {problem}, got {name!r}")
        try:
            checked[name] = _as_range(value)
        except UserInputError as error:
            raise UserInputError(f"{argument}[{name!r}]: {error}") from None
    return checked


def parameter_ranges_member(ranges: Mapping[str, AnyRange]) -> dict[str, list[dict[str, Any]]]:
    """The ParameterRanges member: every kind's list (empty ones too, as v2 sends them)."""
    member: dict[str, list[dict[str, Any]]] = {f"{kind}ParameterRanges": [] for kind in KINDS}
    for name, parameter in ranges.items():
        entry = parameter.as_json_range(name) if isinstance(parameter, CategoricalParameter) \
            else parameter.as_tuning_range(name)
        member[f"{parameter.kind}ParameterRanges"].append(entry)
    return member
