"""`ResourceConfig.InstancePreferences` on this machine: the first candidate it can run.

SageMaker (2026) takes up to five (InstanceType, InstanceCount) candidates in order of
preference instead of one `InstanceType`/`InstanceCount`, starts the job on the first it has
capacity for and answers which in `SelectedInstanceType`/`SelectedInstanceCount`. Locally the
"capacity" is what this machine can run: the first candidate that passes the checks a request
naming it alone would pass. `InstancePlacementConfig` (placement of several jobs' instances) has
no effect on one machine: accepted and logged.
"""

from __future__ import annotations

import copy
import logging
from collections.abc import Callable
from typing import Any

from ddpjob.errors import ControlPlaneError

log = logging.getLogger(__name__)


def choose(request: dict[str, Any], check: Callable[[dict[str, Any]], None],
           refuse: Callable[[str], Exception]) -> dict[str, Any]:
    """`request` with the first of its InstancePreferences that `check` (raising
    ControlPlaneError) accepts as its InstanceType/InstanceCount and Selected*; `refuse(text)`
    when none is. A request without preferences is `check`ed as it is."""
    resources = request.get("ResourceConfig") or {}
    if "InstancePlacementConfig" in resources:
        log.warning("ResourceConfig.InstancePlacementConfig has no effect on this machine "
                    "(local mode: every host is on it)")
    candidates = resources.get("InstancePreferences")
    if not candidates:
        check(request)
        return request
    if "InstanceType" in resources or "InstanceGroups" in resources:
        raise refuse("ResourceConfig: give InstancePreferences or InstanceType (or "
                     "InstanceGroups), not both")
    reasons = []
    for index, candidate in enumerate(candidates):
        chosen = copy.deepcopy(request)
        chosen["ResourceConfig"].update(
            InstanceType=candidate["InstanceType"], InstanceCount=candidate["InstanceCount"],
            SelectedInstanceType=candidate["InstanceType"],
            SelectedInstanceCount=candidate["InstanceCount"])
        try:
            check(chosen)
        except ControlPlaneError as exc:
            reasons.append(f"[{index}] {candidate['InstanceType']} x "
                           f"{candidate['InstanceCount']}: {exc.service_message}")
            continue
        log.info("InstancePreferences: running on %s x %d (candidate %d)",
                 candidate["InstanceType"], candidate["InstanceCount"], index)
        return chosen
    raise refuse("ResourceConfig.InstancePreferences: no candidate can run on this machine; "
                 + "; ".join(reasons))
