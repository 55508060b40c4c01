"""Which program the local hosts of a request run, and what follows from it.

- A request that names its own container command (`ContainerEntrypoint`, e.g. ModelTrainer's
  drivers) runs that command (`container_host`), whatever its image.
- Otherwise a request on SageMaker's PyTorch training container runs that container's toolkit
  (`dlc_host`).
- Otherwise the hosts run ddpjob's runtime (`ddpjob-train`), which needs `sagemaker_program`.

The first two stage their own channels and checkpoint on every host, as SageMaker does around
a container; ddpjob's runtime has them staged once per job by the supervisor (`staging`).
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from ddpjob.local import container_host, dlc_host, templates


def runs_image_program(request: dict[str, Any]) -> bool:
    """Whether the hosts run the image's own program (a container command or the DLC's
    toolkit), with the platform's duties done around it on every host."""
    return container_host.is_container_request(request) or dlc_host.is_dlc_request(request)


def forks_from_template(request: dict[str, Any]) -> bool:
    """Whether the hosts' runtime, agents and workers are forked from a template process
    (`templates`): ddpjob's runtime does, unless `DDPJOB_PRELOAD=0`; an image's program never."""
    return templates.enabled() and not runs_image_program(request)


def needs_program(request: dict[str, Any]) -> bool:
    """Whether the hosts need `sagemaker_program` (all but a container command's)."""
    return not container_host.is_container_request(request)


def problem(request: dict[str, Any]) -> str | None:
    """Why this machine cannot run the request's hosts (one line), or None."""
    container = container_host.is_container_request(request)  # never the DLC's toolkit then
    return container_host.request_problem(request) or (
        None if container else dlc_host.request_problem(request))


def host_command(request: dict[str, Any], job_dir: Path, host: str) -> list[str] | None:
    """The command of local host `host`, or None for ddpjob's runtime."""
    if container_host.is_container_request(request):
        module = container_host.MODULE
    elif dlc_host.is_dlc_request(request):
        module = dlc_host.MODULE
    else:
        return None
    return [sys.executable, "-m", module, str(job_dir), host]  # `platform_host.main`
