"""Which backend runs a job: one line per backend in `BACKENDS` (a `BaseSession` subclass in a
package of its own). The estimator, config and CLI ask this registry, never a backend's
package, what an instance type or a config name means.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import TYPE_CHECKING

from ddpjob.errors import UserInputError

if TYPE_CHECKING:
    from ddpjob.base_session import BaseSession


@dataclass(frozen=True)
class Backend:
    """A backend: its config name, its session class ("module:Class", imported only when a
    session is made), the instance types it runs (by name or prefix, `allowed` says them), the
    type a run that names none gets (None: one is required), and the TrainingImage it records
    when the estimator names none ("": the estimator must name one)."""

    name: str
    session_class: str
    allowed: str
    instance_types: tuple[str, ...] = ()
    type_prefix: str | None = None
    default_instance_type: str | None = None
    default_image: str = ""

    def runs(self, instance_type: object) -> bool:
        return isinstance(instance_type, str) and (
            instance_type in self.instance_types
            or (self.type_prefix is not None and instance_type.startswith(self.type_prefix)))

    def session_type(self) -> type[BaseSession]:
        module, _, name = self.session_class.partition(":")
        return getattr(importlib.import_module(module), name)


LOCAL = Backend("local", "ddpjob.local.session:LocalSession", "'local' or 'local_gpu'",
                instance_types=("local", "local_gpu"), default_instance_type="local",
                default_image="ddpjob-local")
SAGEMAKER = Backend("sagemaker", "ddpjob.sagemaker.session:Session",
                    "an 'ml.*' type such as 'ml.g5.12xlarge'", type_prefix="ml.")
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
