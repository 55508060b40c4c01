"""Bayesian and Hyperband through Optuna (the `tune` extra), used only as a sampler and a
pruner by ask and tell: the controller asks for each trial's values, tells each trial's end, and
for Hyperband reports each trial's objective per epoch. Imported only by
`searches.for_request` for those strategies.

Ours where AWS is silent (AWS's algorithms are its own; docs/tuning.md):
- Bayesian is Optuna's TPE (a tree-structured Parzen estimator, not AWS's Gaussian process),
  seeded by RandomSeed, its first `STARTUP_TRIALS` trials drawn at random, and trials still
  running counted as a constant lie (`constant_liar`), so parallel trials spread out;
- Hyperband is Optuna's HyperbandPruner over epochs (each value of the objective metric a
  trial prints is one epoch), reduction factor `REDUCTION_FACTOR`, each trial's bracket fixed by
  its number and the tuning job's name; its values come from the same TPE sampler;
- scaling: Auto is linear, Logarithmic is Optuna's log domain, ReverseLogarithmic is uniform in
  log(1 - x) (as `strategies.RandomSearch`);
- a warm start's trial gives Optuna only the values the new ranges hold (a value outside its
  new range, or of a range no longer tuned, is left out; a trial left with none is skipped).
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Mapping, Sequence
from typing import Any

import optuna
from optuna.distributions import (
    BaseDistribution,
    CategoricalDistribution,
    FloatDistribution,
    IntDistribution,
)
from optuna.trial import TrialState

from ddpjob.tuning import rules
from ddpjob.tuning.strategies import KnownTrial, Search, TrialValues, range_entries

STARTUP_TRIALS = 3
REDUCTION_FACTOR = 3


def _distribution(kind: str, entry: Mapping[str, Any]) -> BaseDistribution:
    if kind == "Categorical":
        return CategoricalDistribution(list(entry["Values"]))
    scaling = entry.get("ScalingType", "Auto")
    if kind == "Integer":
        return IntDistribution(int(entry["MinValue"]), int(entry["MaxValue"]),
                               log=scaling == "Logarithmic")
    low, high = float(entry["MinValue"]), float(entry["MaxValue"])
    if scaling == "ReverseLogarithmic":  # sampled as t = -log(1 - x), uniform
        return FloatDistribution(-math.log(1 - low), -math.log(1 - high))
    return FloatDistribution(low, high, log=scaling == "Logarithmic")


class OptunaSearch(Search):
    """An Optuna study asked for each trial's values and told each trial's end; with
    `resources` (Hyperband's MinResource, MaxResource) it also stops trials by its pruner."""

    def __init__(self, parameter_ranges: Mapping[str, Any], seed: int | None, minimize: bool,
                 study: str, resources: tuple[int, int] | None = None):
        entries = range_entries(parameter_ranges)
        self._space = {name: _distribution(kind, entry) for name, kind, entry in entries}
        self._reverse = {name: (float(entry["MinValue"]), float(entry["MaxValue"]))
                         for name, kind, entry in entries
                         if entry.get("ScalingType") == "ReverseLogarithmic"}
        optuna.logging.set_verbosity(optuna.logging.WARNING)
        with warnings.catch_warnings():  # constant_liar is marked experimental
            warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
            sampler = optuna.samplers.TPESampler(seed=seed, n_startup_trials=STARTUP_TRIALS,
                                                 constant_liar=True)
        pruner: optuna.pruners.BasePruner = optuna.pruners.NopPruner()
        if resources is not None:
            pruner = optuna.pruners.HyperbandPruner(min_resource=resources[0],
                                                    max_resource=resources[1],
                                                    reduction_factor=REDUCTION_FACTOR)
            self.prunes = True
        self._study = optuna.create_study(
            study_name=study, sampler=sampler, pruner=pruner,
            direction="minimize" if minimize else "maximize")
        self._running: dict[str, optuna.Trial] = {}
        self._reported: dict[str, int] = {}

    def suggest(self, trial: str = "") -> TrialValues:
        """Ask the study for the next trial's values."""
        asked = self._study.ask(self._space)
        self._running[trial] = asked
        return {name: self._string(name, asked.params[name]) for name in self._space}

    def tell(self, trial: str, objective: float | None, stopped: bool = False) -> None:
        """Tell the study how trial `trial` ended: its objective, pruned (stopped early), or
        failed (no objective)."""
        asked = self._running.pop(trial, None)
        if asked is None:
            return
        if objective is not None and not stopped:
            self._study.tell(asked, objective)
        elif stopped and self._reported.get(trial):
            self._study.tell(asked, state=TrialState.PRUNED)  # its last epoch's value counts
        else:
            self._study.tell(asked, state=TrialState.FAIL)

    def should_stop(self, trial: str, series: Sequence[float]) -> bool:
        """Report each new epoch of `series` to the pruner; True when it prunes the trial."""
        asked = self._running.get(trial)
        if not self.prunes or asked is None:
            return False
        done = self._reported.get(trial, 0)
        for step in range(done + 1, len(series) + 1):
            asked.report(series[step - 1], step)
            self._reported[trial] = step
            if asked.should_prune():
                return True
        return False

    def learn(self, known: Sequence[KnownTrial]) -> None:
        """Add the parents' trials to the study, with the values the ranges still hold."""
        for trial in known:
            params = {name: value for name, text in trial.values.items()
                      if name in self._space
                      and (value := self._value(name, text)) is not None}
            if not params:
                continue
            self._study.add_trial(optuna.trial.create_trial(
                params=params, distributions={name: self._space[name] for name in params},
                value=trial.objective))

    def _string(self, name: str, value: Any) -> str:
        if name in self._reverse:  # within the bounds despite rounding
            low, high = self._reverse[name]
            value = min(max(1 - math.exp(-value), low), high)
        return value if isinstance(value, str) else str(value)

    def _value(self, name: str, text: str) -> Any:
        """A trial's value of `name` as the study's distribution holds it; None when it does
        not (outside the range, or not a number)."""
        distribution = self._space[name]
        try:
            if isinstance(distribution, CategoricalDistribution):
                value: Any = text
            elif isinstance(distribution, IntDistribution):
                value = int(text)
            else:
                value = float(text)
                if name in self._reverse:
                    value = -math.log(1 - value)
        except (TypeError, ValueError):
            return None
        if isinstance(distribution, CategoricalDistribution):
            return value if value in distribution.choices else None
        return value if distribution.low <= value <= distribution.high else None


def for_config(config: Mapping[str, Any], static: Mapping[str, str], study: str
               ) -> OptunaSearch:
    """The Bayesian or Hyperband search of a HyperParameterTuningJobConfig."""
    minimize = config["HyperParameterTuningJobObjective"]["Type"] == "Minimize"
    resources = rules.hyperband_resources(config, static) \
        if config["Strategy"] == "Hyperband" else None
    return OptunaSearch(config.get("ParameterRanges") or {}, config.get("RandomSeed"),
                        minimize, study, resources)
