"""`LocalSession`: the control plane on this machine, no Docker and no cloud account.

Each of a job's `InstanceCount` hosts is simulated by its own `ddpjob-train` process tree with
its own `/opt/ml`-shaped folder under `<home>/jobs/<job>/hosts/algo-N`, rendezvous on loopback.
`instance_type="local"` runs on CPU (gloo, no GPU visible); `"local_gpu"` deals this machine's
GPUs out to the hosts in equal slices through CUDA_VISIBLE_DEVICES (NCCL). The home and
everything in it are private to the user (folders 0700, files 0600).
"""

from __future__ import annotations

import contextlib
import functools
import os
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ddpjob_runtime.shared.storage.uris import LOCAL_BUCKET, local_bucket_path

from ddpjob import backends
from ddpjob.base_session import BaseSession, Stage
from ddpjob.errors import DdpjobError, UserInputError
from ddpjob.extras import require_torch
from ddpjob.job_status import JobDescription, MetricRow
from ddpjob.local.aws.boto3_client import LocalSageMakerClient
from ddpjob.local.base import interruptions as planned
from ddpjob.local.base.jobstore import check_dir
from ddpjob.local.control import refusals
from ddpjob.local.control.control_plane import LocalControlPlane
from ddpjob.local.hostkinds import hostkind
from ddpjob.local.warmpools import pools
from ddpjob.local.watch import logtail
from ddpjob.naming import check_job_name
from ddpjob.tuning import trials

if TYPE_CHECKING:  # pragma: no cover
    from ddpjob.config import Config
    from ddpjob.local.base.interruptions import Interruption

HOME_ENV = "DDPJOB_HOME"
#: TrainingImage of local jobs when no image_uri is given: local hosts run the ddpjob runtime
#: installed here, whatever the image says.
LOCAL_IMAGE = backends.LOCAL.default_image
#: RoleArn of local jobs when no role is given: they assume none, but the request needs one.
LOCAL_ROLE = backends.LOCAL.default_role


def default_home() -> Path:
    """`$DDPJOB_HOME`, else `~/.ddpjob`."""
    return Path(os.environ.get(HOME_ENV) or Path.home() / ".ddpjob").expanduser()


@contextlib.contextmanager
def _private_files() -> Iterator[None]:
    """New files and folders of this process are the user's only (uploads into the home)."""
    previous = os.umask(0o077)
    try:
        yield
    finally:
        os.umask(previous)


class LocalSession(BaseSession):
    """Training jobs as processes on this machine; job state under `home` (default ~/.ddpjob).

    Jobs keep running when the creating process exits; any process with the same `home` can
    describe, follow, stop or `interrupt` them. `interruptions` (`ddpjob.Interruption`) are
    fired in every job this session starts: the i-th during its attempt i (docs/spot.md).
    """

    backend = backends.LOCAL

    def __init__(self, home: str | Path | None = None,
                 interruptions: Sequence[Interruption] | None = None):
        self.interruptions = planned.checked(interruptions)
        self.home = Path(home).expanduser().absolute() if home else default_home().absolute()
        check_dir(self.home)  # refused before anything is written into it
        self._client = LocalControlPlane(self.home, planned=self.interruptions)

    @classmethod
    def from_config(cls, config: Config) -> LocalSession:
        """The session of a config file (its `home`)."""
        return cls(home=config.home)

    @property
    def where(self) -> str:
        """Where this session's jobs are, for messages."""
        return f"local home {self.home}"

    def warm_pools(self) -> list[dict[str, Any]]:
        """This home's warm pools (`keep_alive_period_in_seconds`), oldest first: name, status
        (InUse, Available, Terminated), the jobs that ran on it, seconds until it expires."""
        return [pools.summary(pool) for pool in pools.pools(self.home)]

    def stop_warm_pool(self, name: str) -> None:
        """End warm pool `name` (`ddpjob pools stop`): at once when Available, when its job
        ends when in use."""
        try:
            pools.stop(self.home, name)
        except KeyError:
            raise UserInputError(f"no warm pool named {name!r} in {self.where}") from None

    @functools.cached_property
    def sagemaker_client(self) -> LocalSageMakerClient:
        """The boto3-shaped client (create/describe/stop/list training jobs), e.g. for the
        official SageMaker SDK."""
        return LocalSageMakerClient(self.home, planned=self.interruptions)

    def official_session(self) -> Any:
        """The installed official SageMaker SDK's own session (v3's
        `sagemaker.core.helper.session_helper.Session`, v2's `sagemaker.Session`) whose AWS
        requests for training jobs this machine answers: give it to a v3 `ModelTrainer` or a
        v2 estimator as `sagemaker_session`, and its jobs run here (see `official_session`)."""
        from ddpjob.local.aws.official_session import official_session

        return official_session(self)

    # --- policy ------------------------------------------------------------------------------

    def default_output_path(self) -> str:
        """`file://<home>/output`: where jobs put model.tar.gz and output.tar.gz by default."""
        return (self.home / "output").as_uri()

    # --- jobs --------------------------------------------------------------------------------

    def submit_dryrun(self, request: Mapping[str, Any]) -> dict[str, Any]:
        """The request as the local client checks and completes it; nothing is written.

        What local hosts cannot do (Pipe input, manifests, model parallelism, ...) and a
        schedule of `interruptions` that cannot fire are one UserInputError; members with no
        effect on this machine are logged."""
        refusals.check_request(request)
        return self._client.checked_request(dict(request), machine=False)

    def submit_checked(self, checked: dict[str, Any], stage: Stage | None = None):
        """See `BaseSession.submit_checked`; what `stage` writes is private to the user."""
        def private_stage() -> None:
            with _private_files():
                stage()

        return super().submit_checked(checked, private_stage if stage is not None else None)

    # --- hyperparameter tuning jobs (docs/tuning.md) ----------------------------------------

    def submit_tuning_job(self, request: Mapping[str, Any], stage: Stage | None = None,
                          lost: Sequence[str] = ()) -> None:
        """See `BaseSession.submit_tuning_job`: its controller runs the trials here."""
        tuning = self.sagemaker_client.tuning
        tuning.create_checked(tuning.checked_request(dict(request)), stage, lost)

    def describe_tuning_job(self, name: str) -> dict[str, Any]:
        """See `BaseSession.describe_tuning_job`."""
        return self.sagemaker_client.tuning.describe_hyper_parameter_tuning_job(
            HyperParameterTuningJobName=name)

    def tuning_diagnostics(self, name: str) -> list[str]:
        """See `BaseSession.tuning_diagnostics`."""
        return self.sagemaker_client.tuning.diagnostics(name)

    def stop_tuning_job(self, name: str) -> None:
        """See `BaseSession.stop_tuning_job`."""
        self.sagemaker_client.tuning.stop_hyper_parameter_tuning_job(
            HyperParameterTuningJobName=name)

    def tuning_job_trials(self, name: str) -> list[dict[str, Any]]:
        """See `BaseSession.tuning_job_trials`."""
        return trials.summaries(
            self.sagemaker_client.tuning.list_training_jobs_for_hyper_parameter_tuning_job, name)

    def interrupt(self, job_name: str, host: str | None = None, notice: bool = True) -> None:
        """Interrupt the running job `job_name`, as the cloud would.

        With `notice` (a spot job's capacity reclaimed): every host, or only `host`, gets
        SIGTERM, SageMaker's 120 s grace, then SIGKILL; the job is Interrupted, then restarts on
        fresh hosts from its checkpoints while MaxWaitTimeInSeconds allows. Without notice (any
        job): `host` (default: the last) is lost, SIGKILLed; the job fails, or is retried within
        `max_retry_attempts`. Refused (UserInputError) for an ended or unknown job, an unknown
        host, or notice on a job without spot.
        """
        self._client.interrupt(check_job_name(job_name), host, notice)

    def _reserve(self, request: dict[str, Any]) -> None:
        if hostkind.of(request).needs_local_torch:
            require_torch()
        self._client.check_machine(request)  # what the dry run left out (GPUs)
        self._client.reserve(request["TrainingJobName"])

    def _release(self, job_name: str) -> None:
        self._client.store.release(job_name)

    def _schedule(self, request: dict[str, Any]) -> None:
        self._client.create_reserved(request)

    def _metric_series(self, job: JobDescription,
                       metric_names: list[str]) -> list[MetricRow]:
        from ddpjob.local.watch import metrics

        start = (job.training_start_time or job.creation_time).timestamp()
        found = metrics.series(self.job_dir(job.name))
        return [{"timestamp": r["Timestamp"] - start, "metric_name": r["MetricName"],
                 "value": r["Value"]} for r in found if r["MetricName"] in metric_names]

    def _describe(self, job_name: str) -> dict[str, Any]:
        return self._client.describe_training_job(TrainingJobName=job_name)

    def _stop(self, job_name: str) -> None:
        self._client.stop_training_job(TrainingJobName=job_name)

    def _logs(self, job_name: str, follow: bool) -> Iterator[tuple[str, str]]:
        return logtail.follow(self.log_paths(job_name), lambda: self.describe(job_name).is_terminal,
                              follow=follow)

    def list(self, max_results: int | None = None, **filters: Any) -> list[dict[str, Any]]:
        """See `BaseSession.list`."""
        jobs: list[dict[str, Any]] = []
        while max_results is None or len(jobs) < max_results:
            page = self._client.list_training_jobs(**filters)
            jobs += page["TrainingJobSummaries"]
            if "NextToken" not in page:
                break
            filters = {**filters, "NextToken": page["NextToken"]}
        return jobs[:max_results]

    def stacks(self, job_name: str) -> str:
        """Every rank's Python stacks of the running job `job_name`, within seconds: each
        headed `[algo-2 rank 3]` and where the rank is (`waiting in all_reduce (...)`, or
        `elsewhere: train.py:17 in slow_step`), a line first naming the ranks that are elsewhere
        while the others wait in a collective. JobNotFoundError for an unknown job; DdpjobError
        for one that has ended (its log holds the stacks of the ranks still running when it was
        stopped)."""
        from ddpjob.local.watch import stacks

        job = self.describe(job_name)
        if job.is_terminal:
            raise DdpjobError(f"stacks: training job {job_name} has already ended ({job.status}); "
                              f"its log holds the stacks of ranks that ran until its end")
        hosts = list(self._client.store.job(job_name).hosts)
        return stacks.report(stacks.collect(self.job_dir(job_name), hosts), hosts)

    # --- files of a job ----------------------------------------------------------------------

    def job_dir(self, job_name: str) -> Path:
        """The job's folder: request.json, state.json, hosts/algo-N/ roots, logs/algo-N.log."""
        return self._client.store.job_dir(check_job_name(job_name))

    def log_paths(self, job_name: str) -> dict[str, Path]:
        """`{host: log file}` of every host of the job."""
        logs = self.job_dir(job_name) / "logs"
        return {host: logs / f"{host}.log" for host in self._client.store.job(job_name).hosts}

    def cache_report(self, clear: bool = False) -> list[str]:
        """The lines `ddpjob cache info` (`clear`: `cache clear`) prints of the jobs' cache of
        `s3://` channel objects."""
        from ddpjob.local.run.datacache import human_bytes
        from ddpjob.local.run.staging import cache_of

        cache = cache_of(self.home)
        freed = [f"{cache.root}: freed {human_bytes(cache.evict(0))}"] if clear else []
        info = cache.info()
        return [*freed, f"{info.root}: {info.entries:,} objects, {human_bytes(info.size)} (limit "
                f"{human_bytes(info.max_size)}); in use by running jobs: {info.in_use:,} "
                f"objects, {human_bytes(info.in_use_size)}"]

    # --- what notebooks call around the estimator --------------------------------------------

    def default_bucket(self) -> str:
        """`"sagemaker-local"`: a bucket that is the folder `<home>/buckets/sagemaker-local`.

        `upload_data` into it answers `file://` URIs, which local jobs read in place; an
        `s3://sagemaker-local/...` URI names the same folder on this backend (jobs, the
        official SDK's session); other bucket names are real S3 buckets.
        """
        with _private_files():
            self._client.bucket_root.mkdir(parents=True, exist_ok=True)
        return LOCAL_BUCKET

    def _bucket_root(self, bucket: str) -> str:
        if bucket != LOCAL_BUCKET:
            return super()._bucket_root(bucket)
        return self._client.bucket_root.as_uri() + "/"

    @property
    def boto_region_name(self) -> str | None:
        """The region configured for boto3 here (AWS_DEFAULT_REGION, ~/.aws/config), else None:
        local jobs need none."""
        import botocore.session

        return botocore.session.get_session().get_config_variable("region")

    def upload_data(self, path: str, bucket: str | None = None, key_prefix: str = "data",
                    callback: object = None, extra_args: dict[str, Any] | None = None) -> str:
        """See `BaseSession.upload_data`; what lands in the local bucket is private to the user."""
        with _private_files():
            return super().upload_data(path, bucket, key_prefix, callback, extra_args)

    def check_location(self, uri: str, argument: str) -> str:
        """See `BaseSession.check_location`; `s3://sagemaker-local/...` is the local bucket's
        folder, named by its `file://` URI."""
        super().check_location(uri, argument)
        if uri != f"s3://{LOCAL_BUCKET}" and not uri.startswith(f"s3://{LOCAL_BUCKET}/"):
            return uri
        key = uri[len(f"s3://{LOCAL_BUCKET}/"):]
        if not key:
            return self._bucket_root(LOCAL_BUCKET)
        return local_bucket_path(self._client.bucket_root, key, argument).as_uri()
