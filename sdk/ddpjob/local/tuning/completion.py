"""A tuning job's completion criteria (`TuningJobCompletionCriteria`): when it ends Completed
before its budget is used, and the `TuningJobCompletionDetails` DescribeHyperParameterTuningJob
answers (pure).

AWS's words (automatic-model-tuning-progress, the API reference):
- `TargetObjectiveMetricValue`: the tuning job stops once a trial's objective reaches it;
- `BestObjectiveNotImproving.MaxNumberOfTrainingJobsNotImproving`: it stops after that many
  training jobs "failed to improve model performance by 1% or greater" over the best before.

Ours where AWS is silent: "reaches" is at or below the target when minimizing, at or above it
when maximizing; trials count in the order they ended, and only those that succeeded (a trial
that failed or was stopped early has no objective to compare); an improvement of 1% is relative
to the best before (any improvement when that best is 0). `ConvergenceDetected` with
`CompleteOnConvergence: Enabled` is refused by the local control plane: AWS's rule is
undocumented.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from ddpjob.local.tuning.tuningstate import TuningState

IMPROVEMENT = 0.01


def _objectives(state: TuningState) -> list[float]:
    """The objectives of the trials that succeeded, in the order they ended."""
    succeeded = sorted(state.succeeded(), key=lambda t: t.end_time or 0.0)
    return [t.objective for t in succeeded if t.objective is not None]


def not_improving(objectives: Sequence[float], minimize: bool) -> int:
    """How many trials since the last one that improved on the best before it by 1% or more
    (the first trial improves on nothing: it sets the best)."""
    best, count = None, 0
    for value in objectives:
        gain = None if best is None else (best - value if minimize else value - best)
        if gain is None or gain > 0 and gain >= IMPROVEMENT * abs(best):
            best, count = value, 0
        else:
            count += 1
            if (value < best) if minimize else (value > best):
                best = value  # a smaller gain is still the best, but counts as not improving
    return count


def reached(criteria: Mapping[str, Any] | None, state: TuningState, minimize: bool
            ) -> str | None:
    """Why the tuning job is complete now by its criteria (a sentence), None while it is not."""
    if not criteria:
        return None
    objectives = _objectives(state)
    target = criteria.get("TargetObjectiveMetricValue")
    if target is not None and any(v <= target if minimize else v >= target
                                  for v in objectives):
        return f"a trial's objective reached TargetObjectiveMetricValue {target}"
    limit = (criteria.get("BestObjectiveNotImproving") or {}).get(
        "MaxNumberOfTrainingJobsNotImproving")
    if limit is not None and not_improving(objectives, minimize) >= limit:
        return f"{limit} trials in a row did not improve the best objective by 1% or more"
    return None


def details(criteria: Mapping[str, Any] | None, state: TuningState, minimize: bool
            ) -> dict[str, Any]:
    """DescribeHyperParameterTuningJob's `TuningJobCompletionDetails` member (empty without
    criteria)."""
    if not criteria:
        return {}
    return {"TuningJobCompletionDetails": {
        "NumberOfTrainingJobsObjectiveNotImproving": not_improving(_objectives(state),
                                                                   minimize)}}
