"""`Estimator` and `PyTorch`: the official SageMaker Python SDK v2 names, for DDP jobs.

    est = PyTorch(entry_point="train.py", source_dir="src", instance_count=2,
                  instance_type="local", distribution={"torch_distributed": {"enabled": True}})
    print(est.training_job_request())     # the dry run: what would be sent, nothing is sent
    est.fit({"train": "s3://bucket/train"})

Arguments are checked once, when the estimator is made (the argument table, `arguments`); each
dry run or `fit` builds the job's definition (`definition()`) and `planner.plan` makes the request
from it, checked against botocore's model before anything is packed, uploaded or submitted.
What differs between backends is asked of the session, never branched on here.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping
from typing import Any

from ddpjob_runtime.shared import storage

from ddpjob import arguments, backends, gitsource, naming, official_kwargs, packaging, planner
from ddpjob import inputs as inputs_module
from ddpjob.base_session import BaseSession
from ddpjob.definition import DEFAULT_MAX_RUN, Code, JobDefinition, Resources, Stopping
from ddpjob.distribution import MPI, distribution_hyperparameters
from ddpjob.errors import UserInputError
from ddpjob.image_uris import ImageRequest, is_dlc, training_image_uri
from ddpjob.job_results import JobResults
from ddpjob.training_job import TrainingJob

logger = logging.getLogger(__name__)

DEFAULT_BASE_JOB_NAME = "pytorch-training"
#: Names a misspelt argument is compared with (a near miss is refused as a typo).
_TYPO_TARGETS = ("instance_count", "instance_type", "max_run", "use_spot_instances", "max_wait",
                 "image_uri", "source_dir", "hyperparameters", "distribution", "environment")


def _one_session(session: object, alias: object) -> BaseSession | None:
    if session is not None and alias is not None:
        raise UserInputError("give session or sagemaker_session, not both")
    session = session if session is not None else alias
    if session is not None and not isinstance(session, BaseSession):
        raise UserInputError(f"session must be a ddpjob Session or LocalSession, got "
                             f"{type(session).__name__}")
    return session


def _first_group_type(groups: object) -> str | None:
    """The instance type of the first of `instance_groups` (official objects or dicts)."""
    if not isinstance(groups, (list, tuple)) or not groups:
        return None
    first = arguments.BY_NAME["instance_groups"].check(groups)[0]
    return first.get("InstanceType")


def _code_source(entry_point: object, source_dir: object,
                 dependencies: object) -> packaging.SourceSpec:
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
        hyperparameters: Mapping[str, object] | None = None,
        instance_count: int = 1,
        instance_type: str | None = None,
        distribution: Mapping[str, object] | None = None,
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
        given = {name: value for name, value in locals().items()  # the named parameters
                 if name in arguments.BY_NAME}
        kwargs = dict(kwargs)
        session = _one_session(session, kwargs.pop("sagemaker_session", None))
        given.update(official_kwargs.rename_v1(kwargs))  # the v1 value wins, as there
        official_kwargs.drop_ignored(kwargs)
        table = {name: kwargs.pop(name) for name in list(kwargs) if name in arguments.BY_NAME}
        if given["instance_type"] is None:  # as the official SDK: groups carry their types
            given["instance_type"] = _first_group_type(table.get("instance_groups")) or "local"
        official_kwargs.reject_unknown(kwargs, [*arguments.MEMBERS, *_TYPO_TARGETS])
        self._resolved_image: str | None = None
        values = {**given, **table}
        self._init_arguments(arguments.check(values), values, session)
        self.latest_training_job: TrainingJob | None = None

    # ------------------------------------------------------------------ argument checks

    def _init_arguments(self, checked: dict[str, Any], given: Mapping[str, Any],
                        session: BaseSession | None) -> None:
        """Keep the checked values, then check what needs the session (folder URIs), the code and
        the distribution; `given`: the arguments as the user gave them."""
        for name, value in checked.items():
            setattr(self, "_hyperparameters" if name == "hyperparameters" else name, value)
        backend = backends.for_instance_type(self.instance_type) or backends.SAGEMAKER
        self.sagemaker_session = self.session = session or backend.session_type()()
        self.session.backend.check_instance_type(self.instance_type)
        self._locations = {name: self._named_location(checked[name], given.get(name), name)
                           for name in arguments.LOCATIONS}
        for name, location in self._locations.items():  # the URIs, as the official SDK's
            setattr(self, name, location.uri if location else None)
        dependencies, self.dependencies = self.dependencies, list(self.dependencies or [])
        self._clone: gitsource.Clone | None = None
        # With git_config the code exists once cloned, when the job is planned.
        self._source_spec = None if self.git_config else _code_source(
            self.entry_point, self.source_dir, dependencies)
        if isinstance(self.distribution, Mapping):
            self.distribution = dict(self.distribution)
        self._distribution_hps = distribution_hyperparameters(
            self.distribution, self.instance_type, dlc=self.uses_dlc)
        if self._distribution_hps.get(MPI) and self.instance_count > 1 and not self.uses_dlc:
            # Multi-host mpirun needs sshd and orted on every host: SageMaker's DLC has them,
            # the ddpjob image and local hosts do not.
            raise UserInputError(
                f"distribution 'mpi' runs on one host (instance_count=1) unless the job runs on "
                f"SageMaker's PyTorch container, got instance_count={self.instance_count}: use "
                f"{{'torch_distributed': {{'enabled': True}}}} for several hosts")
        defaults = {name: value for name, value in self._table_defaults().items()
                    if name not in given}
        self._members = {name: checked[name] for name in arguments.MEMBERS} | defaults
        for name, value in defaults.items():
            setattr(self, name, value)

    def _table_defaults(self) -> dict[str, Any]:
        """Defaults of table arguments that depend on the estimator (see PyTorch)."""
        return {}

    def _named_location(self, location: storage.Location | None, uri: object,
                        argument: str) -> storage.Location | None:
        """The parsed folder URI as the session's requests name it (it may name an `s3://` URI
        otherwise: a local bucket is a folder)."""
        if location is None:
            return None
        named = self.session.check_location(str(uri), argument)
        if location.scheme == "file" or named == location.uri:
            return location
        return storage.parse(named, argument=argument)

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

    def _image(self) -> str | None:
        """`image_uri`, SageMaker's container for an `ml.*` job, or None (the session's own)."""
        request = self._image_request() if self.image_uri is None else None
        if request is None or not self.instance_type.startswith("ml."):
            return self.image_uri
        if self._resolved_image is None:  # the SDK's data is read once per estimator
            self._resolved_image = training_image_uri(request)
        return self._resolved_image

    def training_image_uri(self) -> str:
        """The TrainingImage: `image_uri`, SageMaker's container for an `ml.*` job, or what the
        session uses when none is given (a label of the runtime installed here, locally)."""
        return self.session.backend.training_image(self._image())

    @property
    def _source(self) -> packaging.SourceSpec:
        if self._source_spec is None:  # git_config: clone now, paths are inside the clone
            self._clone = gitsource.clone(self.git_config or {})
            source_dir = self._clone.path(self.source_dir)
            entry = self.entry_point if source_dir else self._clone.path(self.entry_point)
            self._source_spec = packaging.check_source(
                entry, source_dir, [self._clone.path(d) for d in self.dependencies] or None)
        return self._source_spec

    # ------------------------------------------------------------------ the definition

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

    def definition(self, inputs: inputs_module.Inputs = None,
                   job_name: str | None = None) -> JobDefinition:
        """The job `fit(inputs, job_name=job_name)` would plan (a git_config is cloned now)."""
        name = self._job_name(job_name)
        channels = inputs_module.parse(inputs)
        return JobDefinition(
            name=name, code=Code(self._source, self._locations["code_location"], self.uses_dlc),
            resources=Resources(self.instance_type, self.instance_count),
            stopping=Stopping(self.max_run, self.max_wait, self.use_spot_instances,
                              self.max_retry_attempts),
            hyperparameters=self._hyperparameters, distribution=self._distribution_hps,
            framework=self._framework_hyperparameters(),
            container_log_level=self.container_log_level, inputs=channels,
            image=self._image(), role=self.role, output=self._locations["output_path"],
            checkpoint=self._locations["checkpoint_s3_uri"], environment=self.environment,
            tags=tuple(self.tags), members=self._members)

    def training_job_request(self, inputs: inputs_module.Inputs = None,
                             job_name: str | None = None) -> dict[str, Any]:
        """The dry run: the CreateTrainingJob request `fit` would send, checked by botocore.

        Nothing is packed, uploaded, created or submitted; the code's URI is where `fit` would
        put it (a SageMaker Session's default bucket is named, not created).
        """
        return planner.plan(self.definition(inputs, job_name), self.session).request

    # ------------------------------------------------------------------ running

    def fit(self, inputs: inputs_module.Inputs = None, wait: bool = True, logs: bool | str = "All",
            job_name: str | None = None) -> None:
        """Pack and upload the code (and local inputs of a SageMaker job), submit the job and,
        with `wait`, follow it to the end (raising JobFailedError when it fails).

        `inputs`: a URI (channel "training"), a TrainingInput, or a dict channel -> either;
        file:// and plain paths are local data (read in place by local jobs, uploaded first
        for SageMaker jobs). `logs`: "All"/True prints every host's lines, "None"/False not.
        """
        if logs not in (True, False, "All", "None", "Rules"):
            raise UserInputError(f"logs must be 'All', 'None', True or False, got {logs!r}")
        self.latest_training_job = planner.submit(self.definition(inputs, job_name),
                                                  self.session)
        print(f"Started training job {self.latest_training_job.name}", flush=True)
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
        description = session.describe(training_job_name).raw
        params = arguments.from_description(description, backends.LOCAL.default_image)
        if model_channel_name != "model":
            params["model_channel_name"] = model_channel_name
        estimator = cls(session=session, **params)
        estimator.latest_training_job = TrainingJob(session, training_job_name)
        if wait:
            estimator.latest_training_job.wait(logs=logs)
        return estimator
