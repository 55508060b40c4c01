"""`Estimator` and `PyTorch`: the official SageMaker Python SDK v2 names, for DDP jobs.

    est = PyTorch(entry_point="train.py", source_dir="src", instance_count=2,
                  instance_type="local", distribution={"torch_distributed": {"enabled": True}})
    print(est.training_job_request())     # the dry run: what would be sent, nothing is sent
    est.fit({"train": "s3://bucket/train"})

Every argument is checked when the estimator is made and again when the request is built, so
bad input fails with one clear line before anything is packed, uploaded or submitted.
"""

from __future__ import annotations

import json
import logging
import os
import re
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ddpjob_runtime import storage
from ddpjob_runtime.hyperparameters import check_total, check_user_hyperparameters, decode, encode

from ddpjob import checkpoint_store, inputs, naming, packaging
from ddpjob.base_session import BaseSession
from ddpjob.distribution import MPI, distribution_hyperparameters
from ddpjob.errors import UserInputError
from ddpjob.local.validation import LOCAL_INSTANCE_TYPES
from ddpjob.request import build_request
from ddpjob.training_job import TrainingJob

logger = logging.getLogger(__name__)

DEFAULT_MAX_RUN = 24 * 60 * 60
DEFAULT_BASE_JOB_NAME = "pytorch-training"

# Keyword arguments of the official SDK's estimators that ddpjob does not implement.
UNSUPPORTED_ARGUMENTS = frozenset({
    "volume_size", "volume_kms_key", "output_kms_key", "subnets", "security_group_ids",
    "model_uri", "model_channel_name", "metric_definitions", "encrypt_inter_container_traffic",
    "enable_network_isolation", "rules", "debugger_hook_config", "tensorboard_output_config",
    "enable_sagemaker_metrics", "profiler_config", "disable_profiler", "git_config",
    "instance_groups", "training_repository_access_mode",
    "training_repository_credentials_provider_arn", "keep_alive_period_in_seconds",
    "container_entry_point", "container_arguments", "disable_output_compression",
    "enable_infra_check", "enable_remote_debug", "enable_session_tag_chaining",
    "training_plan", "compiler_config", "input_mode", "checkpoint_s3_uri_kms_key",
    "training_recipe", "recipe_overrides", "instance_placement_config", "algorithm_arn",
})
_RESERVED_HP = ("sagemaker_", "ddpjob_")


def _positive_int(value: Any, argument: str, *, low: int = 1, high: int | None = None) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < low or (
        high is not None and value > high
    ):
        allowed = f"between {low} and {high}" if high is not None else f">= {low}"
        raise UserInputError(f"{argument} must be an integer {allowed}, got {value!r}")
    return value


def _optional_str(value: Any, argument: str) -> str | None:
    if value is not None and (not isinstance(value, str) or not value):
        raise UserInputError(f"{argument} must be a non-empty string or None, got {value!r}")
    return value


def _check_environment(environment: Any) -> dict[str, str]:
    if environment is None:
        return {}
    if not isinstance(environment, Mapping):
        raise UserInputError(f"environment must be a dict of NAME -> string, got "
                             f"{type(environment).__name__}")
    if len(environment) > 100:
        raise UserInputError(f"environment: {len(environment)} variables given; SageMaker "
                             f"allows at most 100")
    for name, value in environment.items():
        if not isinstance(name, str) or not re.match(r"^[a-zA-Z_][a-zA-Z0-9_]{0,511}$", name):
            raise UserInputError(f"environment: {name!r} is not a variable name (letters, "
                                 f"digits and '_', not starting with a digit)")
        if not isinstance(value, str) or len(value) > 512:
            raise UserInputError(f"environment[{name!r}] must be a string of at most 512 "
                                 f"characters, got {value!r:.60}")
    return dict(environment)


def _check_tags(tags: Any) -> list[dict[str, str]]:
    if tags is None:
        return []
    if isinstance(tags, Mapping):
        tags = [{"Key": key, "Value": value} for key, value in tags.items()]
    if not isinstance(tags, (list, tuple)):
        raise UserInputError("tags must be a list of {'Key': ..., 'Value': ...} or a dict")
    if len(tags) > 50:
        raise UserInputError(f"tags: {len(tags)} given; SageMaker allows at most 50")
    for tag in tags:
        if not (isinstance(tag, Mapping) and set(tag) == {"Key", "Value"}
                and isinstance(tag["Key"], str) and 1 <= len(tag["Key"]) <= 128
                and isinstance(tag["Value"], str) and len(tag["Value"]) <= 256):
            raise UserInputError(f"tags: {tag!r} must be {{'Key': <1-128 chars>, 'Value': "
                                 f"<up to 256 chars>}}")
    return [dict(tag) for tag in tags]


def _default_session(instance_type: str) -> BaseSession:
    if instance_type in LOCAL_INSTANCE_TYPES:
        from ddpjob.local.session import LocalSession

        return LocalSession()
    from ddpjob.sagemaker.session import Session

    return Session()


class Estimator:
    """A DDP training job's definition: code, hosts, distribution, data and output locations.

    Arguments are those of the official SDK's `sagemaker.estimator.Framework` (see issue 3 and
    the README): `entry_point` (script; relative to `source_dir` when that is given),
    `source_dir`, `dependencies`, `hyperparameters`, `instance_count`, `instance_type`
    ("local", "local_gpu" or "ml.*"), `distribution`, `role`, `image_uri`, `output_path`,
    `code_location`, `base_job_name`, `environment`, `max_run`, `checkpoint_s3_uri`,
    `checkpoint_local_path`, `tags`, `session` (default: LocalSession for local instance types,
    else Session), `use_spot_instances`, `max_wait`, `max_retry_attempts`,
    `container_log_level`. `sagemaker_session` is accepted as another name for `session`.
    """

    _default_base_job_name: str | None = None

    def __init__(
        self,
        entry_point: str | os.PathLike,
        source_dir: str | os.PathLike | None = None,
        dependencies: list[str | os.PathLike] | None = None,
        hyperparameters: Mapping[str, Any] | None = None,
        instance_count: int = 1,
        instance_type: str = "local",
        distribution: Mapping[str, Any] | None = None,
        role: str | None = None,
        image_uri: str | None = None,
        output_path: str | None = None,
        code_location: str | None = None,
        base_job_name: str | None = None,
        environment: Mapping[str, str] | None = None,
        max_run: int = DEFAULT_MAX_RUN,
        checkpoint_s3_uri: str | None = None,
        checkpoint_local_path: str | None = None,
        tags: list[dict[str, str]] | Mapping[str, str] | None = None,
        session: BaseSession | None = None,
        use_spot_instances: bool = False,
        max_wait: int | None = None,
        max_retry_attempts: int | None = None,
        container_log_level: int = logging.INFO,
        **kwargs: Any,
    ):
        """Check every argument now (UserInputError naming it); nothing is packed or sent."""
        session = self._pop_session_alias(session, kwargs)
        self._reject_extra(kwargs)
        if not isinstance(instance_type, str) or not (
            instance_type in LOCAL_INSTANCE_TYPES or instance_type.startswith("ml.")
        ):
            raise UserInputError(f"instance_type {instance_type!r} is not allowed: use 'local' "
                                 f"(CPU), 'local_gpu' or a SageMaker type such as "
                                 f"'ml.g5.12xlarge'")
        if session is not None and not isinstance(session, BaseSession):
            raise UserInputError(f"session must be a ddpjob Session or LocalSession, got "
                                 f"{type(session).__name__}")
        self.instance_type = instance_type
        self.instance_count = _positive_int(instance_count, "instance_count")
        self._source = packaging.check_source(entry_point, source_dir, dependencies)
        self.entry_point, self.source_dir = entry_point, source_dir
        self.dependencies = list(dependencies or [])
        self._hyperparameters = check_user_hyperparameters(hyperparameters)
        self._user_hyperparameters = dict(hyperparameters or {})
        self.distribution = dict(distribution) if isinstance(distribution, Mapping) else \
            distribution
        self._distribution_hps = distribution_hyperparameters(distribution, instance_type)
        if self._distribution_hps.get(MPI) and self.instance_count > 1:
            # Multi-host mpirun needs sshd and orted on every host, which the image lacks.
            raise UserInputError(
                f"distribution 'mpi' runs on one host (instance_count=1), got instance_count="
                f"{self.instance_count}: use {{'torch_distributed': {{'enabled': True}}}} for "
                f"several hosts")
        self.role = _optional_str(role, "role")
        self.image_uri = _optional_str(image_uri, "image_uri")
        self.base_job_name = (naming.check_base_job_name(base_job_name)
                              if base_job_name is not None else None)
        self.environment = _check_environment(environment)
        self.max_run = _positive_int(max_run, "max_run")
        if not isinstance(use_spot_instances, bool):
            raise UserInputError(f"use_spot_instances must be True or False, got "
                                 f"{use_spot_instances!r}")
        self.use_spot_instances = use_spot_instances
        self.max_wait = None if max_wait is None else _positive_int(max_wait, "max_wait")
        if self.max_wait is not None and not use_spot_instances:
            raise UserInputError("max_wait is only allowed with use_spot_instances=True")
        if self.max_wait is not None and self.max_wait < self.max_run:
            raise UserInputError(f"max_wait ({self.max_wait}) must be >= max_run "
                                 f"({self.max_run})")
        self.max_retry_attempts = (None if max_retry_attempts is None else
                                   _positive_int(max_retry_attempts, "max_retry_attempts",
                                                 high=30))
        self.container_log_level = _positive_int(container_log_level, "container_log_level",
                                                 low=0)
        self.tags = _check_tags(tags)
        self.checkpoint_local_path = _optional_str(checkpoint_local_path,
                                                   "checkpoint_local_path")
        self.sagemaker_session = self.session = session or _default_session(instance_type)
        self.session.check_instance_type(instance_type)
        self.session.training_image(self.image_uri)  # a backend that needs one says so now
        self.output_path = self._check_location(output_path, "output_path")
        self.code_location = self._check_location(code_location, "code_location")
        self.checkpoint_s3_uri = self._check_location(checkpoint_s3_uri, "checkpoint_s3_uri")
        self.latest_training_job: TrainingJob | None = None
        self._current_job_name: str | None = None

    # ------------------------------------------------------------------ argument checks

    @staticmethod
    def _pop_session_alias(session: Any, kwargs: dict[str, Any]) -> Any:
        if "sagemaker_session" in kwargs:
            alias = kwargs.pop("sagemaker_session")
            if session is not None and alias is not None:
                raise UserInputError("give session or sagemaker_session, not both")
            session = session or alias
        return session

    @staticmethod
    def _reject_extra(kwargs: Mapping[str, Any]) -> None:
        for name in sorted(kwargs):
            if name in UNSUPPORTED_ARGUMENTS:
                raise UserInputError(f"{name} is an argument of the official SageMaker SDK "
                                     f"that is not supported by ddpjob; remove it")
        if kwargs:
            raise UserInputError(f"unexpected argument {sorted(kwargs)[0]!r}; see "
                                 f"help(ddpjob.PyTorch) for the arguments ddpjob accepts")

    def _check_location(self, uri: Any, argument: str) -> str | None:
        """None, or the folder URI (plain paths become file:// in local mode)."""
        if uri is None:
            return None
        location = storage.parse(uri, argument=argument)
        self.session.check_location(str(uri), argument)
        return location.uri if location.scheme == "file" else uri

    # ------------------------------------------------------------------ the request

    def _job_name(self, job_name: str | None) -> str:
        if job_name is not None:
            return naming.check_job_name(job_name)
        base = self.base_job_name or self._default_base_job_name or (
            naming.base_name_from_image(self.image_uri) if self.image_uri else None
        ) or DEFAULT_BASE_JOB_NAME
        return naming.name_from_base(base)

    def _output_path(self) -> str:
        return self.output_path or self.session.default_output_path()

    def _code_uri(self, job_name: str) -> str:
        if self._source.source_uri:
            return self._source.source_uri
        base = self.code_location or self._output_path()
        return storage.join(base, job_name, "source", packaging.ARCHIVE_NAME)

    def hyperparameters(self) -> dict[str, str]:
        """The user's hyperparameters, JSON-encoded as the official SDK sends them."""
        return dict(self._hyperparameters)

    def _plan(self, inputs_arg: Any, job_name: str | None) -> tuple[dict, list[inputs.Channel]]:
        """The validated request and its channels (which say what to upload); no I/O on data."""
        name = self._job_name(job_name)
        role = self.session.resolve_role(self.role)
        # Local data is read in place by hosts that read file:// URIs, else uploaded first.
        channel_list = inputs.channels(inputs_arg, local="file" in self.session.storage_schemes,
                                       data_prefix=lambda: self.session.input_prefix(name))
        script_mode = {
            "sagemaker_submit_directory": self._code_uri(name),
            "sagemaker_program": self._source.script_name,
            "sagemaker_container_log_level": self.container_log_level,
            "sagemaker_job_name": name,
        }
        if self.session.region_name:
            script_mode["sagemaker_region"] = self.session.region_name
        encoded = {**self._hyperparameters, **encode(script_mode),
                   **encode(self._distribution_hps)}
        check_total(encoded, len(self._hyperparameters))
        request = build_request(
            job_name=name,
            image_uri=self.session.training_image(self.image_uri),
            role=role,
            instance_type=self.instance_type,
            instance_count=self.instance_count,
            output_path=self._output_path(),
            hyperparameters=encoded,
            channels=[channel.config for channel in channel_list],
            max_run=self.max_run,
            max_wait=self.max_wait,
            use_spot_instances=self.use_spot_instances,
            max_retry_attempts=self.max_retry_attempts,
            environment=self.environment,
            tags=self.tags,
            checkpoint_s3_uri=self.checkpoint_s3_uri,
            checkpoint_local_path=self.checkpoint_local_path,
        )
        return self.session.submit_dryrun(request), channel_list  # checked by the session

    def training_job_request(self, inputs: Any = None, job_name: str | None = None) -> dict:
        """The dry run: the CreateTrainingJob request `fit` would send, checked by botocore.

        Nothing is packed, uploaded or submitted; the code's URI is where `fit` would put it.
        """
        request, _ = self._plan(inputs, job_name)
        return request

    # ------------------------------------------------------------------ running

    def _stage_code(self, request: Mapping[str, Any]) -> None:
        """Pack the source and store it at sagemaker_submit_directory, unless already there."""
        if self._source.source_uri:
            return
        uri = json.loads(request["HyperParameters"]["sagemaker_submit_directory"])
        with tempfile.TemporaryDirectory(prefix="ddpjob-pack-") as tmp:
            archive = Path(tmp, packaging.ARCHIVE_NAME)
            digest = packaging.pack(self._source, archive)
            if storage.content_sha256(uri) == digest:
                logger.info("source unchanged at %s, not uploaded again", uri)
                return
            storage.upload_file(archive, uri, sha256=digest, progress=True)
            logger.info("uploaded source to %s", uri)

    def fit(self, inputs: Any = None, wait: bool = True, logs: bool = True,
            job_name: str | None = None) -> None:
        """Pack and upload the code (and local inputs of a SageMaker job), submit the job and,
        with `wait`, follow it to the end (raising JobFailedError when it fails).

        `inputs`: a URI (channel "training"), or a dict channel -> URI; file:// and plain paths
        are local data (used in place in local mode, uploaded to S3 for SageMaker jobs).
        """
        request, channel_list = self._plan(inputs, job_name)
        for path in (self.output_path, self.code_location, self.checkpoint_s3_uri):
            if path is not None and storage.is_s3(path):
                storage.check_bucket(path)  # a missing bucket fails before anything is sent

        def stage() -> None:  # after the session reserved the job name, before it starts
            self._stage_code(request)
            for channel in channel_list:
                if channel.upload_from is not None:
                    uri = channel.config["DataSource"]["S3DataSource"]["S3Uri"]
                    if channel.upload_from.is_dir():
                        storage.upload_dir(channel.upload_from, uri, progress=True)
                    else:
                        storage.upload_file(channel.upload_from,
                                            storage.join(uri, channel.upload_from.name),
                                            progress=True)

        self.latest_training_job = self.session.submit(request, stage)
        self._current_job_name = request["TrainingJobName"]
        print(f"Started training job {self._current_job_name}", flush=True)
        if wait:
            self.latest_training_job.wait(logs=logs)

    def _job(self) -> TrainingJob:
        if self.latest_training_job is None:
            raise UserInputError("no training job yet: call fit() or attach() first")
        return self.latest_training_job

    def describe(self) -> dict[str, Any]:
        """DescribeTrainingJob of the latest job."""
        return self._job().describe()

    def logs(self) -> None:
        """Print every log line of the latest job so far, each prefixed with its host."""
        self._job().logs()

    def stop(self) -> None:
        """Stop the latest job."""
        self._job().stop()

    @property
    def model_data(self) -> str | None:
        """URI of the latest job's model.tar.gz.

        As in SageMaker's DescribeTrainingJob, this is where the model is (or will be) written;
        the file is there once the job has completed.
        """
        artifacts = self.describe().get("ModelArtifacts") or {}
        return artifacts.get("S3ModelArtifacts")

    def download_model(self, local_dir: str | os.PathLike) -> Path:
        """Download the latest job's model.tar.gz into `local_dir`; return the file's path."""
        uri = self.model_data
        if not uri:
            raise UserInputError(f"training job {self._job().name} has no model yet (status "
                                 f"{self.describe()['TrainingJobStatus']})")
        return storage.download_file(uri, Path(local_dir).expanduser() / Path(uri).name,
                                     progress=True)

    # ------------------------------------------------------------------ checkpoints

    def _checkpoint_uri(self) -> str:
        if not self.checkpoint_s3_uri:
            raise UserInputError("checkpoint_s3_uri is not set for this estimator; pass "
                                 "checkpoint_s3_uri='s3://bucket/prefix' (or file:// locally)")
        return self.checkpoint_s3_uri

    def checkpoints(self) -> list[checkpoint_store.Checkpoint]:
        """The complete checkpoints under checkpoint_s3_uri (step, time, uri), oldest first."""
        return checkpoint_store.list_checkpoints(self._checkpoint_uri())

    def download_checkpoint(self, local_dir: str | os.PathLike, step: int | None = None) -> Path:
        """Download a complete checkpoint (the latest when `step` is None) into `local_dir`;
        return its folder (`<local_dir>/step-000000100`)."""
        return checkpoint_store.download_checkpoint(self._checkpoint_uri(), local_dir, step)

    # ------------------------------------------------------------------ attach

    @classmethod
    def attach(cls, training_job_name: str, session: BaseSession | None = None,
               wait: bool = True, logs: bool = True) -> Estimator:
        """An estimator for an existing job (started here or elsewhere), rebuilt from its
        description. `session` defaults to a LocalSession; pass `Session()` for SageMaker
        jobs. With `wait`, follow the job until it ends."""
        naming.check_job_name(training_job_name, "training_job_name")
        if session is None:
            from ddpjob.local.session import LocalSession

            session = LocalSession()
        description = session.describe(training_job_name)
        estimator = cls.__new__(cls)
        estimator._init_from_description(description, session)
        if wait:
            estimator.latest_training_job.wait(logs=logs)
        return estimator

    def _init_from_description(self, description: Mapping[str, Any],
                               session: BaseSession) -> None:
        raw = description.get("HyperParameters") or {}
        decoded = decode(raw)
        resources = description.get("ResourceConfig", {})
        stopping = description.get("StoppingCondition", {})
        checkpoint = description.get("CheckpointConfig") or {}
        self.session = self.sagemaker_session = session
        self.instance_type = resources.get("InstanceType")
        self.instance_count = resources.get("InstanceCount", 1)
        self.entry_point = decoded.get("sagemaker_program")
        self.source_dir = decoded.get("sagemaker_submit_directory")
        self.dependencies = []
        self._source = packaging.SourceSpec(self.entry_point or "", self.entry_point or "",
                                            None, (), source_uri=self.source_dir)
        self._user_hyperparameters = {k: v for k, v in decoded.items()
                                      if not k.startswith(_RESERVED_HP)}
        self._hyperparameters = {k: v for k, v in raw.items() if not k.startswith(_RESERVED_HP)}
        self.distribution = _distribution_from(decoded)
        self._distribution_hps = {k: v for k, v in decoded.items()
                                  if k.startswith(_RESERVED_HP) and k not in (
                                      "sagemaker_program", "sagemaker_submit_directory",
                                      "sagemaker_container_log_level", "sagemaker_job_name",
                                      "sagemaker_region")}
        self.role = description.get("RoleArn")
        self.image_uri = description.get("AlgorithmSpecification", {}).get("TrainingImage")
        self.output_path = description.get("OutputDataConfig", {}).get("S3OutputPath")
        self.code_location = None
        self.base_job_name = None
        self.environment = dict(description.get("Environment") or {})
        self.max_run = stopping.get("MaxRuntimeInSeconds", DEFAULT_MAX_RUN)
        self.max_wait = stopping.get("MaxWaitTimeInSeconds")
        self.use_spot_instances = bool(description.get("EnableManagedSpotTraining"))
        self.max_retry_attempts = (description.get("RetryStrategy") or {}).get(
            "MaximumRetryAttempts")
        self.container_log_level = decoded.get("sagemaker_container_log_level", logging.INFO)
        self.tags = []
        self.checkpoint_s3_uri = checkpoint.get("S3Uri")
        self.checkpoint_local_path = checkpoint.get("LocalPath")
        self._current_job_name = description["TrainingJobName"]
        self.latest_training_job = TrainingJob(session, self._current_job_name)


def _distribution_from(decoded: Mapping[str, Any]) -> dict[str, Any] | None:
    """The `distribution` dict that gives these hyperparameters (for attach)."""
    result: dict[str, Any] = {}
    if decoded.get("sagemaker_torch_distributed_enabled") is True:
        result["torch_distributed"] = {"enabled": True}
    if decoded.get("sagemaker_pytorch_ddp_enabled") is True:
        result["pytorchddp"] = {"enabled": True}
    if decoded.get("sagemaker_distributed_dataparallel_enabled") is True:
        result["smdistributed"] = {"dataparallel": {"enabled": True}}
    if decoded.get("sagemaker_mpi_enabled") is True:
        mpi: dict[str, Any] = {"enabled": True}
        if decoded.get("sagemaker_mpi_num_of_processes_per_host"):
            mpi["processes_per_host"] = decoded["sagemaker_mpi_num_of_processes_per_host"]
        result["mpi"] = mpi
    if decoded.get("ddpjob_processes_per_host"):
        result["processes_per_host"] = decoded["ddpjob_processes_per_host"]
    return result or None


class PyTorch(Estimator):
    """An Estimator for PyTorch scripts; `framework_version` and `py_version` are recorded.

    The job runs the ddpjob runtime: locally the one installed here, on SageMaker the image
    named by `image_uri` (container/), whatever the framework version says.
    """

    _default_base_job_name = DEFAULT_BASE_JOB_NAME

    def __init__(self, entry_point: str | os.PathLike, framework_version: str | None = None,
                 py_version: str | None = None, **kwargs: Any):
        """See `Estimator`; `framework_version`/`py_version` are strings such as "2.3", "py311"."""
        self.framework_version = _optional_str(framework_version, "framework_version")
        self.py_version = _optional_str(py_version, "py_version")
        super().__init__(entry_point, **kwargs)

    def _init_from_description(self, description: Mapping[str, Any],
                               session: BaseSession) -> None:
        super()._init_from_description(description, session)
        self.framework_version = self.py_version = None
