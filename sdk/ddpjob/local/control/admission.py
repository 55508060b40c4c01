"""Admission: a checked CreateTrainingJob request becomes the typed job its rooms read.

Everything that follows from the request and that the control plane alone may decide is
decided here, once: which program the hosts run (`hostkind.of`) and which warm pool the job
may take (`pools.match_key`). The rest is parsed by `base.admitted`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ddpjob.local.base import admitted
from ddpjob.local.hostkinds import hostkind
from ddpjob.local.warmpools import pools


def admit(request: Mapping[str, Any]) -> admitted.AdmittedJob:
    """The job of a checked request."""
    kind = hostkind.of(dict(request))
    return admitted.admit(request, kind.name, pools.match_key(request, kind.forks_from_template()))
