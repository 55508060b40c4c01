"""`plan(definition, scheduler)`: a job definition -> the scheduler's checked CreateTrainingJob
request; `submit` is that plan, then storing the code and local inputs, then starting the job.

The one place a request is made: every front end builds a `JobDefinition` and calls these
(TorchX's `submit` is `schedule(submit_dryrun(app))`). The scheduler (a session) fills in what it
owns: its backend's image when none is named, the role, the default output location, where local
inputs go, and its own dry run.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ddpjob_runtime.shared import contract, storage
from ddpjob_runtime.shared.hyperparameters import check_total, encode

from ddpjob import arguments, inputs, packaging, uploads
from ddpjob.base_session import BaseSession
from ddpjob.definition import Code, JobDefinition
from ddpjob.errors import InvalidRequestError
from ddpjob.training_job import TrainingJob


@dataclass(frozen=True)
class Plan:
    """A checked request, its channels (what to upload), its code and where the code goes
    (None: it is already stored, `source_dir` named an archive)."""

    request: dict[str, Any]
    channels: tuple[inputs.Channel, ...]
    code: Code
    code_uri: str | None


def _hyperparameters(definition: JobDefinition, code_uri: str,
                     region: str | None) -> dict[str, str]:
    """The user's, then script mode's, the distribution's and the framework's, encoded."""
    script_mode: dict[str, object] = {
        contract.SUBMIT_DIRECTORY: code_uri,
        contract.PROGRAM: definition.code.source.script_name,
        contract.CONTAINER_LOG_LEVEL: definition.container_log_level,
        contract.JOB_NAME: definition.name,
    }
    if region:
        script_mode[contract.REGION] = region
    encoded = {**definition.hyperparameters, **encode(script_mode),
               **encode(definition.distribution), **encode(definition.framework)}
    check_total(encoded, len(definition.hyperparameters))
    return encoded


def _request(definition: JobDefinition, values: Mapping[str, Any],
             channels: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """The CreateTrainingJob request: the job's name and channels, then every row's members."""
    request: dict[str, Any] = {"TrainingJobName": definition.name}
    if channels:
        request["InputDataConfig"] = [dict(channel) for channel in channels]
    arguments.merge(request, arguments.request_part(values))
    if "InstanceGroups" in request["ResourceConfig"]:  # groups replace type and count
        for key in ("InstanceType", "InstanceCount"):
            request["ResourceConfig"].pop(key)
    if request.get("CheckpointConfig", {}).keys() == {"LocalPath"}:
        request.pop("CheckpointConfig")  # SageMaker needs S3Uri; a local path alone means nothing
    return request


def plan(definition: JobDefinition, scheduler: BaseSession) -> Plan:
    """The request as `scheduler`'s dry run checks it, and what to store first. Changes nothing
    anywhere (a SageMaker session's default bucket is named, not created)."""
    role = scheduler.resolve_role(definition.role)
    output = definition.output.uri if definition.output else scheduler.default_output_path()

    def input_location(channel: str) -> str | None:  # None: the hosts read it in place
        prefix = scheduler.input_prefix(definition.name)
        return None if prefix is None else storage.join(prefix, channel)

    channels = inputs.channels(definition.inputs, input_location)
    source = definition.code.source
    if definition.code.include_runtime:  # the runtime is packed beside the code: no clash
        packaging.check_runtime_name_free(source)
    code_folder = definition.code.location.uri if definition.code.location else output
    code_uri = source.source_uri or storage.join(code_folder, definition.name, "source",
                                                 packaging.ARCHIVE_NAME)
    stopping, resources, checkpoint = definition.stopping, definition.resources, \
        definition.checkpoint
    image = scheduler.backend.training_image(definition.image)
    values = {
        **definition.members, "instance_type": resources.instance_type,
        "instance_count": resources.instance_count, "role": role, "output_path": output,
        "image_uri": image, "max_run": stopping.max_run,
        "max_wait": stopping.max_wait, "use_spot_instances": stopping.use_spot_instances,
        "max_retry_attempts": stopping.max_retry_attempts,
        "hyperparameters": _hyperparameters(definition, code_uri, scheduler.region_name),
        "environment": dict(definition.environment), "tags": [dict(t) for t in definition.tags],
        "checkpoint_s3_uri": checkpoint.uri if checkpoint else None}
    request = _request(definition, values, [channel.config for channel in channels])
    try:
        checked = scheduler.submit_dryrun(request)
    except InvalidRequestError as exc:
        raise _naming_the_argument(exc) from None
    return Plan(checked, tuple(channels), definition.code, None if source.source_uri else code_uri)


def _naming_the_argument(error: InvalidRequestError) -> InvalidRequestError:
    """The scheduler's refusal headed by the estimator argument that set the request member it
    names (`instance_count: ... ResourceConfig.InstanceCount 10000 ...`): the user wrote the
    argument, not the member."""
    message = str(error)
    named = [row for row in arguments.ROWS
             if re.search(rf"(?<![\w.]){re.escape(row.member)}(?![\w])", message)]
    longest = max((len(row.member) for row in named), default=0)  # the most precise member
    named = [row.name for row in named if len(row.member) == longest]
    if len(named) != 1:  # no member named, or one several arguments set
        return error
    return InvalidRequestError(f"{named[0]}: {message}", code=error.code,
                               operation=error.operation, service_message=error.service_message)


def _stage(planned: Plan) -> None:
    """Store the code and the local inputs (after the scheduler reserved the job's name)."""
    if planned.code_uri is not None:
        uploads.stage_code(planned.code.source, planned.code_uri,
                           include_runtime=planned.code.include_runtime)
    uploads.stage_inputs(planned.channels)


def prepare(definition: JobDefinition, scheduler: BaseSession) -> tuple[Plan, Callable[[], None]]:
    """Plan the job and check its buckets; the second item stores its files (to run once the
    scheduler reserved the name). A tuning job's trials are planned this way too."""
    planned = plan(definition, scheduler)
    uploads.check_buckets((definition.output, definition.code.location, definition.checkpoint))
    return planned, functools.partial(_stage, planned)


def submit(definition: JobDefinition, scheduler: BaseSession) -> TrainingJob:
    """Plan the job, check its buckets, then let `scheduler` reserve its name, store its files
    and start it."""
    planned, stage = prepare(definition, scheduler)
    return scheduler.submit_checked(planned.request, stage)
