"""Which backend runs a job, and its policy: one line per backend in `BACKENDS` (a `Backend`
value naming a `BaseSession` subclass in a package of its own). The estimator, planner, config
and CLI ask this registry (or a session's `backend`), never a backend's package, what an
instance type, an image, a role or a config name means.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from ddpjob.errors import UserInputError
from ddpjob.sagemaker import roles

if TYPE_CHECKING:
    from ddpjob.base_session import BaseSession


@dataclass(frozen=True)
class Backend:
    """A backend's policy, one value: what its jobs are called, which instance types, image and
    role they get, which URI schemes its hosts reach, how often it is polled. Static: what needs
    a session (the role's ARN, the default output folder) the session answers.

    `session_class` ("module:Class") is imported only when a session is made; `label` names its
    jobs in messages ("SageMaker"); `allowed` says the instance types it runs (by name or
    prefix); `default_instance_type` is what a run that
    names none gets (None: one is required); `default_image` is the TrainingImage it records
    when the estimator names none ("": the estimator must name one, `image_hint` says how);
    `default_role` is the RoleArn of a job that names none ("": one is required, and
    `role_check` returns it or refuses it); `inputs_in_place`: its hosts read local input data
    where it lies, else it is uploaded under the default output folder; `poll_seconds` is the
    pause between two looks at a job that is being followed.
    """

    name: str
    session_class: str
    allowed: str
    label: str
    instance_types: tuple[str, ...] = ()
    type_prefix: str | None = None
    default_instance_type: str | None = None
    default_image: str = ""
    image_hint: str = ""
    default_role: str = ""
    role_check: Callable[[str | None], str] | None = None
    storage_schemes: frozenset[str] = frozenset({"s3"})
    inputs_in_place: bool = False
    poll_seconds: float = 5.0

    def __post_init__(self) -> None:
        if not self.default_role and self.role_check is None:
            raise ValueError(f"backend {self.name}: give a default_role or a role_check")

    @property
    def session_name(self) -> str:
        """The session class's name, for messages ("LocalSession")."""
        return self.session_class.partition(":")[2]

    @property
    def requires_role(self) -> bool:
        """Whether a job needs a role named by the user (the CLI asks before anything runs)."""
        return not self.default_role

    def runs(self, instance_type: object) -> bool:
        return isinstance(instance_type, str) and (
            instance_type in self.instance_types
            or (self.type_prefix is not None and instance_type.startswith(self.type_prefix)))

    def session_type(self) -> type[BaseSession]:
        module, _, name = self.session_class.partition(":")
        return getattr(importlib.import_module(module), name)

    def check_instance_type(self, instance_type: str) -> None:
        """Raise UserInputError unless this backend runs `instance_type`."""
        if self.runs(instance_type):
            return
        other = for_instance_type(instance_type)
        hint = f" (or a {other.session_name} for {other.allowed})" if other else ""
        raise UserInputError(f"instance_type {instance_type!r} cannot run on a "
                             f"{self.session_name} ({self.label}): use {self.allowed}{hint}")

    def training_image(self, image_uri: str | None) -> str:
        """The TrainingImage of a job given the estimator's `image_uri`."""
        if image_uri is None and not self.default_image:
            raise UserInputError(f"image_uri is required for an Estimator on {self.label}: "
                                 f"{self.image_hint}")
        return image_uri or self.default_image

    def check_role(self, role: str) -> None:
        """Raise UserInputError unless this backend's jobs can be given `role`."""
        if self.role_check is not None:
            self.role_check(role)

    def resolve_role(self, role: str | None) -> str:
        """The role of a job given the estimator's `role`: the default when it names none (a
        backend that has none refuses that, as any role it cannot take)."""
        if self.role_check is not None and (role or not self.default_role):
            return self.role_check(role)
        return role or self.default_role


LOCAL = Backend("local", "ddpjob.local.session:LocalSession", "'local' or 'local_gpu'", "local",
                instance_types=("local", "local_gpu"), default_instance_type="local",
                default_image="ddpjob-local",
                default_role="arn:aws:iam::000000000000:role/ddpjob-local",  # none is assumed
                storage_schemes=frozenset({"file", "s3"}), inputs_in_place=True,
                poll_seconds=0.5)
SAGEMAKER = Backend("sagemaker", "ddpjob.sagemaker.session:Session",
                    "an 'ml.*' type such as 'ml.g5.12xlarge'", "SageMaker", type_prefix="ml.",
                    image_hint="use ddpjob.PyTorch (which picks SageMaker's PyTorch container) "
                    "or pass image_uri='<account>.dkr.ecr.<region>.amazonaws.com/<image>:<tag>' "
                    "(e.g. the ddpjob image of container/)",
                    role_check=roles.require_role)
BACKENDS = (LOCAL, SAGEMAKER)
NAMES = tuple(backend.name for backend in BACKENDS)


#: What a message says is allowed for a backend name and for an instance type.
NAMES_ALLOWED = " or ".join(repr(name) for name in NAMES)
INSTANCE_TYPES_ALLOWED = ", or ".join(backend.allowed for backend in BACKENDS)


def for_instance_type(instance_type: object) -> Backend | None:
    """The backend that runs `instance_type`, or None for a type no backend runs."""
    return next((backend for backend in BACKENDS if backend.runs(instance_type)), None)


def named(name: str) -> Backend:
    """The backend called `name` in a config file or on the command line."""
    for backend in BACKENDS:
        if backend.name == name:
            return backend
    raise UserInputError(f"backend {name!r} is not known: use one of {', '.join(NAMES)}")
