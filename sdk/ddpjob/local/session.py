"""`LocalSession`: the control plane on this machine, no Docker and no cloud account.

Each of a job's `InstanceCount` hosts is simulated by its own `ddpjob-train` process tree with
its own `/opt/ml`-shaped folder under `<home>/jobs/<job>/hosts/algo-N`, rendezvous on loopback.
`instance_type="local"` runs on CPU (gloo, no GPU visible); `"local_gpu"` deals this machine's
GPUs out to the hosts in equal slices through CUDA_VISIBLE_DEVICES (NCCL).
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from ddpjob.aws_errors import aws_errors
from ddpjob.base_session import BaseSession
from ddpjob.extras import require_torch
from ddpjob.job_status import TrainingJobStatus
from ddpjob.local import hostroot, logtail
from ddpjob.local.client import LocalSageMakerClient
from ddpjob.local.validation import LOCAL_INSTANCE_TYPES

HOME_ENV = "DDPJOB_HOME"
LOCAL_ROLE = "arn:aws:iam::000000000000:role/ddpjob-local"


def default_home() -> Path:
    """`$DDPJOB_HOME`, else `~/.ddpjob`."""
    return Path(os.environ.get(HOME_ENV) or Path.home() / ".ddpjob").expanduser()


class LocalSession(BaseSession):
    """Training jobs as processes on this machine; job state under `home` (default ~/.ddpjob).

    Jobs keep running when the creating process exits; any process with the same `home` can
    describe, follow or stop them.
    """

    local = True

    def __init__(self, home: str | Path | None = None):
        self.home = Path(home).expanduser().absolute() if home else default_home().absolute()
        self._client = LocalSageMakerClient(self.home)

    @property
    def sagemaker_client(self) -> LocalSageMakerClient:
        """The boto3-shaped client: create/describe/stop/list training jobs."""
        return self._client

    def default_output_path(self) -> str:
        """`file://<home>/output`: where jobs put model.tar.gz and output.tar.gz by default."""
        return (self.home / "output").as_uri()

    uri_schemes = ("s3", "file")
    stages_local_inputs = False

    def accepts_instance_type(self, instance_type: str) -> bool:
        """"local" (CPU) and "local_gpu"."""
        return instance_type in LOCAL_INSTANCE_TYPES

    def check_request(self, request: Mapping[str, Any], *, submit: bool = False) -> None:
        """Refuse what local hosts cannot do (Pipe input, manifests, instance groups, ...) and
        log the members that have no effect on this machine; a job to start needs torch."""
        from ddpjob.arguments import check_local_request

        check_local_request(request)
        if submit:
            require_torch()

    def default_role(self) -> str:
        """A placeholder role ARN: local jobs assume no role, but the request needs one."""
        return LOCAL_ROLE

    def job_dir(self, job_name: str) -> Path:
        """The job's folder: request.json, state.json, hosts/algo-N/ roots, logs/algo-N.log."""
        return self._client.job_dir(job_name)

    def log_paths(self, job_name: str) -> dict[str, Path]:
        """`{host: log file}` of every host of the job."""
        request = self._client.store.request(job_name)
        logs = self.job_dir(job_name) / "logs"
        return {host: logs / f"{host}.log" for host in hostroot.host_names(request)}

    def iter_logs(self, job_name: str, follow: bool = True) -> Iterator[tuple[str, str]]:
        """`(host, line)` from every host's log file; with `follow`, until the job has ended."""
        self.describe_training_job(job_name)  # a clear error now for an unknown job

        def done() -> bool:
            status = self.describe_training_job(job_name)["TrainingJobStatus"]
            return TrainingJobStatus(status).is_terminal

        return logtail.follow(self.log_paths(job_name), done, follow=follow)

    def describe_training_job(self, job_name: str) -> dict[str, Any]:
        """The DescribeTrainingJob response (JobNotFoundError when there is no such job)."""
        with aws_errors("DescribeTrainingJob", job_name=job_name, local_home=str(self.home)):
            return self._client.describe_training_job(TrainingJobName=job_name)

    def stop_training_job(self, job_name: str) -> None:
        """Stop the job: every process of it ends and it is marked Stopped."""
        with aws_errors("StopTrainingJob", job_name=job_name, local_home=str(self.home)):
            self._client.stop_training_job(TrainingJobName=job_name)

    def create_training_job(self, request: Mapping[str, Any]) -> dict[str, Any]:
        """Send a CreateTrainingJob request; the job starts in the background."""
        with aws_errors("CreateTrainingJob", request=request, local_home=str(self.home)):
            return self._client.create_training_job(**request)

    def list_training_jobs(self, **kwargs: Any) -> list[dict[str, Any]]:
        """Every TrainingJobSummary matching ListTrainingJobs' `kwargs` (all pages)."""
        jobs: list[dict[str, Any]] = []
        with aws_errors("ListTrainingJobs", local_home=str(self.home)):
            while True:
                page = self._client.list_training_jobs(**kwargs)
                jobs += page["TrainingJobSummaries"]
                if "NextToken" not in page:
                    return jobs
                kwargs = {**kwargs, "NextToken": page["NextToken"]}
