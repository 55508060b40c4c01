"""SageMaker's hyperparameter tuning API on this machine: each tuning job runs as its own
detached controller process (`controller`) whose trials are local training jobs; its state is
on disk, so it is described, listed and stopped from any process.

Every request is checked against botocore's model as CreateTrainingJob is, then against AWS's
rules (`ddpjob.tuning.rules`), and its first trial's CreateTrainingJob against the local
control plane's checks: what cannot run is refused before anything starts.
"""

from __future__ import annotations

import contextlib
import copy
import logging
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from ddpjob_runtime.shared.storage.uris import LOCAL_BUCKET_ENV

from ddpjob.errors import ControlPlaneError, JobNotFoundError, UserInputError
from ddpjob.local.base import proctree
from ddpjob.local.base.arns import tuning_job_arn
from ddpjob.local.base.jobstore import JobExists
from ddpjob.local.control import refusals, validation
from ddpjob.local.control.control_plane import LocalControlPlane
from ddpjob.local.tuning import answers, trials, warm_start
from ddpjob.local.tuning.tuningstate import TuningState, TuningStatus
from ddpjob.local.tuning.tuningstore import TuningStore
from ddpjob.tuning import rules, strategies

log = logging.getLogger(__name__)

CONTROLLER_MODULE = "ddpjob.local.tuning.controller"
CONTROLLER_START_S = 60.0  # a job whose controller recorded no pid this long after has lost it
LOST = "InternalServerError: the tuning job's controller process is gone (see controller.log)"
_OK = {"ResponseMetadata": {"HTTPStatusCode": 200, "RetryAttempts": 0}}


def _refused(operation: str, message: str) -> ControlPlaneError:
    return validation.client_error(operation, message)


class LocalTuningControlPlane:
    """The tuning jobs under `control`'s home; their trials are `control`'s training jobs."""

    def __init__(self, control: LocalControlPlane):
        self.control = control
        self.store = TuningStore(control.store.home)

    def create_hyper_parameter_tuning_job(self, **kwargs: Any) -> dict[str, Any]:
        """Check the request, then start its controller (CreateHyperParameterTuningJob)."""
        self.create_checked(self.checked_request(kwargs))
        return {"HyperParameterTuningJobArn": tuning_job_arn(kwargs["HyperParameterTuningJobName"]),
                **copy.deepcopy(_OK)}

    def create_checked(self, request: dict[str, Any], stage: Callable[[], None] | None = None,
                       lost: Sequence[str] = ()) -> None:
        """Reserve the name of a request `checked_request` answered, run `stage` (the uploads;
        the name is given back when it fails), then start the tuning job's controller, whose
        diagnostics begin with `lost` (what the client's tuner found its trials lose)."""
        name = request["HyperParameterTuningJobName"]
        try:
            self.store.reserve(name)
        except JobExists:
            raise ControlPlaneError(
                f"CreateHyperParameterTuningJob failed in local home {self.store.home} "
                f"(ResourceInUse): a tuning job named {name} exists already",
                code="ResourceInUse", operation="CreateHyperParameterTuningJob",
                service_message=f"Hyperparameter tuning job {name} already exists") from None
        try:
            if stage is not None:
                stage()
        except BaseException:
            self.store.release(name)
            raise
        state = TuningState.new(name)
        state.diagnostics = list(lost)
        folder = self.store.create_tuning(request, state)
        self._start_controller(name, folder)

    def checked_request(self, kwargs: dict[str, Any]) -> dict[str, Any]:
        """The request as this machine would run it, or the one-line error it answers."""
        op = "CreateHyperParameterTuningJob"
        validation.check_shape(op, kwargs)
        request = copy.deepcopy(kwargs)
        try:
            rules.check_request(request)
        except rules.RuleBroken as exc:
            raise _refused(op, str(exc)) from None
        config = request[answers.CONFIG]
        for member in ("TrainingJobDefinitions", "Autotune"):
            if request.get(member):
                raise _refused(op, f"{member}: not run by local tuning jobs yet "
                                   f"(docs/tuning.md); tune on SageMaker with a Session")
        criteria = config.get("TuningJobCompletionCriteria") or {}
        if (criteria.get("ConvergenceDetected") or {}).get("CompleteOnConvergence") == "Enabled":
            raise _refused(op, f"{answers.CONFIG}.TuningJobCompletionCriteria."
                               f"ConvergenceDetected: AWS's convergence rule is undocumented, so "
                               f"local tuning jobs do not apply it; leave it Disabled "
                               f"(docs/tuning.md)")
        try:
            strategies.require_engine(config["Strategy"])
            warm_start.check(request, self._parent)
        except UserInputError as exc:
            raise _refused(op, str(exc)) from None
        ranges = config.get("ParameterRanges") or {}
        first = strategies.grid(ranges)[0] if config["Strategy"] == "Grid" \
            else strategies.RandomSearch(ranges).suggest()  # any values: what the trials run
        trial = trials.trial_request(request["TrainingJobDefinition"],
                                     trials.trial_name(request["HyperParameterTuningJobName"], 1),
                                     first, answers.objective(request)["MetricName"])
        refusals.check_request(trial)  # what no trial of it could run is refused now
        self.control.checked_request(trial)
        return request

    def describe_hyper_parameter_tuning_job(self, **kwargs: Any) -> dict[str, Any]:
        """The tuning job's status, counters, best trial (DescribeHyperParameterTuningJob)."""
        op = "DescribeHyperParameterTuningJob"
        validation.check_shape(op, kwargs)
        name = self._known(kwargs["HyperParameterTuningJobName"], op)
        request, state = self.store.request(name), self._seen(name)
        parents = [found for parent in warm_start.parent_names(request)
                   if (found := self._parent(parent)) is not None]
        return {**answers.describe(request, state),
                **warm_start.overall_best(request, state, parents), **copy.deepcopy(_OK)}

    def diagnostics(self, name: str) -> list[str]:
        """ddpjob's findings on the tuning job's trials (`diagnostics`: the job's, then each
        trial's), which no AWS answer has a member for."""
        state = self.store.state(self._known(name, "DescribeHyperParameterTuningJob"))
        return state.diagnostics + [t.diagnosis for t in state.trials if t.diagnosis]

    def stop_hyper_parameter_tuning_job(self, **kwargs: Any) -> dict[str, Any]:
        """Stopping, then Stopped once every running trial stopped
        (StopHyperParameterTuningJob)."""
        op = "StopHyperParameterTuningJob"
        validation.check_shape(op, kwargs)
        name = self._known(kwargs["HyperParameterTuningJobName"], op)
        seen = self._seen(name)
        state = seen if seen.is_terminal else self.store.update(name, TuningState.request_stop)
        if state.is_terminal:
            raise _refused(op, f"The hyperparameter tuning job {name} is in status "
                               f"{state.status.value} and cannot be stopped.")
        # No signal: the controller reads Stopping at its next poll, and one sent before it
        # set its handlers (a stop just after the create) would kill it, the job lost.
        return copy.deepcopy(_OK)

    def list_training_jobs_for_hyper_parameter_tuning_job(self, **kwargs: Any) -> dict[str, Any]:
        """The trials' summaries, filtered, sorted and paged."""
        op = "ListTrainingJobsForHyperParameterTuningJob"
        validation.check_shape(op, kwargs)
        name = self._known(kwargs["HyperParameterTuningJobName"], op)
        request, state = self.store.request(name), self._seen(name)
        found = [answers.trial_summary(request, t) for t in state.trials
                 if kwargs.get("StatusEquals") in (None, t.status)]
        sort_by = kwargs.get("SortBy", "CreationTime")
        if sort_by == "FinalObjectiveMetricValue":  # jobs without one are not listed (AWS)
            found = [s for s in found if "FinalHyperParameterTuningJobObjectiveMetric" in s]
        key = {"Name": lambda s: s["TrainingJobName"], "Status": lambda s: s["TrainingJobStatus"],
               "CreationTime": lambda s: s["CreationTime"],
               "FinalObjectiveMetricValue":
                   lambda s: s["FinalHyperParameterTuningJobObjectiveMetric"]["Value"]}[sort_by]
        found.sort(key=key, reverse=kwargs.get("SortOrder", "Descending") == "Descending")
        return _page(found, "TrainingJobSummaries", kwargs)

    def list_hyper_parameter_tuning_jobs(self, **kwargs: Any) -> dict[str, Any]:
        """Summaries of the tuning jobs under this home (ListHyperParameterTuningJobs)."""
        validation.check_shape("ListHyperParameterTuningJobs", kwargs)
        found = []
        for name in self.store.names():
            with contextlib.suppress(OSError, ValueError, KeyError):
                found.append(answers.summary(self.store.request(name), self._seen(name)))
        found = [s for s in found if kwargs.get("StatusEquals") in
                 (None, s["HyperParameterTuningJobStatus"])
                 and kwargs.get("NameContains", "") in s["HyperParameterTuningJobName"]]
        key = {"Name": "HyperParameterTuningJobName", "Status": "HyperParameterTuningJobStatus",
               "CreationTime": "CreationTime"}[kwargs.get("SortBy", "Name")]
        found.sort(key=lambda s: s[key], reverse=kwargs.get("SortOrder") == "Descending")
        return _page(found, "HyperParameterTuningJobSummaries", kwargs)

    def delete_hyper_parameter_tuning_job(self, **kwargs: Any) -> dict[str, Any]:
        """Remove an ended tuning job's entry (its trials stay: DeleteHyperParameterTuningJob)."""
        op = "DeleteHyperParameterTuningJob"
        validation.check_shape(op, kwargs)
        name = self._known(kwargs["HyperParameterTuningJobName"], op)
        if not self._seen(name).is_terminal:
            raise _refused(op, f"The hyperparameter tuning job {name} is running: stop it "
                               f"first, then delete it.")
        shutil.rmtree(self.store.job_dir(name))
        return copy.deepcopy(_OK)

    # --- helpers ---------------------------------------------------------------------------

    def _exists(self, name: str) -> bool:
        with contextlib.suppress(rules.RuleBroken):  # before the name becomes a path
            return self.store.exists(rules.check_name(name))
        return False

    def _known(self, name: str, operation: str) -> str:
        if self._exists(name):
            return name
        raise JobNotFoundError(
            f"No hyperparameter tuning job named {name!r} in local home {self.store.home}",
            code="ResourceNotFound", operation=operation,
            service_message=f"Amazon SageMaker can't find a tuning job with name {name}")

    def _parent(self, name: str) -> warm_start.Parent | None:
        """A local tuning job's request and state as readers see them; None without it."""
        return (self.store.request(name), self._seen(name)) if self._exists(name) else None

    def _start_controller(self, name: str, folder: Path) -> None:
        log_fd = os.open(folder / "controller.log", os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        with open(log_fd, "ab") as out:
            proc = subprocess.Popen(
                [sys.executable, "-m", CONTROLLER_MODULE, str(folder.absolute())],
                stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                env={**os.environ, LOCAL_BUCKET_ENV: str(self.control.bucket_root)},
                start_new_session=True)  # the tuning job outlives this process
        started = proctree.started(proc.pid)
        self.store.update(name, lambda s: _record(s, proc.pid, started))
        log.info("Started local tuning job %s (controller pid %d)", name, proc.pid)

    def _controller_running(self, state: TuningState) -> bool:
        if state.controller_pid is None:  # being started by the creating process
            return time.time() - state.creation_time < CONTROLLER_START_S
        return proctree.started(state.controller_pid) == state.controller_started

    def _seen(self, name: str) -> TuningState:
        """The state as readers see it: a running job whose controller is gone has Failed (a
        copy; the file is not changed)."""
        state = self.store.state(name)
        if not state.is_terminal and not self._controller_running(state):
            state.move(TuningStatus.FAILED, LOST)
        return state


def _record(state: TuningState, pid: int, started: int | None) -> bool:
    state.controller_pid, state.controller_started = pid, started
    return True


def _page(items: list[dict[str, Any]], key: str, kwargs: dict[str, Any]) -> dict[str, Any]:
    try:
        start = int(kwargs.get("NextToken") or 0)
    except ValueError:
        raise UserInputError(f"NextToken {kwargs.get('NextToken')!r} was not given by this "
                             f"client") from None
    size = kwargs.get("MaxResults", 10 if key == "TrainingJobSummaries" else 100)
    page = {key: items[start:start + size], **copy.deepcopy(_OK)}
    if start + size < len(items):
        page["NextToken"] = str(start + size)
    return page
