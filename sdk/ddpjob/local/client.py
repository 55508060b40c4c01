"""`LocalSageMakerClient`: boto3's SageMaker client for training jobs, run on this machine.

Same methods, arguments, response shapes and errors as `boto3.client("sagemaker")` for
create/describe/stop/list training jobs, so requests built by any SageMaker client work.
Jobs live on disk (`jobstore`) and each runs under its own detached `supervisor` process.
"""

from __future__ import annotations

import contextlib
import copy
import logging
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from ddpjob.local import gpus, jobstate, metrics, proctree, responses, validation
from ddpjob.local.jobstore import JobExists, JobStore
from ddpjob.local.supervisor import MODULE as SUPERVISOR_MODULE

logger = logging.getLogger(__name__)

NOT_FOUND = "Requested resource not found."
# A job whose supervisor never recorded its pid this long after creation has lost it.
SUPERVISOR_START_S = 60.0
_OK = {"ResponseMetadata": {"HTTPStatusCode": 200, "RetryAttempts": 0}}
_SORT_KEYS = {
    "Name": "TrainingJobName", "CreationTime": "CreationTime", "Status": "TrainingJobStatus"
}


class LocalSageMakerClient:
    """A boto3-shaped SageMaker client whose training jobs run as local processes under `home`."""

    def __init__(self, home: str | Path):
        self.store = JobStore(Path(home))
        self._supervisors: list[subprocess.Popen] = []
        self._exceptions: Any = None

    @property
    def exceptions(self) -> Any:
        """The error classes boto3's SageMaker client has (`ResourceInUse`, …)."""
        if self._exceptions is None:
            from botocore.errorfactory import ClientExceptionsFactory

            self._exceptions = ClientExceptionsFactory().create_client_exceptions(
                validation.service_model()
            )
        return self._exceptions

    # --- the API ---------------------------------------------------------------------------

    def create_training_job(self, **kwargs: Any) -> dict[str, Any]:
        """Create a training job and start it in the background (CreateTrainingJob)."""
        validation.check_shape("CreateTrainingJob", kwargs)
        request = copy.deepcopy(kwargs)
        if request["OutputDataConfig"]["S3OutputPath"] == "":
            # The official SDK's local mode with local_code and no output_path: keep them here.
            output = (self.store.home / "output").absolute().as_uri()
            request["OutputDataConfig"]["S3OutputPath"] = output
        kind = (request.get("ResourceConfig") or {}).get("InstanceType")
        visible = len(gpus.visible_gpus()) if kind == "local_gpu" else None
        validation.check_create(request, visible)
        name = request["TrainingJobName"]
        try:
            job_dir = self.store.create(name, request, jobstate.new_state(name))
        except JobExists:
            raise self.exceptions.ResourceInUse(
                {"Error": {"Code": "ResourceInUse", "Message": (
                    f"Training job names must be unique within an AWS account and region, and "
                    f"a training job with this name already exists ({responses.job_arn(name)})"
                )}, "ResponseMetadata": {"HTTPStatusCode": 400}},
                "CreateTrainingJob",
            ) from None
        self._start_supervisor(name, job_dir)
        return {"TrainingJobArn": responses.job_arn(name), **copy.deepcopy(_OK)}

    def describe_training_job(self, **kwargs: Any) -> dict[str, Any]:
        """The job's status, secondary status, times and outputs (DescribeTrainingJob)."""
        validation.check_shape("DescribeTrainingJob", kwargs)
        name = self._known(kwargs["TrainingJobName"], "DescribeTrainingJob")
        state = self._reconcile(name)
        response = responses.describe(self.store.request(name), state)
        if final := metrics.final_metric_data(self.store.job_dir(name)):
            response["FinalMetricDataList"] = final
        return {**response, **copy.deepcopy(_OK)}

    def stop_training_job(self, **kwargs: Any) -> dict[str, Any]:
        """Ask the job to stop: it moves to Stopping, then Stopped (StopTrainingJob)."""
        validation.check_shape("StopTrainingJob", kwargs)
        name = self._known(kwargs["TrainingJobName"], "StopTrainingJob")
        self._reconcile(name)
        ended: list[str] = []

        def change(state: dict[str, Any]) -> bool:
            current = jobstate.status(state)
            if current.is_terminal:
                ended.append(current.primary.value)
                return False
            if current is jobstate.SecondaryStatus.STOPPING:
                return False
            jobstate.move(state, jobstate.SecondaryStatus.STOPPING)
            return True

        state = self.store.update(name, change)
        if ended:
            raise validation.client_error(
                "StopTrainingJob",
                f"The request was rejected because the training job is in status {ended[0]}.",
            )
        pid = state.get("supervisor_pid")
        if pid and self._is_supervisor(pid, name):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGTERM)  # it also polls the state; the signal saves time
        return copy.deepcopy(_OK)

    def list_training_jobs(self, **kwargs: Any) -> dict[str, Any]:
        """Summaries of the jobs under this home, filtered, sorted and paged (ListTrainingJobs)."""
        validation.check_shape("ListTrainingJobs", kwargs)
        summaries = []
        for name in self.store.names():
            with contextlib.suppress(OSError, ValueError, KeyError):
                summaries.append(responses.summary(self.store.request(name), self._reconcile(name)))
        summaries = [s for s in summaries if _matches(s, kwargs)]
        key = _SORT_KEYS[kwargs.get("SortBy", "CreationTime")]
        summaries.sort(key=lambda s: s[key], reverse=kwargs.get("SortOrder") == "Descending")
        start = int(kwargs.get("NextToken") or 0)
        size = kwargs.get("MaxResults", 10)
        page = {"TrainingJobSummaries": summaries[start : start + size], **copy.deepcopy(_OK)}
        if start + size < len(summaries):
            page["NextToken"] = str(start + size)
        return page

    # --- helpers ---------------------------------------------------------------------------

    def job_dir(self, name: str) -> Path:
        """The folder of a job (request, state, hosts' roots, logs)."""
        return self.store.job_dir(name)

    def _known(self, name: str, operation: str) -> str:
        if not self.store.exists(name):
            raise validation.client_error(operation, NOT_FOUND)
        return name

    def _start_supervisor(self, name: str, job_dir: Path) -> None:
        self._supervisors = [p for p in self._supervisors if p.poll() is None]  # reap the ended
        with open(job_dir / "supervisor.log", "ab") as out:
            proc = subprocess.Popen(
                [sys.executable, "-m", SUPERVISOR_MODULE, str(job_dir.absolute())],
                stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                start_new_session=True,  # the job outlives this process and its terminal
            )  # fmt: skip
        self._supervisors.append(proc)

        def record(state: dict[str, Any]) -> bool:
            state["supervisor_pid"] = proc.pid
            return True

        self.store.update(name, record)
        logger.info("Started local training job %s (supervisor pid %d)", name, proc.pid)

    @staticmethod
    def _is_supervisor(pid: int, name: str) -> bool:
        """Whether `pid` is the live supervisor of job `name` (pids get reused)."""
        if not proctree.is_alive(pid):
            return False
        args = proctree.cmdline(pid)
        if not args:  # unreadable for a moment while the new process execs: it is ours
            return True
        return SUPERVISOR_MODULE in args and any(a.endswith(f"/{name}") for a in args)

    def _reconcile(self, name: str) -> dict[str, Any]:
        """The job's state; a running job whose supervisor is gone is ended with a reason."""
        state = self.store.state(name)
        if jobstate.status(state).is_terminal or self._supervisor_running(state, name):
            return state

        def change(state: dict[str, Any]) -> bool:
            if jobstate.status(state).is_terminal or self._supervisor_running(state, name):
                return False  # it ended or started meanwhile
            _end_hosts(state)
            if jobstate.status(state) is jobstate.SecondaryStatus.STOPPING:
                jobstate.move(state, jobstate.SecondaryStatus.STOPPED)
                return True
            log = self.store.job_dir(name) / "supervisor.log"
            state["failure_reason"] = (
                f"InternalServerError: the local supervisor of this job (pid "
                f"{state.get('supervisor_pid')}) ended without finishing the job; see {log}"
            )
            jobstate.move(state, jobstate.SecondaryStatus.FAILED, state["failure_reason"])
            return True

        return self.store.update(name, change)

    def _supervisor_running(self, state: dict[str, Any], name: str) -> bool:
        pid = state.get("supervisor_pid")
        if pid is None:  # being started by the creating process
            return time.time() - state["creation_time"] < SUPERVISOR_START_S
        return self._is_supervisor(pid, name)


def _end_hosts(state: dict[str, Any]) -> None:
    """SIGTERM the hosts of a job whose supervisor is gone (their runtime ends its workers)."""
    for host in state.get("hosts", {}).values():
        pid = host.get("pid")
        is_host = pid and any("ddpjob-train" in a for a in proctree.cmdline(pid))
        if is_host and proctree.is_alive(pid):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGTERM)


def _matches(summary: dict[str, Any], filters: dict[str, Any]) -> bool:
    """Whether a TrainingJobSummary passes ListTrainingJobs' filters."""
    if filters.get("NameContains", "").lower() not in summary["TrainingJobName"].lower():
        return False
    if "StatusEquals" in filters and summary["TrainingJobStatus"] != filters["StatusEquals"]:
        return False
    for field, key in (("CreationTime", "CreationTime"), ("LastModifiedTime", "LastModifiedTime")):
        value = summary.get(key)
        after, before = filters.get(f"{field}After"), filters.get(f"{field}Before")
        if after is not None and not (value and value > _aware(after)):
            return False
        if before is not None and not (value and value < _aware(before)):
            return False
    return True


def _aware(value: Any) -> Any:
    """A datetime to compare with ours (naive ones are taken as local time, like botocore)."""
    import datetime as dt

    if isinstance(value, dt.datetime):
        return value if value.tzinfo else value.astimezone()
    if isinstance(value, (int, float)):
        return dt.datetime.fromtimestamp(value).astimezone()
    return dt.datetime.fromisoformat(str(value)).astimezone()
