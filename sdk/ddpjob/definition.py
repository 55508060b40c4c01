"""The job definition: a plain, typed description of one training job (TorchX's `AppDef`).

A front end (the estimators, the CLI's job spec through them) builds it from its own checked
arguments; `planner.plan(definition, scheduler)` turns it into that scheduler's
CreateTrainingJob request. It names no backend: what a scheduler owns (the image it runs when
none is named, the role, the default output location) is left None for the scheduler to fill.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from ddpjob_runtime.shared.storage import Location

from ddpjob.inputs import Input
from ddpjob.packaging import SourceSpec

DEFAULT_MAX_RUN = 24 * 60 * 60


@dataclass(frozen=True)
class Code:
    """The checked code, the folder its archive goes to (None: the job's output folder), and
    whether `ddpjob_runtime` is packed beside it (SageMaker's PyTorch container lacks it)."""

    source: SourceSpec
    location: Location | None = None
    include_runtime: bool = False


@dataclass(frozen=True)
class Resources:
    """The hosts of the job."""

    instance_type: str
    instance_count: int = 1


@dataclass(frozen=True)
class Stopping:
    """How long the job may run, wait for spot capacity, and how often it is retried."""

    max_run: int = DEFAULT_MAX_RUN
    max_wait: int | None = None
    use_spot_instances: bool = False
    max_retry_attempts: int | None = None


@dataclass(frozen=True)
class JobDefinition:
    """One job: its name, code, hosts, hyperparameters, data, and where its results go."""

    name: str
    code: Code
    resources: Resources
    stopping: Stopping = field(default_factory=Stopping)
    #: The user's hyperparameters, JSON-encoded.
    hyperparameters: Mapping[str, str] = field(default_factory=dict)
    #: What the `distribution` adds (raw values), then a framework (the Training Compiler).
    distribution: Mapping[str, Any] = field(default_factory=dict)
    framework: Mapping[str, Any] = field(default_factory=dict)
    container_log_level: int = logging.INFO
    inputs: tuple[Input, ...] = ()
    image: str | None = None  # None: the scheduler's own
    role: str | None = None  # None: the scheduler's default
    output: Location | None = None  # None: the scheduler's default
    checkpoint: Location | None = None
    environment: Mapping[str, str] = field(default_factory=dict)
    tags: tuple[Mapping[str, str], ...] = ()
    #: The checked values of the argument table's request rows (volume, VPC, metrics, ...).
    members: Mapping[str, Any] = field(default_factory=dict)
