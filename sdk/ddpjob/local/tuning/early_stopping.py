"""Early stopping "Auto", by the rule AWS documents for it (automatic-model-tuning-early-stopping):

  1. after each epoch, take the trial's objective value;
  2. for every previous trial, the running average of its objective up to the same epoch, then
     the median of those averages;
  3. when the trial's value is worse than that median (higher when minimizing, lower when
     maximizing), stop the trial.

An epoch is one value of the objective metric in the trial's log (each match of its regex), as
SageMaker counts it. Ours where AWS is silent: the rule fires only once `MIN_PREVIOUS` previous
trials reached that epoch (too few averages make a median of noise), and a trial's series is
that of its first host that printed the metric (every host printing the same line would count
each epoch several times).
"""

from __future__ import annotations

import statistics
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

MIN_PREVIOUS = 3


def objective_series(records: Iterable[Mapping[str, Any]], metric: str) -> list[float]:
    """One trial's objective values in order, from its recorded metrics (`metrics.series`):
    those of the first host that printed the metric."""
    records = [r for r in records if r.get("MetricName") == metric]
    if not records:
        return []
    first = min(r.get("Host", "") for r in records)
    return [float(r["Value"]) for r in records if r.get("Host", "") == first]


def should_stop(current: Sequence[float], previous: Iterable[Sequence[float]],
                minimize: bool) -> bool:
    """Whether the median rule stops a trial whose objective so far is `current`, given the
    series of the trials before it."""
    epoch = len(current)
    if epoch == 0:
        return False
    averages = [statistics.fmean(series[:epoch]) for series in previous if len(series) >= epoch]
    if len(averages) < MIN_PREVIOUS:
        return False
    median = statistics.median(averages)
    return current[-1] > median if minimize else current[-1] < median
