"""The search a tuning job's config asks for: Random and Grid (`strategies`), Bayesian and
Hyperband through Optuna (`optuna_search`, imported only when asked for). Apart from
`strategies` so that the rules, which count a grid, and Optuna's search, which reads the rules'
Hyperband resources, import no cycle."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ddpjob.tuning import strategies


def for_request(config: Mapping[str, Any], static: Mapping[str, str], study: str
                ) -> strategies.Search:
    """The search a HyperParameterTuningJobConfig asks for; `static` are the definition's
    static hyperparameters (where Hyperband finds its MaxResource), `study` names the search
    (the tuning job: Hyperband's brackets depend on it)."""
    strategy, ranges = config["Strategy"], config.get("ParameterRanges") or {}
    if strategy == "Grid":
        return strategies.GridSearch(ranges)
    if strategy not in strategies.OPTUNA_STRATEGIES:
        return strategies.RandomSearch(ranges, config.get("RandomSeed"))
    strategies.require_engine(strategy)
    from ddpjob.tuning import optuna_search

    return optuna_search.for_config(config, static, study)
