"""`LocalControlPlane`: SageMaker's training-job API, answered on this machine.

Same methods, arguments and response shapes as `boto3.client("sagemaker")` for
create/describe/stop/update/list training jobs, so requests built by any SageMaker client work.
Jobs live on disk (`jobstore`) and each runs under its own detached `supervisor` process.
Refusals are ddpjob's `ControlPlaneError`s (what `LocalSession` raises);
`boto3_client.LocalSageMakerClient` raises them as boto3 raises SageMaker's.
"""

from __future__ import annotations

import contextlib
import copy
import datetime as dt
import logging
import os
import signal
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ddpjob_runtime.shared.storage.uris import LOCAL_BUCKET_ENV

from ddpjob.errors import ControlPlaneError, JobNotFoundError, UserInputError
from ddpjob.local.base import admitted, arns, interruptions, proctree
from ddpjob.local.base.homelayout import bucket_folder
from ddpjob.local.base.jobstate import JobState
from ddpjob.local.base.jobstore import JobExists, JobStore
from ddpjob.local.control import instance_choice, responses, validation
from ddpjob.local.control.admission import admit
from ddpjob.local.hostkinds import container_host, hostkind
from ddpjob.local.isolation import fixed_port, gpus
from ddpjob.local.warmpools import pools
from ddpjob.local.watch import metrics

# What runs each job, as `python -m`: named, not imported, so the client stays light.
SUPERVISOR_MODULE = "ddpjob.local.run.supervisor"

logger = logging.getLogger(__name__)

NOT_FOUND = "Requested resource not found."
# A job whose supervisor never recorded its pid this long after creation has lost it.
SUPERVISOR_START_S = 60.0
_OK = {"ResponseMetadata": {"HTTPStatusCode": 200, "RetryAttempts": 0}}
_SORT_KEYS = {
    "Name": "TrainingJobName", "CreationTime": "CreationTime", "Status": "TrainingJobStatus"
}


class LocalControlPlane:
    """SageMaker's training-job API whose jobs run as local processes under `home`; `planned`
    interruptions fire in every job it creates."""

    def __init__(self, home: str | Path, planned: Sequence[interruptions.Interruption] = ()):
        self.planned = tuple(planned)  # fired in every job this client creates
        self.store = JobStore(Path(home))
        self._supervisors: list[subprocess.Popen] = []

    # --- the API ---------------------------------------------------------------------------

    def create_training_job(self, **kwargs: Any) -> dict[str, Any]:
        """Create a training job and start it in the background (CreateTrainingJob)."""
        request = self.checked_request(kwargs)
        self.reserve(request["TrainingJobName"])
        return self.create_reserved(request)

    def checked_request(self, kwargs: dict[str, Any], machine: bool = True) -> dict[str, Any]:
        """The request as this client would create it, or the error it would answer (pure).
        `machine=False` (a dry run) leaves out what this machine must have (GPUs, a usable
        lock folder for the fixed port). The instance type chosen from InstancePreferences is
        not written into it (admission chooses again, `create_reserved`), so checking the
        answer again gives the same answer."""
        validation.check_shape("CreateTrainingJob", kwargs)
        request = copy.deepcopy(kwargs)
        if request["OutputDataConfig"]["S3OutputPath"] == "":
            # The official SDK's local mode with local_code and no output_path: keep them here.
            output = (self.store.home / "output").absolute().as_uri()
            request["OutputDataConfig"]["S3OutputPath"] = output
        self._chosen(request, machine)
        return request

    def _chosen(self, request: dict[str, Any], machine: bool = True) -> dict[str, Any]:
        """The request as its job runs: with InstancePreferences, a copy naming the first
        candidate this machine runs (`instance_choice`); refused when it cannot run."""
        def check(candidate: dict[str, Any]) -> None:
            kind = (candidate.get("ResourceConfig") or {}).get("InstanceType")
            visible = len(gpus.visible_gpus()) if gpus.uses_gpus(kind or "") and machine else None
            validation.check_create(candidate, visible)
            if hostkind.of(candidate) is hostkind.CONTAINER and (
                    problem := container_host.drivers_problem(candidate, self.bucket_root)):
                raise validation.client_error("CreateTrainingJob", problem)

        chosen = instance_choice.choose(
            request, check, lambda text: validation.client_error("CreateTrainingJob", text))
        interruptions.check_request(self.planned, chosen, admitted.host_names(chosen))
        if machine and hostkind.of(chosen).on_fixed_port(len(admitted.host_names(chosen))):
            fixed_port.check_lock_dir()  # refused now, not by the job's supervisor
        return chosen

    def check_machine(self, request: dict[str, Any]) -> None:
        """What this machine must have for a request `checked_request(machine=False)` passed
        (its GPUs, the fixed port's lock folder): what a dry run leaves out. With
        InstancePreferences, admission chooses a candidate this machine runs instead."""
        resources = request["ResourceConfig"]
        if resources.get("InstancePreferences"):
            return
        if gpus.uses_gpus(resources["InstanceType"]):
            validation.check_gpus(request, len(gpus.visible_gpus()))
        if hostkind.of(request).on_fixed_port(len(admitted.host_names(request))):
            fixed_port.check_lock_dir()

    def reserve(self, name: str) -> None:
        """Take the job name before anything of the job is written (ResourceInUse if taken)."""
        try:
            self.store.reserve(name)
        except JobExists:
            said = (f"Training job names must be unique within an AWS account and region, and a "
                    f"training job with this name already exists ({arns.job_arn(name)})")
            raise ControlPlaneError(
                f"CreateTrainingJob failed in local home {self.store.home} (ResourceInUse): "
                f"{said}", code="ResourceInUse", operation="CreateTrainingJob",
                service_message=said) from None

    def create_trial(self, request: dict[str, Any], tuning_job_arn: str) -> dict[str, Any]:
        """Create a tuning job's trial (CreateTrainingJob's checks; its description names the
        tuning job)."""
        checked = self.checked_request(request)
        self.reserve(checked["TrainingJobName"])
        return self.create_reserved(checked, tuning_job_arn)

    def create_reserved(self, request: dict[str, Any],
                        tuning_job_arn: str | None = None) -> dict[str, Any]:
        """Admit the checked request whose name this process reserved (on the instance type
        its InstancePreferences choose on this machine), and start its job."""
        if (request.get("ResourceConfig") or {}).get("InstancePreferences"):
            request = self._chosen(request)
        job = admit(request)
        state = JobState.new(job.name)
        state.tuning_job_arn = tuning_job_arn
        state.schedule = interruptions.schedule(self.planned, job.hosts)
        job_dir = self.store.create(request, job, state, reserved=True)
        self._start_supervisor(job.name, job_dir)
        return {"TrainingJobArn": arns.job_arn(job.name), **copy.deepcopy(_OK)}

    def describe_training_job(self, **kwargs: Any) -> dict[str, Any]:
        """The job's status, secondary status, times and outputs (DescribeTrainingJob).

        Reading never changes the job: a job whose supervisor is gone is described as ended,
        but its files are left as they are (its hosts end by themselves with the supervisor).
        """
        validation.check_shape("DescribeTrainingJob", kwargs)
        name = self._known(kwargs["TrainingJobName"], "DescribeTrainingJob")
        state = self._seen(name)
        response = responses.describe(self.store.request(name), state)
        if final := metrics.final_metric_data(self.store.job_dir(name)):
            response["FinalMetricDataList"] = final
        if warm := pools.warm_pool_status(self.store.home, name):
            response["WarmPoolStatus"] = warm
        return {**response, **copy.deepcopy(_OK)}

    def stop_training_job(self, **kwargs: Any) -> dict[str, Any]:
        """Ask the job to stop: it moves to Stopping, then Stopped (StopTrainingJob)."""
        validation.check_shape("StopTrainingJob", kwargs)
        name = self._known(kwargs["TrainingJobName"], "StopTrainingJob")
        seen = self._seen(name)
        state = seen if seen.is_terminal else self.store.update(name, JobState.request_stop)
        if state.is_terminal:
            raise validation.client_error(
                "StopTrainingJob",
                f"The request was rejected because the training job is in status "
                f"{state.status.primary.value}.",
            )
        pid = state.supervisor_pid
        if pid and self._is_supervisor(pid, state.supervisor_started):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGTERM)  # it also polls the state; the signal saves time
        return copy.deepcopy(_OK)

    def interrupt(self, name: str, host: str | None = None, notice: bool = True) -> None:
        """Interrupt the running job `name` (not a SageMaker API; `LocalSession.interrupt`)."""
        what = f"interrupt {name}"
        if not isinstance(notice, bool):
            raise UserInputError(f"{what}: notice must be True or False, got {notice!r}")
        state = self._seen(self._known(name, "InterruptTrainingJob"))
        job = self.store.job(name)
        if state.is_terminal:
            raise UserInputError(f"{what}: the job has already ended ({state.status.value})")
        if notice and not job.spot:
            raise UserInputError(
                f"{what}: a spot interruption (with notice) needs a spot job "
                f"(use_spot_instances=True); a lost host (notice=False, --no-notice) applies "
                f"to any job")
        hosts = list(job.hosts)
        interruptions.check_host(host, hosts, what)
        target = host if host is not None or notice else hosts[-1]
        taken: list[bool] = []
        asked = self.store.update(name, lambda s: taken.append(
            s.request_interruption(target, notice, "interrupt")) or taken[0])
        if not taken[0]:
            raise UserInputError(f"{what}: the job cannot be interrupted now (it is "
                                 f"{asked.status.value}"
                                 f"{', an interruption is under way' if asked.pending else ''})")

    def update_training_job(self, **kwargs: Any) -> dict[str, Any]:
        """Change the keep-alive of the warm pool the job holds or left (UpdateTrainingJob with
        `ResourceConfig.KeepAlivePeriodInSeconds`; 0 ends the pool)."""
        validation.check_shape("UpdateTrainingJob", kwargs)
        name = self._known(kwargs["TrainingJobName"], "UpdateTrainingJob")
        seconds = (kwargs.get("ResourceConfig") or {}).get("KeepAlivePeriodInSeconds")
        if seconds is not None and not pools.set_keep_alive(self.store.home, name, seconds):
            raise validation.client_error(
                "UpdateTrainingJob", f"The training job {name} has no warm pool to update.")
        return {"TrainingJobArn": arns.job_arn(name), **copy.deepcopy(_OK)}

    def list_training_jobs(self, **kwargs: Any) -> dict[str, Any]:
        """Summaries of the jobs under this home, filtered, sorted and paged (ListTrainingJobs)."""
        validation.check_shape("ListTrainingJobs", kwargs)
        summaries = []
        for name in self.store.names():
            with contextlib.suppress(OSError, ValueError, KeyError):
                summaries.append(responses.summary(self.store.request(name), self._seen(name)))
        summaries = [s for s in summaries if _matches(s, kwargs)]
        key = _SORT_KEYS[kwargs.get("SortBy", "CreationTime")]
        summaries.sort(key=lambda s: s[key], reverse=kwargs.get("SortOrder") == "Descending")
        start = _page_start(kwargs.get("NextToken"))
        size = kwargs.get("MaxResults", 10)
        page = {"TrainingJobSummaries": summaries[start : start + size], **copy.deepcopy(_OK)}
        if start + size < len(summaries):
            page["NextToken"] = str(start + size)
        return page

    # --- helpers ---------------------------------------------------------------------------

    @property
    def bucket_root(self) -> Path:
        return bucket_folder(self.store.home)

    def _known(self, name: str, operation: str) -> str:
        validation.check_job_name(operation, name)  # before the name becomes a path
        if not self.store.exists(name):
            raise JobNotFoundError(
                f"No training job named {name!r} in local home {self.store.home}: check the job "
                f"name (`ddpjob jobs list`)", code="ValidationException", operation=operation,
                service_message=NOT_FOUND)
        return name

    def _start_supervisor(self, name: str, job_dir: Path) -> None:
        self._supervisors = [p for p in self._supervisors if p.poll() is None]  # reap the ended
        log_fd = os.open(job_dir / "supervisor.log", os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        with open(log_fd, "ab") as out:
            proc = subprocess.Popen(
                [sys.executable, "-m", SUPERVISOR_MODULE, str(job_dir.absolute())],
                stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                env={**os.environ, LOCAL_BUCKET_ENV: str(self.bucket_root)},
                start_new_session=True,  # the job outlives this process and its terminal
            )  # fmt: skip
        self._supervisors.append(proc)

        started = proctree.started(proc.pid)
        self.store.update(name, lambda state: state.record_supervisor(proc.pid, started))
        logger.info("Started local training job %s (supervisor pid %d)", name, proc.pid)

    @staticmethod
    def _is_supervisor(pid: int, started: int | None) -> bool:
        """Whether `pid` is still the job's supervisor that started at `started`: the process
        itself (pid + start time + uid, `proctree.is_ours`), not another, maybe another user's,
        that got its pid once it ended. Its command line is not read: it changes while the
        supervisor titles itself, and a reader that caught it then took a live job for lost."""
        return proctree.is_ours(pid, started)

    def _seen(self, name: str) -> JobState:
        """The job's state as readers see it: a running job whose supervisor is gone has ended
        (a copy; the file is not changed)."""
        state = self.store.state(name)
        if state.is_terminal or self._supervisor_running(state, name):
            return state
        return state.with_lost_supervisor(str(self.store.job_dir(name) / "supervisor.log"))

    def _supervisor_running(self, state: JobState, name: str) -> bool:
        pid = state.supervisor_pid
        if pid is None:  # being started by the creating process
            return time.time() - state.creation_time < SUPERVISOR_START_S
        return self._is_supervisor(pid, state.supervisor_started)


def _page_start(token: str | None) -> int:
    """Where the page a ListTrainingJobs `NextToken` names starts: only tokens this client
    gave out (a count of summaries) are honoured, as SageMaker refuses a token of its own."""
    if token is None or token == "":
        return 0
    if not token.isascii() or not token.isdecimal() or len(token) > 9:
        raise validation.client_error("ListTrainingJobs", "Invalid pagination token: pass the "
                                                          "NextToken of the previous answer")
    return int(token)


def _matches(summary: dict[str, Any], filters: dict[str, Any]) -> bool:
    """Whether a TrainingJobSummary passes ListTrainingJobs' filters."""
    if filters.get("NameContains", "").lower() not in summary["TrainingJobName"].lower():
        return False
    if "StatusEquals" in filters and summary["TrainingJobStatus"] != filters["StatusEquals"]:
        return False
    for field in ("CreationTime", "LastModifiedTime"):
        value = summary.get(field)
        after, before = filters.get(f"{field}After"), filters.get(f"{field}Before")
        if after is not None and not (value and value > _aware(after)):
            return False
        if before is not None and not (value and value < _aware(before)):
            return False
    return True


def _aware(value: object) -> dt.datetime:
    """A datetime to compare with ours (naive ones are taken as local time, like botocore)."""
    if isinstance(value, dt.datetime):
        return value if value.tzinfo else value.astimezone()
    if isinstance(value, (int, float)):
        return dt.datetime.fromtimestamp(value).astimezone()
    return dt.datetime.fromisoformat(str(value)).astimezone()
