"""Hyperparameter ranges: the official SDK v2's classes, AWS's range rules when one is made."""

from __future__ import annotations

import pytest
from ddpjob import CategoricalParameter, ContinuousParameter, IntegerParameter
from ddpjob.errors import UserInputError
from ddpjob.tuning import parameters


def test_ranges_are_sent_as_v2_sends_them() -> None:
    ranges = parameters.check_ranges({
        "lr": ContinuousParameter(1e-4, 0.1, "Logarithmic"), "layers": IntegerParameter(1, 4),
        "optimizer": CategoricalParameter(["adam", "sgd"]), "batch": CategoricalParameter(32)})
    assert parameters.parameter_ranges_member(ranges) == {
        "ContinuousParameterRanges": [{"Name": "lr", "MinValue": "0.0001", "MaxValue": "0.1",
                                       "ScalingType": "Logarithmic"}],
        "CategoricalParameterRanges": [{"Name": "optimizer", "Values": ['"adam"', '"sgd"']},
                                       {"Name": "batch", "Values": ['"32"']}],
        "IntegerParameterRanges": [{"Name": "layers", "MinValue": "1", "MaxValue": "4",
                                    "ScalingType": "Auto"}]}


def test_the_official_sdks_ranges_are_taken_and_checked(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SAGEMAKER_SUPPRESS_V2_WARNING", "1")
    from sagemaker import parameter as official

    ranges = parameters.check_ranges({
        "lr": official.ContinuousParameter(0.01, 0.1, "Logarithmic"),
        "layers": official.IntegerParameter(1, 3),
        "optimizer": official.CategoricalParameter(["adam", "sgd"])})
    assert ranges == {"lr": ContinuousParameter(0.01, 0.1, "Logarithmic"),
                      "layers": IntegerParameter(1, 3),
                      "optimizer": CategoricalParameter(["adam", "sgd"])}
    with pytest.raises(UserInputError, match=r"hyperparameter_ranges\['lr'\]: "
                                             r"ContinuousParameter: min_value 1 is greater"):
        parameters.check_ranges({"lr": official.ContinuousParameter(1, 0.1)})


@pytest.mark.parametrize(("make", "match"), [
    (lambda: ContinuousParameter(1.0, 0.1), r"min_value 1.0 is greater than max_value 0.1"),
    (lambda: IntegerParameter(5, 1), r"min_value 5 is greater than max_value 1"),
    (lambda: IntegerParameter(1.5, 3), r"IntegerParameter min_value must be an integer"),
    (lambda: ContinuousParameter(True, 3), r"min_value must be a finite number"),
    (lambda: ContinuousParameter(0, float("inf")), r"max_value must be a finite number"),
    (lambda: ContinuousParameter(0.0, 1.0, "Logarithmic"),
     r"Logarithmic scaling works only for ranges of values greater than 0, got min_value 0.0"),
    (lambda: IntegerParameter(-2, 4, "Logarithmic"), r"greater than 0, got min_value -2"),
    (lambda: ContinuousParameter(0.5, 1.0, "ReverseLogarithmic"),
     r"ReverseLogarithmic scaling works only for ranges within 0 <= x < 1.0, got \[0.5, 1.0\]"),
    (lambda: ContinuousParameter(-0.1, 0.5, "ReverseLogarithmic"), r"within 0 <= x < 1.0"),
    (lambda: IntegerParameter(0, 1, "ReverseLogarithmic"),
     r"IntegerParameter scaling_type must be one of Auto, Linear, Logarithmic"),
    (lambda: ContinuousParameter(0, 1, "Log"), r"scaling_type must be one of Auto, Linear"),
    (lambda: CategoricalParameter([]), r"AWS allows 1 to 30 values, got 0"),
    (lambda: CategoricalParameter(list(range(31))), r"AWS allows 1 to 30 values, got 31"),
    (lambda: CategoricalParameter(["a", "a"]), r"each value once"),
    (lambda: CategoricalParameter(["x" * 257]), r"1 to 256 characters"),
])
def test_a_range_aws_refuses_is_one_clear_error(make, match: str) -> None:
    with pytest.raises(UserInputError, match=match) as raised:
        make()
    assert "\n" not in str(raised.value)


def test_ranges_as_a_whole() -> None:
    with pytest.raises(UserInputError, match=r"hyperparameter_ranges: 31 ranges given; AWS "
                                             r"allows at most 30"):
        parameters.check_ranges({f"p{i}": IntegerParameter(0, 1) for i in range(31)})
    with pytest.raises(UserInputError, match=r"must be a non-empty dict"):
        parameters.check_ranges({})
    with pytest.raises(UserInputError, match=r"hyperparameter_ranges\['lr'\]: must be an "
                                             r"IntegerParameter, ContinuousParameter or "
                                             r"CategoricalParameter, got tuple"):
        parameters.check_ranges({"lr": (0.1, 1.0)})
    with pytest.raises(UserInputError, match=r"cannot contain '='"):
        parameters.check_ranges({"a=b": IntegerParameter(0, 1)})
    assert parameters.check_ranges({f"p{i}": IntegerParameter(0, 1) for i in range(30)})
