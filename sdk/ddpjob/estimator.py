"""`Estimator` and `PyTorch`: the official SageMaker Python SDK v2 names, for DDP jobs.

    est = PyTorch(entry_point="train.py", source_dir="src", instance_count=2,
                  instance_type="local", distribution={"torch_distributed": {"enabled": True}})
    print(est.training_job_request())     # the dry run: what would be sent, nothing is sent
    est.fit({"train": "s3://bucket/train"})

Arguments are checked once, when the estimator is made (`validation`, and the table of the
official SDK's request arguments in `arguments`); the request is built and checked against
botocore's model once per dry run or `fit`, before anything is packed, uploaded or submitted.
What differs between backends is asked of the session, never branched on here.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ddpjob_runtime import contract, storage
from ddpjob_runtime.hyperparameters import check_total, check_user_hyperparameters, encode

from ddpjob import arguments, backends, gitsource, inputs, naming, packaging, uploads, validation
from ddpjob.base_session import BaseSession
from ddpjob.distribution import MPI, distribution_hyperparameters
from ddpjob.errors import UserInputError
from ddpjob.image_uris import (
    ImageRequest,
    is_dlc,
    training_image_uri,
)
from ddpjob.job_results import JobResults
from ddpjob.reattach import init_params_from_description
from ddpjob.request import JobSpec, build_request
from ddpjob.training_job import TrainingJob

logger = logging.getLogger(__name__)

DEFAULT_MAX_RUN = 24 * 60 * 60
DEFAULT_BASE_JOB_NAME = "pytorch-training"
#: v1 names whose v2 name is a parameter of `Estimator.__init__` (the rest are table rows).
_NAMED_V2 = ("instance_count", "instance_type", "max_run", "use_spot_instances", "max_wait",
             "image_uri")


@dataclass(frozen=True)
class Plan:
    """A checked request, its channels (what to upload) and where the code goes (None: the
    code is already stored, `source_dir` named an archive)."""

    request: dict[str, Any]
    channels: list[inputs.Channel]
    code_uri: str | None


def _default_session(instance_type: str) -> BaseSession:
    return (backends.for_instance_type(instance_type) or backends.SAGEMAKER).session_type()()


def _one_session(session: Any, alias: Any) -> Any:
    if session is not None and alias is not None:
        raise UserInputError("give session or sagemaker_session, not both")
    session = session if session is not None else alias
    if session is not None and not isinstance(session, BaseSession):
        raise UserInputError(f"session must be a ddpjob Session or LocalSession, got "
                             f"{type(session).__name__}")
    return session


def _first_group_type(groups: Any) -> str | None:
    """The instance type of the first of `instance_groups` (official objects or dicts)."""
    if not isinstance(groups, (list, tuple)) or not groups:
        return None
    first = arguments.BY_NAME["instance_groups"].check(groups)[0]
    return first.get("InstanceType")


def _code_source(entry_point: Any, source_dir: Any, dependencies: Any) -> packaging.SourceSpec:
    """The checked code; an already stored archive (file://, as attach passes) is used as is."""
    if isinstance(source_dir, str) and source_dir.startswith("file://") and \
            source_dir.endswith(".tar.gz") and isinstance(entry_point, str):
        return packaging.SourceSpec(entry_point, entry_point, None, (), source_uri=source_dir)
    return packaging.check_source(entry_point, source_dir, dependencies)


class Estimator(JobResults):
    """A DDP training job's definition: code, hosts, distribution, data and output locations.

    Arguments are those of the official SDK's `sagemaker.estimator.Framework`: `entry_point`,
    `source_dir`, `dependencies`, `git_config`, `hyperparameters`, `instance_count`,
    `instance_type` ("local" (the default), "local_gpu" or "ml.*"; with `instance_groups`,
    the first group's type picks the session and container), `distribution`, `role`, `image_uri`,
    `output_path`, `code_location`, `base_job_name`, `environment`, `max_run`,
    `checkpoint_s3_uri`, `tags`, `session` (alias `sagemaker_session`; default: LocalSession for
    local instance types, else Session), `use_spot_instances`, `max_wait`, `max_retry_attempts`,
    `container_log_level`, and every argument of `ddpjob.arguments.ROWS` (volume_size,
    metric_definitions, subnets, ...). v1 names (`train_instance_type`, ...) are renamed with a
    warning; arguments the official SDK ignores (`job_name`, `wait`, ...) are ignored with one.
    """

    _default_base_job_name: str | None = None

    def __init__(
        self,
        entry_point: str | os.PathLike,
        source_dir: str | os.PathLike | None = None,
        dependencies: list[str | os.PathLike] | None = None,
        hyperparameters: Mapping[str, Any] | None = None,
        instance_count: int = 1,
        instance_type: str | None = None,
        distribution: Mapping[str, Any] | None = None,
        role: str | None = None,
        image_uri: str | None = None,
        output_path: str | None = None,
        code_location: str | None = None,
        base_job_name: str | None = None,
        environment: Mapping[str, str] | None = None,
        max_run: int = DEFAULT_MAX_RUN,
        checkpoint_s3_uri: str | None = None,
        tags: list[dict[str, str]] | Mapping[str, str] | None = None,
        session: BaseSession | None = None,
        use_spot_instances: bool = False,
        max_wait: int | None = None,
        max_retry_attempts: int | None = None,
        container_log_level: int = logging.INFO,
        git_config: Mapping[str, str] | None = None,
        **kwargs: Any,
    ):
        """Check every argument now (UserInputError naming it); nothing is packed or sent."""
        kwargs = dict(kwargs)
        session = _one_session(session, kwargs.pop("sagemaker_session", None))
        renamed = arguments.rename_v1(kwargs)
        core = {"instance_count": instance_count, "instance_type": instance_type,
                "max_run": max_run, "use_spot_instances": use_spot_instances,
                "max_wait": max_wait, "image_uri": image_uri}
        core.update({name: renamed.pop(name) for name in _NAMED_V2 if name in renamed})
        kwargs.update(renamed)
        arguments.drop_ignored(kwargs)
        table = {name: kwargs.pop(name) for name in list(kwargs) if name in arguments.BY_NAME}
        if core["instance_type"] is None:  # as the official SDK: groups carry their types
            core["instance_type"] = _first_group_type(table.get("instance_groups")) or "local"
        arguments.reject_unknown(kwargs, [*arguments.BY_NAME, *core, "source_dir",
                                          "hyperparameters", "distribution", "environment"])
        self._init_resources(core, session)
        self._init_code(entry_point, source_dir, dependencies, git_config)
        self._init_job(hyperparameters, distribution, role, base_job_name, environment,
                       max_retry_attempts, container_log_level, tags)
        self._table = arguments.check({**self._table_defaults(), **table})
        for name, value in self._table.items():
            setattr(self, name, value)
        self.output_path = self._check_location(output_path, "output_path")
        self.code_location = self._check_location(code_location, "code_location")
        self.checkpoint_s3_uri = self._check_location(checkpoint_s3_uri, "checkpoint_s3_uri")
        self.latest_training_job: TrainingJob | None = None
        self._resolved_image: str | None = None

    # ------------------------------------------------------------------ argument checks

    def _init_resources(self, core: dict[str, Any], session: BaseSession | None) -> None:
        instance_type = core["instance_type"]
        if backends.for_instance_type(instance_type) is None:
            raise UserInputError(f"instance_type {instance_type!r} is not allowed: use 'local' "
                                 f"(CPU), 'local_gpu' or a SageMaker type such as "
                                 f"'ml.g5.12xlarge'")
        self.instance_type = instance_type
        self.instance_count = validation.positive_int(core["instance_count"], "instance_count")
        self.sagemaker_session = self.session = session or _default_session(instance_type)
        self.session.check_instance_type(instance_type)
        self.image_uri = validation.optional_str(core["image_uri"], "image_uri")
        self.max_run = validation.positive_int(core["max_run"], "max_run")
        spot = core["use_spot_instances"]
        if not isinstance(spot, bool):
            raise UserInputError(f"use_spot_instances must be True or False, got {spot!r}")
        self.use_spot_instances = spot
        self.max_wait = validation.optional_int(core["max_wait"], "max_wait")
        if self.max_wait is not None and not spot:
            raise UserInputError("max_wait is only allowed with use_spot_instances=True")
        if self.max_wait is not None and self.max_wait < self.max_run:
            raise UserInputError(f"max_wait ({self.max_wait}) must be >= max_run "
                                 f"({self.max_run})")

    def _init_code(self, entry_point: Any, source_dir: Any, dependencies: Any,
                   git_config: Any) -> None:
        self.entry_point, self.source_dir = entry_point, source_dir
        self.dependencies = list(dependencies or [])
        self.git_config = gitsource.check(git_config)
        self._clone: gitsource.Clone | None = None
        # With git_config the code exists once cloned, when the job is planned.
        self._source_spec = None if self.git_config else _code_source(
            entry_point, source_dir, dependencies)

    def _init_job(self, hyperparameters: Any, distribution: Any, role: Any, base_job_name: Any,
                  environment: Any, max_retry_attempts: Any, container_log_level: Any,
                  tags: Any) -> None:
        self._hyperparameters = check_user_hyperparameters(hyperparameters)
        self.distribution = dict(distribution) if isinstance(distribution, Mapping) else \
            distribution
        self._distribution_hps = distribution_hyperparameters(
            distribution, self.instance_type, dlc=self.uses_dlc)
        if self._distribution_hps.get(MPI) and self.instance_count > 1 and not self.uses_dlc:
            # Multi-host mpirun needs sshd and orted on every host: SageMaker's DLC has them,
            # the ddpjob image and local hosts do not.
            raise UserInputError(
                f"distribution 'mpi' runs on one host (instance_count=1) unless the job runs on "
                f"SageMaker's PyTorch container, got instance_count={self.instance_count}: use "
                f"{{'torch_distributed': {{'enabled': True}}}} for several hosts")
        self.role = validation.optional_str(role, "role")
        self.base_job_name = (naming.check_base_job_name(base_job_name)
                              if base_job_name is not None else None)
        self.environment = validation.environment(environment)
        self.max_retry_attempts = validation.optional_int(max_retry_attempts,
                                                          "max_retry_attempts", high=30)
        self.container_log_level = validation.positive_int(container_log_level,
                                                           "container_log_level", low=0)
        self.tags = validation.tags(tags)

    def _table_defaults(self) -> dict[str, Any]:
        """Defaults of table arguments that depend on the estimator (see PyTorch)."""
        return {}

    def _check_location(self, uri: Any, argument: str) -> str | None:
        """None, or the folder URI (plain paths become file:// where the session takes them)."""
        if uri is None:
            return None
        location = storage.parse(uri, argument=argument)
        named = self.session.check_location(str(uri), argument)
        return location.uri if location.scheme == "file" else named

    # ------------------------------------------------------------------ image and code

    def _image_request(self) -> ImageRequest | None:
        """What picks SageMaker's container when no image_uri is given (None: none does)."""
        return None

    @property
    def uses_dlc(self) -> bool:
        """True when the job runs on SageMaker's PyTorch container (not the ddpjob image), so
        the code archive must carry `ddpjob_runtime`."""
        if self.image_uri is not None:
            return is_dlc(self.image_uri)
        return self.instance_type.startswith("ml.") and self._image_request() is not None

    def training_image_uri(self) -> str:
        """The TrainingImage: `image_uri`, SageMaker's container for an `ml.*` job, or what the
        session uses when none is given (a label of the runtime installed here, locally)."""
        request = self._image_request() if self.image_uri is None else None
        if request is None or not self.instance_type.startswith("ml."):
            return self.session.training_image(self.image_uri)
        if self._resolved_image is None:  # the SDK's data is read once per estimator
            self._resolved_image = training_image_uri(request)
        return self.session.training_image(self._resolved_image)

    @property
    def _source(self) -> packaging.SourceSpec:
        if self._source_spec is None:  # git_config: clone now, paths are inside the clone
            self._clone = gitsource.clone(self.git_config or {})
            source_dir = self._clone.path(self.source_dir)
            entry = self.entry_point if source_dir else self._clone.path(self.entry_point)
            self._source_spec = packaging.check_source(
                entry, source_dir, [self._clone.path(d) for d in self.dependencies] or None)
        return self._source_spec

    # ------------------------------------------------------------------ the request

    def _job_name(self, job_name: str | None) -> str:
        if job_name is not None:
            return naming.check_job_name(job_name)
        base = self.base_job_name or self._default_base_job_name or (
            naming.base_name_from_image(self.image_uri) if self.image_uri else None
        ) or DEFAULT_BASE_JOB_NAME
        return naming.name_from_base(base)

    def hyperparameters(self) -> dict[str, str]:
        """The user's hyperparameters, JSON-encoded as the official SDK sends them."""
        return dict(self._hyperparameters)

    def _framework_hyperparameters(self) -> dict[str, Any]:
        """Hyperparameters a framework adds (raw values); see PyTorch's compiler_config."""
        return {}

    def _encoded_hyperparameters(self, name: str, code_uri: str) -> dict[str, str]:
        script_mode = {
            contract.SUBMIT_DIRECTORY: code_uri,
            contract.PROGRAM: self._source.script_name,
            contract.CONTAINER_LOG_LEVEL: self.container_log_level,
            contract.JOB_NAME: name,
        }
        if self.session.region_name:
            script_mode[contract.REGION] = self.session.region_name
        encoded = {**self._hyperparameters, **encode(script_mode),
                   **encode(self._distribution_hps), **encode(self._framework_hyperparameters())}
        check_total(encoded, len(self._hyperparameters))
        return encoded

    def _plan(self, inputs_arg: Any, job_name: str | None) -> Plan:
        """The request as the session's dry run checks it, and what to store first. Changes
        nothing anywhere (the session's default bucket is created only by `submit`)."""
        name = self._job_name(job_name)
        role = self.session.resolve_role(self.role)
        output_path = self.output_path or self.session.default_output_path()

        def input_location(channel: str) -> str | None:  # None: the hosts read it in place
            prefix = self.session.input_prefix(name)
            return None if prefix is None else storage.join(prefix, channel)

        channel_list = inputs.channels(inputs_arg, input_location)
        if self.uses_dlc:  # the runtime is packed beside the code: refuse a clash now
            packaging.check_runtime_name_free(self._source)
        code_uri = self._source.source_uri or storage.join(
            self.code_location or output_path, name, "source", packaging.ARCHIVE_NAME)
        spec = JobSpec(
            job_name=name, image_uri=self.training_image_uri(), role=role,
            instance_type=self.instance_type, instance_count=self.instance_count,
            output_path=output_path,
            hyperparameters=self._encoded_hyperparameters(name, code_uri),
            channels=[channel.config for channel in channel_list], max_run=self.max_run,
            max_wait=self.max_wait, use_spot_instances=self.use_spot_instances,
            max_retry_attempts=self.max_retry_attempts, environment=self.environment,
            tags=self.tags, checkpoint_s3_uri=self.checkpoint_s3_uri)
        part = arguments.request_part({**self._table, "output_path": output_path})
        request = self.session.submit_dryrun(build_request(spec, part))
        return Plan(request, channel_list, None if self._source.source_uri else code_uri)

    def training_job_request(self, inputs: Any = None, job_name: str | None = None) -> dict:
        """The dry run: the CreateTrainingJob request `fit` would send, checked by botocore.

        Nothing is packed, uploaded, created or submitted; the code's URI is where `fit` would
        put it (a SageMaker Session's default bucket is named, not created).
        """
        return self._plan(inputs, job_name).request

    # ------------------------------------------------------------------ running

    def fit(self, inputs: Any = None, wait: bool = True, logs: bool | str = "All",
            job_name: str | None = None) -> None:
        """Pack and upload the code (and local inputs of a SageMaker job), submit the job and,
        with `wait`, follow it to the end (raising JobFailedError when it fails).

        `inputs`: a URI (channel "training"), a TrainingInput, or a dict channel -> either;
        file:// and plain paths are local data (read in place by local jobs, uploaded first
        for SageMaker jobs). `logs`: "All"/True prints every host's lines, "None"/False not.
        """
        if logs not in (True, False, "All", "None", "Rules"):
            raise UserInputError(f"logs must be 'All', 'None', True or False, got {logs!r}")
        plan = self._plan(inputs, job_name)
        uploads.check_buckets((self.output_path, self.code_location, self.checkpoint_s3_uri))

        def stage() -> None:  # after the session reserved the job name, before it starts
            if plan.code_uri is not None:
                uploads.stage_code(self._source, plan.code_uri, include_runtime=self.uses_dlc)
            uploads.stage_inputs(plan.channels)

        self.latest_training_job = self.session.submit(plan.request, stage)
        name = plan.request["TrainingJobName"]
        print(f"Started training job {name}", flush=True)
        if wait:
            self.latest_training_job.wait(logs=logs in (True, "All"))

    # ------------------------------------------------------------------ attach

    @classmethod
    def attach(cls, training_job_name: str, sagemaker_session: BaseSession | None = None,
               model_channel_name: str = "model", *, session: BaseSession | None = None,
               wait: bool = True, logs: bool = False) -> Estimator:
        """An estimator for an existing job (started here or elsewhere), made through the
        constructor from the job's description, as the official SDK does. The session
        defaults to a LocalSession; pass `Session()` for SageMaker jobs. With `wait`, wait
        until the job ends, printing its status (its log lines too with `logs`; as the official
        SDK, not by default: `estimator.logs()` prints them)."""
        naming.check_job_name(training_job_name, "training_job_name")
        session = _one_session(session, sagemaker_session)
        session = session or backends.LOCAL.session_type()()
        description = session.describe(training_job_name)
        params = init_params_from_description(description, backends.LOCAL.default_image)
        if model_channel_name != "model":
            params["model_channel_name"] = model_channel_name
        estimator = cls(session=session, **params)
        estimator.latest_training_job = TrainingJob(session, training_job_name)
        if wait:
            estimator.latest_training_job.wait(logs=logs)
        return estimator

