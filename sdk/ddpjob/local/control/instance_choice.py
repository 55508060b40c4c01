"""`ResourceConfig.InstancePreferences` on this machine: the first candidate it can run.

SageMaker (2026) takes up to five (InstanceType, InstanceCount) candidates in order of
preference instead of one `InstanceType`/`InstanceCount`, starts the job on the first it has
capacity for and answers which in `SelectedInstanceType`/`SelectedInstanceCount`. Locally the
"capacity" is what this machine can run: the first candidate that passes the checks a request
naming it alone would pass. The request is never changed: the choice is a copy of it, which
the job runs and its description shows. `InstancePlacementConfig` (placement on UltraServers)
has no effect on one machine: accepted and logged.
"""

from __future__ import annotations

import copy
import logging
from collections.abc import Callable
from typing import Any

from ddpjob.errors import ControlPlaneError

log = logging.getLogger(__name__)

# What botocore's model says InstancePreferences excludes, as (where, member).
_EXCLUSIVE = (("ResourceConfig", "InstanceType"), ("ResourceConfig", "InstanceGroups"),
              ("ResourceConfig", "InstancePlacementConfig"), (None, "EnableManagedSpotTraining"))


def choose(request: dict[str, Any], check: Callable[[dict[str, Any]], None],
           refuse: Callable[[str], Exception]) -> dict[str, Any]:
    """A copy of `request` with the first of its InstancePreferences that `check` (raising
    ControlPlaneError) accepts as its InstanceType/InstanceCount and Selected*; `refuse(text)`
    when none is, or when the preferences break SageMaker's rules. A request without
    preferences is `check`ed and returned as it is. `request` itself is never changed."""
    resources = request.get("ResourceConfig") or {}
    candidates = resources.get("InstancePreferences")
    if not candidates:
        if "InstancePlacementConfig" in resources:
            log.warning("ResourceConfig.InstancePlacementConfig has no effect on this machine "
                        "(local mode: every host is on it)")
        check(request)
        return request
    _check_rules(request, candidates, refuse)
    reasons = []
    for index, candidate in enumerate(candidates):
        kind = candidate["InstanceType"]
        count = candidate.get("InstanceCount", resources.get("InstanceCount"))
        chosen = copy.deepcopy(request)
        chosen["ResourceConfig"].update(InstanceType=kind, InstanceCount=count,
                                        SelectedInstanceType=kind, SelectedInstanceCount=count)
        try:
            check(chosen)
        except ControlPlaneError as exc:
            reasons.append(f"[{index}] {kind} x {count}: {exc.service_message}")
            continue
        log.info("InstancePreferences: running on %s x %d (candidate %d)", kind, count, index)
        return chosen
    raise refuse("ResourceConfig.InstancePreferences: no candidate can run on this machine; "
                 + "; ".join(reasons))


def _check_rules(request: dict[str, Any], candidates: list[dict[str, Any]],
                 refuse: Callable[[str], Exception]) -> None:
    """What botocore's model documents for InstancePreferences: it excludes InstanceType,
    InstanceGroups, InstancePlacementConfig and EnableManagedSpotTraining, and the instance
    count is set on every candidate or only as ResourceConfig.InstanceCount."""
    resources = request["ResourceConfig"]
    for where, member in _EXCLUSIVE:
        if (resources if where else request).get(member):
            named = f"{where}.{member}" if where else member
            raise refuse(f"ResourceConfig.InstancePreferences cannot be combined with {named}: "
                         f"give InstancePreferences (on-demand or training-plan capacity) or "
                         f"{named}, not both")
    counted = sum("InstanceCount" in candidate for candidate in candidates)
    job_count = "InstanceCount" in resources
    if (counted, job_count) not in ((len(candidates), False), (0, True)):
        raise refuse(f"ResourceConfig.InstancePreferences: set InstanceCount on every preference "
                     f"and not ResourceConfig.InstanceCount, or only ResourceConfig.InstanceCount;"
                     f" got it on {counted} of {len(candidates)} preferences and "
                     f"{'also' if job_count else 'not'} on ResourceConfig")
