"""AWS's rules on a CreateHyperParameterTuningJob request that botocore's model cannot express.

They read the request, whoever built it (ddpjob's tuner, the official SDKs through a local
session later), and raise `RuleBroken` naming the request member; the tuner heads the message
with its own argument. Each rule's source is AWS's API reference or developer guide
(docs/tuning.md); those marked "ours" are where AWS is silent.
"""

from __future__ import annotations

import contextlib
import json
import re
from collections.abc import Mapping
from typing import Any

from ddpjob.errors import UserInputError
from ddpjob.tuning import parameters, strategies

STRATEGIES = ("Bayesian", "Random", "Hyperband", "Grid")
OBJECTIVE_TYPES = ("Maximize", "Minimize")
EARLY_STOPPING_TYPES = ("Off", "Auto")
MAX_NAME = 32
NAME_PATTERN = re.compile(r"^[a-zA-Z0-9](-*[a-zA-Z0-9]){0,31}$")
#: Where Hyperband looks for MaxResource when none is given (HyperbandStrategyConfig docs).
EPOCH_KEYS = ("epochs", "numepochs", "n-epochs", "n_epochs", "num_epochs")
#: AWS's words when the objective is not among the metric definitions (aws/sagemaker-python-sdk
#: #3932).
NO_OBJECTIVE_METRIC = ("A metric is required for this hyperparameter tuning job objective. "
                       "Provide a metric in the metric definitions.")

CONFIG = "HyperParameterTuningJobConfig"
DEFINITION = "TrainingJobDefinition"


class RuleBroken(UserInputError):
    """A request breaks one of AWS's rules; `member` is the request member it is about."""

    def __init__(self, member: str, message: str):
        super().__init__(f"{member}: {message}")
        self.member = member
        self.reason = message


def _one_of(value: object, allowed: tuple[str, ...], member: str) -> None:
    if value not in allowed:
        raise RuleBroken(member, f"must be one of {', '.join(allowed)}, got {value!r}")


def check_name(name: object, member: str = "HyperParameterTuningJobName") -> str:
    """A tuning job name: 1 to 32 letters, digits and hyphens (it prefixes every trial's)."""
    if not isinstance(name, str) or len(name) > MAX_NAME or not NAME_PATTERN.match(name):
        raise RuleBroken(member, f"a tuning job name has 1 to {MAX_NAME} letters, digits and "
                                 f"hyphens, starting and ending with a letter or digit, got "
                                 f"{name!r}")
    return name


def ranges_of(parameter_ranges: Mapping[str, Any]) -> dict[str, parameters.AnyRange]:
    """The request's ranges rebuilt as ddpjob's (which check AWS's range rules); AutoParameters
    count toward the 30 but are not ranges."""
    member = f"{CONFIG}.ParameterRanges"
    built: dict[str, Any] = {}
    count = len(parameter_ranges.get("AutoParameters") or ())
    try:
        for entry in parameter_ranges.get("CategoricalParameterRanges") or ():
            built[entry["Name"]] = parameters.CategoricalParameter(list(entry["Values"]))
        for key, kind in (("IntegerParameterRanges", parameters.IntegerParameter),
                          ("ContinuousParameterRanges", parameters.ContinuousParameter)):
            number = int if kind is parameters.IntegerParameter else float
            for entry in parameter_ranges.get(key) or ():
                built[entry["Name"]] = kind(number(entry["MinValue"]), number(entry["MaxValue"]),
                                            entry.get("ScalingType", "Auto"))
    except (ValueError, TypeError) as error:  # a bound that is not a number
        raise RuleBroken(member, f"a range's bounds are not numbers ({error})") from None
    except UserInputError as error:
        raise RuleBroken(member, str(error)) from None
    if count + len(built) > parameters.MAX_PARAMETERS:
        raise RuleBroken(member, f"{count + len(built)} hyperparameters to tune; AWS allows at "
                                 f"most {parameters.MAX_PARAMETERS} in all")
    return built


def _check_strategy(config: Mapping[str, Any], static: Mapping[str, str]) -> None:
    """Grid: categorical ranges only, its job count; Hyperband: its config, no early stopping."""
    strategy = config["Strategy"]
    early = config.get("TrainingJobEarlyStoppingType", "Off")
    if early == "Auto" and strategy in ("Hyperband", "Grid"):
        # Hyperband: AWS's API reference; Grid: ours (stopping trials would leave holes in it).
        raise RuleBroken(f"{CONFIG}.TrainingJobEarlyStoppingType",
                         f"must be Off with the {strategy} strategy, got Auto")
    if config.get("StrategyConfig") is not None and strategy != "Hyperband":
        raise RuleBroken(f"{CONFIG}.StrategyConfig", f"is for the Hyperband strategy only, and "
                                                     f"the strategy is {strategy}")
    if strategy == "Hyperband":
        hyperband_resources(config, static)
    if strategy == "Grid":
        ranges = config.get("ParameterRanges") or {}
        try:
            size = strategies.grid_size(ranges)
        except UserInputError as error:
            raise RuleBroken(f"{CONFIG}.ParameterRanges", str(error)) from None
        asked = config["ResourceLimits"].get("MaxNumberOfTrainingJobs")
        if asked is not None and asked != size:
            raise RuleBroken(f"{CONFIG}.ResourceLimits.MaxNumberOfTrainingJobs",
                             f"with the Grid strategy it must equal the number of distinct "
                             f"categorical combinations, {size}, or be left out; got {asked}")


def hyperband_resources(config: Mapping[str, Any], static: Mapping[str, str]
                        ) -> tuple[int, int]:
    """Hyperband's (MinResource, MaxResource): as given, MinResource 1 by default, MaxResource
    from a static epochs hyperparameter when not given (a JSON-quoted value, as framework
    clients send it, is read too); RuleBroken when they break AWS's rules."""
    member = f"{CONFIG}.StrategyConfig.HyperbandStrategyConfig"
    hyperband = (config.get("StrategyConfig") or {}).get("HyperbandStrategyConfig") or {}
    low, high = hyperband.get("MinResource"), hyperband.get("MaxResource")
    if high is None:
        key = next((key for key in EPOCH_KEYS if key in static), None)
        if key is None:
            raise RuleBroken(f"{member}.MaxResource",
                             f"Hyperband's MaxResource is needed: AWS infers it only from a "
                             f"static hyperparameter named one of {', '.join(EPOCH_KEYS)}, and "
                             f"there is none")
        high = _integer(static[key])
        if high is None or high < 1:  # ours: AWS is silent
            raise RuleBroken(f"{DEFINITION}.StaticHyperParameters",
                             f"Hyperband infers MaxResource from {key}, which must be a "
                             f"positive integer, got {static[key]!r}")
    if high > 20_000:
        raise RuleBroken(f"{member}.MaxResource",
                         f"Hyperband's MaxResource is at most 20000, got {high}")
    low = 1 if low is None else low
    if low > high:  # ours: AWS is silent
        raise RuleBroken(f"{member}.MinResource",
                         f"Hyperband's MinResource must not exceed its MaxResource {high}, "
                         f"got {low}")
    return low, high


def _integer(text: str) -> int | None:
    """`text` as an integer, JSON-quoted or not; None when it is none."""
    with contextlib.suppress(ValueError):
        text = json.loads(text)
    try:
        return int(text)
    except (TypeError, ValueError):
        return None


def _check_definition(definition: Mapping[str, Any], config: Mapping[str, Any]) -> None:
    """The objective among the metric definitions; no tuned name also static."""
    objective = config.get("HyperParameterTuningJobObjective") or \
        definition.get("TuningObjective") or {}
    if objective:
        _one_of(objective.get("Type"), OBJECTIVE_TYPES,
                f"{CONFIG}.HyperParameterTuningJobObjective.Type")
    algorithm = definition.get("AlgorithmSpecification") or {}
    names = [metric.get("Name") for metric in algorithm.get("MetricDefinitions") or ()]
    if objective and "TrainingImage" in algorithm and objective.get("MetricName") not in names:
        raise RuleBroken(f"{DEFINITION}.AlgorithmSpecification.MetricDefinitions",
                         f"{NO_OBJECTIVE_METRIC} The objective {objective.get('MetricName')!r} "
                         f"is not among {names}")
    tuned = {entry["Name"] for key in ("IntegerParameterRanges", "ContinuousParameterRanges",
                                       "CategoricalParameterRanges")
             for entry in (config.get("ParameterRanges") or {}).get(key) or ()}
    both = sorted(tuned & set(definition.get("StaticHyperParameters") or {}))
    if both:
        raise RuleBroken(f"{DEFINITION}.StaticHyperParameters",
                         f"{', '.join(both)} {'is' if len(both) == 1 else 'are'} both tuned "
                         f"and static: a hyperparameter is one or the other")


def check_request(request: Mapping[str, Any]) -> Mapping[str, Any]:
    """Return `request` when it keeps AWS's rules above; else raise RuleBroken.

    Expects a request botocore's model accepts (`request.validate_tuning_request` checks both).
    """
    check_name(request["HyperParameterTuningJobName"])
    config = request[CONFIG]
    _one_of(config["Strategy"], STRATEGIES, f"{CONFIG}.Strategy")
    _one_of(config.get("TrainingJobEarlyStoppingType", "Off"), EARLY_STOPPING_TYPES,
            f"{CONFIG}.TrainingJobEarlyStoppingType")
    ranges_of(config.get("ParameterRanges") or {})
    definition = request.get(DEFINITION)
    if (definition is None) == (request.get("TrainingJobDefinitions") is None):  # ours
        raise RuleBroken(DEFINITION, "give TrainingJobDefinition or TrainingJobDefinitions, "
                                     "one of them")
    static = (definition or {}).get("StaticHyperParameters") or {}
    _check_strategy(config, static)
    if definition is not None:
        _check_definition(definition, config)
    return request
