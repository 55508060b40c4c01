"""Which program the local hosts of a request run, and what follows from it: one `HostKind` per
request, chosen once by `of`.

- A request that names its own container command (`ContainerEntrypoint`, e.g. ModelTrainer's
  drivers) runs that command (`container_host`), whatever its image: `CONTAINER`.
- Otherwise a request on SageMaker's PyTorch training container runs that container's toolkit
  (`dlc_host`): `DLC`.
- Otherwise the hosts run ddpjob's runtime (`ddpjob-train`), which needs `sagemaker_program`:
  `RUNTIME`.

The first two run the image's own program: each host stages its own channels and checkpoint, as
SageMaker does around a container, and the hosts rendezvous on the containers' fixed port;
ddpjob's runtime has them staged once per job by the supervisor (`staging`).
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ddpjob.local.base import templates
from ddpjob.local.hostkinds import container_host, dlc_host

Request = dict[str, Any]


@dataclass(frozen=True)
class HostKind:
    """What the local hosts of a request run, and what the checks and the supervisor do for it."""

    name: str
    module: str | None  # the module each host runs (`platform_host.main`); None: ddpjob-train
    needs_program: bool  # whether the hosts need `sagemaker_program`
    needs_local_torch: bool  # False: the DLC's toolkit runs in a Python of its own with torch
    problem: Callable[[Request], str | None]  # why this machine cannot run the hosts, or None

    @property
    def runs_image_program(self) -> bool:
        """Whether the hosts run the image's own program (a container command or the DLC's
        toolkit), with the platform's duties done around it on every host."""
        return self.module is not None

    @property
    def stages_once(self) -> bool:
        """Whether inputs are staged once for all hosts (`staging`), not by each host itself."""
        return not self.runs_image_program

    @property
    def restores_own_checkpoints(self) -> bool:
        """Whether each host restores its checkpoint itself (a job retry restages none)."""
        return self.runs_image_program

    def on_fixed_port(self, host_count: int) -> bool:
        """Whether `host_count` such hosts rendezvous on the containers' port (`fixed_port`)."""
        return self.runs_image_program and host_count > 1

    def forks_from_template(self) -> bool:
        """Whether the hosts' runtime, agents and workers are forked from a template process
        (`templates`): ddpjob's runtime does, unless `DDPJOB_PRELOAD=0`; an image's program
        never. It is also what a warm pool of the kind holds (`pools.match_key`)."""
        return templates.enabled() and not self.runs_image_program

    def host_command(self, job_dir: Path, host: str) -> list[str] | None:
        """The command of local host `host`, or None for ddpjob's runtime."""
        if self.module is None:
            return None
        return [sys.executable, "-m", self.module, str(job_dir), host]  # `platform_host.main`


def _arguments_problem(request: Request) -> str | None:
    """ContainerArguments without a command: refused, as no local host runs the image's entry
    point with arguments."""
    if (request.get("AlgorithmSpecification") or {}).get("ContainerArguments"):
        return ("AlgorithmSpecification.ContainerArguments without ContainerEntrypoint: "
                "local hosts run ContainerEntrypoint + ContainerArguments, not the image's "
                "own entry point; give ContainerEntrypoint too")
    return None


RUNTIME = HostKind("ddpjob's runtime", None, needs_program=True, needs_local_torch=True,
                   problem=_arguments_problem)
DLC = HostKind("SageMaker's PyTorch toolkit", dlc_host.MODULE, needs_program=True,
               needs_local_torch=False,
               problem=lambda r: _arguments_problem(r) or dlc_host.request_problem(r))
CONTAINER = HostKind("the container command", container_host.MODULE, needs_program=False,
                     needs_local_torch=True, problem=container_host.request_problem)


KINDS = (RUNTIME, DLC, CONTAINER)


def named(name: str) -> HostKind:
    """The kind whose `name` an admitted job records."""
    return next(kind for kind in KINDS if kind.name == name)


def of(request: Request) -> HostKind:
    """The kind of the request's local hosts."""
    if (request.get("AlgorithmSpecification") or {}).get("ContainerEntrypoint"):
        return CONTAINER
    return DLC if dlc_host.dlc_tag(request) is not None else RUNTIME
