"""The detached process that runs one local tuning job:
`python -m ddpjob.local.tuning.controller <tuning job dir>`.

It asks the strategy (`strategies.Search`, told the trials of a warm start's parents) for each
trial's values and tells it each trial's end, creates the trials through the local control plane
(each a training job, up to MaxParallelTrainingJobs at once, or fewer where this machine says so),
follows them, and records what it saw in the tuning job's state for any process to read. A stop
(StopHyperParameterTuningJob, or MaxRuntimeInSeconds) stops every running trial; the job ends
Stopped once they all ended. Early stopping "Auto" and Hyperband stop trials by their live
objective series. It ends Completed when the budget is used or the completion criteria are met
(`completion`; running trials are stopped), Failed when no trial succeeded within the first
attempts. It runs in its own session, so the tuning job outlives the notebook that started it.
"""

from __future__ import annotations

import contextlib
import logging
import os
import time
from typing import Any

from ddpjob.errors import DdpjobError
from ddpjob.local.base import admitted, detached
from ddpjob.local.base.arns import tuning_job_arn
from ddpjob.local.control.control_plane import LocalControlPlane
from ddpjob.local.hostkinds import hostkind
from ddpjob.local.isolation import fixed_port
from ddpjob.local.tuning import (
    answers,
    completion,
    diagnostics,
    early_stopping,
    trials,
    warm_start,
)
from ddpjob.local.tuning.tuningstate import Trial, TuningState, TuningStatus
from ddpjob.local.tuning.tuningstore import TuningStore
from ddpjob.local.watch import metrics
from ddpjob.tuning import searches, strategies

log = logging.getLogger("ddpjob.local.tuning.controller")

POLL_S = 0.5
#: AWS's observed rule (aws/amazon-sagemaker-examples#2436): no trial succeeded in the first 5.
ATTEMPTS = 5


def no_success(attempts: int) -> str:
    """AWS's FailureReason when no trial succeeded."""
    return (f"No training job succeeded after {attempts} attempts. Please take a look at the "
            f"training job failures to get more details.")


def search_of(store: TuningStore, request: dict[str, Any]) -> strategies.Search:
    """The request's strategy, told the trials of its warm start's parents."""
    search = searches.for_request(
        request[answers.CONFIG], request["TrainingJobDefinition"].get(
            "StaticHyperParameters") or {}, request["HyperParameterTuningJobName"])
    search.learn(warm_start.known_trials([
        (store.request(name), store.state(name)) for name in warm_start.parent_names(request)
        if store.exists(name)]))
    return search


def budget(request: dict[str, Any]) -> int:
    """How many trials at most: MaxNumberOfTrainingJobs (Grid: every combination)."""
    config = request[answers.CONFIG]
    limit = config["ResourceLimits"].get("MaxNumberOfTrainingJobs")
    if config["Strategy"] == "Grid":
        return limit or strategies.grid_size(config.get("ParameterRanges") or {})
    return limit


def parallel(request: dict[str, Any]) -> tuple[int, str | None]:
    """How many trials run at once, and why fewer than asked (None when as asked): one when
    the trials' hosts rendezvous on this machine's fixed port (`fixed_port`: the others would
    wait for it), else at most one per CPU core of this machine (each trial's hosts need one)."""
    asked = request[answers.CONFIG]["ResourceLimits"]["MaxParallelTrainingJobs"]
    definition = request["TrainingJobDefinition"]
    trial = {"AlgorithmSpecification": definition["AlgorithmSpecification"],
             "ResourceConfig": trials.resources(definition)}
    hosts, kind = len(admitted.host_names(trial)), hostkind.of(trial)
    if asked > 1 and kind.on_fixed_port(hosts):
        return 1, (f"running 1 trial at a time, not MaxParallelTrainingJobs={asked}: each "
                   f"trial's {hosts} hosts run {kind.name}, and such a job holds this "
                   f"machine's port {fixed_port.FIXED_PORT} (its torchrun rendezvous) while it "
                   f"runs")
    cores = os.cpu_count() or 1
    if asked <= cores:
        return asked, None
    return cores, (f"running {cores} trials at once, not MaxParallelTrainingJobs={asked}: this "
                   f"machine has {cores} CPU core(s)")


class Controller:
    """Runs the tuning job `name` of `store` to its end."""

    def __init__(self, store: TuningStore, name: str):
        self.store, self.name = store, name
        self.request = store.request(name)
        self.control = LocalControlPlane(store.home)
        self.search = search_of(store, self.request)
        self.told: set[str] = set()  # the trials whose end the search was told
        self.complete: str | None = None  # why the completion criteria ended the job
        self.budget = budget(self.request)
        self.parallel, note = parallel(self.request)
        self.definition = self.request["TrainingJobDefinition"]
        self.metric = answers.objective(self.request)["MetricName"]
        self.max_runtime_s = self.request[answers.CONFIG]["ResourceLimits"].get(
            "MaxRuntimeInSeconds")
        config = self.request[answers.CONFIG]
        self.early_stopping = config.get("TrainingJobEarlyStoppingType", "Off") == "Auto"
        self.minimize = answers.objective(self.request)["Type"] == "Minimize"
        self.criteria = config.get("TuningJobCompletionCriteria")
        self.stopped_early: set[str] = set()
        if note:
            log.info("%s", note)
            self.store.update(name, lambda s: setattr(s, "note", note) or True)
        self.signalled = False
        # what the trials will lose (logged now, before any trial) or get wrong as they run
        self.watch = diagnostics.Watch(store, name, self.control.store)

    def run(self) -> None:
        while True:
            state = self._observe()
            if state.is_terminal:
                return
            self._tell(state)
            ending = self._ending(state)
            if ending is None:
                self._stop_early(state)
                self._launch(state)
            elif self._stop_trials(state):  # the job ends once none of its trials runs
                self._end(*ending)
                return
            time.sleep(POLL_S)

    def _end(self, final: TuningStatus, reason: str | None) -> None:
        self.store.update(self.name, lambda s: s.move(final, reason))

    def _ending(self, state: TuningState) -> tuple[TuningStatus, str | None] | None:
        """How the job ends now (its final status and reason), None while it goes on: a stop
        (asked, signalled, or MaxRuntimeInSeconds), no success in the first attempts, or the
        budget used."""
        overdue = self.max_runtime_s and time.time() - state.creation_time > self.max_runtime_s
        if state.status is TuningStatus.STOPPING or self.signalled or overdue:
            self.store.update(self.name, TuningState.request_stop)
            return TuningStatus.STOPPED, None
        ended = len([t for t in state.trials if t.ended])
        if ended >= ATTEMPTS and not state.succeeded():
            return TuningStatus.FAILED, no_success(ATTEMPTS)
        if self.complete is None and (reason := completion.reached(self.criteria, state,
                                                                   self.minimize)):
            log.info("the tuning job is complete: %s", reason)
            self.complete = reason
        if self.complete is not None:  # it stays complete while its trials stop
            return TuningStatus.COMPLETED, None
        if len(state.trials) < self.budget or state.running():
            return None
        return (TuningStatus.COMPLETED, None) if state.succeeded() else (
            TuningStatus.FAILED, no_success(ended))

    def _observe(self) -> TuningState:
        """Bring every running trial's record up to date."""
        seen = {t.name: self._seen(t) for t in self.store.state(self.name).running()}

        def change(state: TuningState) -> bool:
            for trial in state.trials:
                if trial.name in seen and seen[trial.name] is not None:
                    trial.__dict__.update(seen[trial.name])
            return bool(seen)

        state = self.store.update(self.name, change)
        self.watch.seen(t for t in state.trials if t.name in seen)
        return state

    def _seen(self, trial: Trial) -> dict[str, Any] | None:
        try:
            described = self.control.describe_training_job(TrainingJobName=trial.name)
        except DdpjobError:
            return None  # not created yet, or refused: `_launch` recorded it
        times = {k: described.get(k) for k in ("TrainingStartTime", "TrainingEndTime")}
        return {"status": described["TrainingJobStatus"],
                "failure_reason": described.get("FailureReason"),
                "objective": trials.objective_value(described, self.metric),
                "start_time": times["TrainingStartTime"] and times["TrainingStartTime"].timestamp(),
                "end_time": times["TrainingEndTime"] and times["TrainingEndTime"].timestamp()}

    def _tell(self, state: TuningState) -> None:
        """Tell the search how each trial that ended since ended."""
        for trial in state.trials:
            if trial.ended and trial.name not in self.told:
                self.told.add(trial.name)
                objective = trial.objective if trial.objective_status == "Succeeded" else None
                self.search.tell(trial.name, objective, trial.name in self.stopped_early)

    def _stop_early(self, state: TuningState) -> None:
        """Stop each running trial the median rule (early stopping "Auto") or the search
        (Hyperband) says to stop."""
        if not self.early_stopping and not self.search.prunes:
            return
        series = {t.name: early_stopping.objective_series(
            metrics.series(self.control.store.job_dir(t.name)), self.metric)
            for t in state.trials if t.start_time is not None or t.ended}
        for index, trial in enumerate(state.trials):
            if trial.ended or trial.name in self.stopped_early or trial.name not in series:
                continue
            previous = [series[t.name] for t in state.trials[:index] if t.name in series]
            if self.early_stopping and early_stopping.should_stop(
                    series[trial.name], previous, self.minimize):
                why = "is worse than the median of the trials before it"
            elif self.search.should_stop(trial.name, series[trial.name]):
                why = "is among the worst at its Hyperband rung"
            else:
                continue
            log.info("early stopping %s: its %s at epoch %d %s", trial.name, self.metric,
                     len(series[trial.name]), why)
            self.stopped_early.add(trial.name)
            with contextlib.suppress(DdpjobError):  # it ended meanwhile
                self.control.stop_training_job(TrainingJobName=trial.name)

    def _stop_trials(self, state: TuningState) -> bool:
        """Ask every running trial to stop; True once none runs."""
        for trial in state.running():
            with contextlib.suppress(DdpjobError):  # it ended meanwhile
                self.control.stop_training_job(TrainingJobName=trial.name)
        return not state.running()

    def _launch(self, state: TuningState) -> None:
        """Start trials while fewer than `parallel` run and the budget allows."""
        for number in range(len(state.trials) + 1, self.budget + 1):
            if len(self.store.state(self.name).running()) >= self.parallel:
                return
            name = trials.trial_name(self.name, number)
            values = self.search.suggest(name)
            if values is None:
                return
            self._start_trial(name, values)

    def _start_trial(self, name: str, values: dict[str, str]) -> None:
        trial = Trial(name, values, creation_time=time.time())
        self.store.update(self.name, lambda s: s.trials.append(trial) or True)
        request = trials.trial_request(self.definition, trial.name, values, self.metric)
        try:
            self.control.create_trial(request, tuning_job_arn(self.name))
        except DdpjobError as exc:
            log.warning("trial %s refused: %s", trial.name, exc)
            reason = str(exc)
            self.store.update(self.name, lambda s: _refused(s, trial.name, reason))


def _refused(state: TuningState, name: str, reason: str) -> bool:
    for trial in state.trials:
        if trial.name == name:
            trial.status, trial.failure_reason, trial.end_time = "Failed", reason, time.time()
    return True


def main(argv: list[str] | None = None) -> None:
    """`python -m ddpjob.local.tuning.controller <tuning job dir>`."""
    folder = detached.folder_argument("ddpjob.local.tuning.controller", "tuning", argv)
    controller = Controller(TuningStore(folder.parent.parent), folder.name)
    detached.stop_on_signals(controller, log)
    try:
        controller.run()
    except Exception as exc:  # noqa: BLE001 - the job must end, and say why
        log.exception("the tuning job's controller failed")
        reason = f"InternalServerError: {exc}"[:1024]
        controller.store.update(controller.name, lambda s: not s.is_terminal and s.move(
            TuningStatus.FAILED, reason))
        raise


if __name__ == "__main__":
    main()
