"""Hyperparameter tuning jobs on this machine: every trial a real local training job.

The trials run a torch-free script (the subject is the controller: trials, counters, the best
job, stops, failures), whose objective `loss=(level - 3)^2` is printed once."""

from __future__ import annotations

import copy
import json
import os
import re
import statistics
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from botocore.validate import ParamValidator
from ddpjob.local.base.interruptions import GRACE_ENV
from ddpjob.local.session import LocalSession
from ddpjob.request import service_model

from tests.local.conftest import (
    JOB_TIMEOUT_S,
    assert_no_processes,
    log_text,
    source_tar,
    training_request,
    wait_for,
)

TRIAL = '''import argparse, os, time
parser = argparse.ArgumentParser()
parser.add_argument("--level", type=float)
parser.add_argument("--sleep", type=float, default=0)
parser.add_argument("--fail", default="no")
parser.add_argument("--epochs", type=int, default=1)
args, _ = parser.parse_known_args()
time.sleep(args.sleep)
if args.fail == "yes":
    raise SystemExit("trial failed on purpose")
for epoch in range(args.epochs):
    print(f"loss={(args.level - 3) ** 2:.6f}", flush=True)
    if epoch < args.epochs - 1:
        time.sleep(1)
'''
LOSS = [{"Name": "loss", "Regex": r"loss=([0-9.eE+-]+)"}]


def tuning_request(session: LocalSession, tmp_path: Path, name: str, *, strategy: str = "Random",
                   jobs: int | None = 4, parallel: int = 2, ranges: dict | None = None,
                   static: dict[str, str] | None = None, trial: str = TRIAL,
                   **definition_members: Any) -> dict[str, Any]:  # fmt: skip
    """A CreateHyperParameterTuningJob request over `trial` (a script), minimizing `loss`;
    `definition_members` go into its TrainingJobDefinition."""
    script = tmp_path / name / "trial.py"
    script.parent.mkdir(parents=True, exist_ok=True)
    script.write_text(trial)
    training = training_request(session, name, source_tar(tmp_path / name, script), "trial.py",
                                workers=1, distributed=False, hyperparameters=static)
    training["AlgorithmSpecification"]["MetricDefinitions"] = LOSS
    definition = {key: training[key] for key in (
        "RoleArn", "OutputDataConfig", "ResourceConfig", "StoppingCondition")}
    limits = {"MaxParallelTrainingJobs": parallel,
              **({"MaxNumberOfTrainingJobs": jobs} if jobs else {})}
    return {
        "HyperParameterTuningJobName": name,
        "HyperParameterTuningJobConfig": {
            "Strategy": strategy, "RandomSeed": 7, "ResourceLimits": limits,
            "HyperParameterTuningJobObjective": {"Type": "Minimize", "MetricName": "loss"},
            "ParameterRanges": ranges or {"ContinuousParameterRanges": [
                {"Name": "level", "MinValue": "0", "MaxValue": "6", "ScalingType": "Linear"}]}},
        "TrainingJobDefinition": {
            **definition, **definition_members,
            "StaticHyperParameters": training["HyperParameters"],
            "AlgorithmSpecification": {
                **training["AlgorithmSpecification"], "MetricDefinitions": LOSS},
            "TuningObjective": {"Type": "Minimize", "MetricName": "loss"}},
    }


def wait_tuning(session: LocalSession, name: str, timeout_s: float = 4 * JOB_TIMEOUT_S) -> dict:
    client = session.sagemaker_client

    def ended() -> dict | None:
        found = client.describe_hyper_parameter_tuning_job(HyperParameterTuningJobName=name)
        return found if found["HyperParameterTuningJobStatus"] in (
            "Completed", "Failed", "Stopped") else None

    return wait_for(ended, timeout_s, f"tuning job {name} to end")


def _valid(operation: str, response: dict[str, Any]) -> None:
    """`response` fits the operation's output shape in botocore's model."""
    shape = service_model().operation_model(operation).output_shape
    answer = {k: v for k, v in response.items() if k != "ResponseMetadata"}
    report = ParamValidator().validate(answer, shape)
    assert not report.has_errors(), report.generate_report()


def test_a_random_tuning_job_runs_its_trials_and_names_the_best(
        session: LocalSession, tmp_path: Path) -> None:
    client = session.sagemaker_client
    client.create_hyper_parameter_tuning_job(**tuning_request(session, tmp_path, "rnd"))
    described = wait_tuning(session, "rnd")
    _valid("DescribeHyperParameterTuningJob", described)
    assert described["HyperParameterTuningJobStatus"] == "Completed", described
    assert described["TrainingJobStatusCounters"] == {
        "Completed": 4, "InProgress": 0, "RetryableError": 0, "NonRetryableError": 0,
        "Stopped": 0}
    assert described["ObjectiveStatusCounters"] == {"Succeeded": 4, "Pending": 0, "Failed": 0}
    listed = client.list_training_jobs_for_hyper_parameter_tuning_job(
        HyperParameterTuningJobName="rnd", SortBy="FinalObjectiveMetricValue",
        SortOrder="Ascending")
    _valid("ListTrainingJobsForHyperParameterTuningJob", listed)
    trials = listed["TrainingJobSummaries"]
    assert [t["TrainingJobName"] for t in trials] == sorted(
        (t["TrainingJobName"] for t in trials),
        key=lambda n: (float(next(s for s in trials if s["TrainingJobName"] == n)[
            "TunedHyperParameters"]["level"]) - 3) ** 2)
    assert all(re.fullmatch(r"rnd-00[1-4]-[0-9a-f]{8}", t["TrainingJobName"]) for t in trials)
    best = described["BestTrainingJob"]
    assert best["TrainingJobName"] == trials[0]["TrainingJobName"]
    x = float(best["TunedHyperParameters"]["level"])
    assert best["FinalHyperParameterTuningJobObjectiveMetric"]["Value"] == pytest.approx(
        (x - 3) ** 2, abs=1e-5)
    trial = client.describe_training_job(TrainingJobName=best["TrainingJobName"])
    assert trial["TuningJobArn"] == described["HyperParameterTuningJobArn"]
    assert trial["HyperParameters"]["_tuning_objective_metric"] == '"loss"'  # framework: quoted
    assert trial["HyperParameters"]["level"] == best["TunedHyperParameters"]["level"]
    assert_no_processes(session.home)


def test_the_same_seed_draws_the_same_trials(session: LocalSession, tmp_path: Path) -> None:
    client = session.sagemaker_client
    for name in ("seed-a", "seed-b"):
        client.create_hyper_parameter_tuning_job(**tuning_request(
            session, tmp_path, name, jobs=2, parallel=1))
    drawn = []
    for name in ("seed-a", "seed-b"):
        assert wait_tuning(session, name)["HyperParameterTuningJobStatus"] == "Completed"
        trials = client.list_training_jobs_for_hyper_parameter_tuning_job(
            HyperParameterTuningJobName=name, SortBy="Name", SortOrder="Ascending")
        drawn.append([t["TunedHyperParameters"] for t in trials["TrainingJobSummaries"]])
    assert drawn[0] == drawn[1] and drawn[0][0] != drawn[0][1]


def test_a_grid_runs_every_combination_once(session: LocalSession, tmp_path: Path) -> None:
    ranges = {"CategoricalParameterRanges": [{"Name": "level", "Values": ["1", "3", "4"]}]}
    session.sagemaker_client.create_hyper_parameter_tuning_job(**tuning_request(
        session, tmp_path, "grid", strategy="Grid", jobs=None, parallel=2, ranges=ranges))
    described = wait_tuning(session, "grid")
    assert described["HyperParameterTuningJobStatus"] == "Completed", described
    trials = session.sagemaker_client.list_training_jobs_for_hyper_parameter_tuning_job(
        HyperParameterTuningJobName="grid")["TrainingJobSummaries"]
    assert sorted(t["TunedHyperParameters"]["level"] for t in trials) == ["1", "3", "4"]
    assert described["BestTrainingJob"]["TunedHyperParameters"] == {"level": "3"}


def test_early_stopping_stops_the_trials_the_median_rule_names_and_no_other(
        session: LocalSession, tmp_path: Path) -> None:
    """Each trial prints its loss once a second, 4 epochs, one trial at a time: from the fourth
    on, a trial whose loss is above the median of the trials before it is stopped at once,
    and one below it runs to its end."""
    request = tuning_request(session, tmp_path, "early", jobs=7, parallel=1,
                             static={"epochs": "4"})
    request["HyperParameterTuningJobConfig"]["TrainingJobEarlyStoppingType"] = "Auto"
    session.sagemaker_client.create_hyper_parameter_tuning_job(**request)
    described = wait_tuning(session, "early")
    assert described["HyperParameterTuningJobStatus"] == "Completed", described
    trials = session.sagemaker_client.list_training_jobs_for_hyper_parameter_tuning_job(
        HyperParameterTuningJobName="early", SortBy="Name", SortOrder="Ascending",
    )["TrainingJobSummaries"]
    losses = [(float(t["TunedHyperParameters"]["level"]) - 3) ** 2 for t in trials]
    for number, (trial, loss) in enumerate(zip(trials, losses, strict=True)):
        # The median at the first epoch (every trial before) or at a later one (those that ran
        # to the end): worse than both, stopped; better than both, never.
        ran = [v for v, t in zip(losses[:number], trials, strict=False)
               if t["TrainingJobStatus"] == "Completed"]
        if number < 3:
            assert trial["TrainingJobStatus"] == "Completed", (number, losses)
            continue
        medians = [statistics.median(losses[:number])] + ([statistics.median(ran)]
                                                          if len(ran) >= 3 else [])
        if loss > max(medians):
            assert trial["TrainingJobStatus"] == "Stopped", (number, losses)
        elif loss <= min(medians):
            assert trial["TrainingJobStatus"] == "Completed", (number, losses)
    assert {t["TrainingJobStatus"] for t in trials} == {"Stopped", "Completed"}  # the seed's
    assert_no_processes(session.home)


def test_the_cli_lists_a_tuning_job_with_its_trials_and_prints_their_logs(
        session: LocalSession, tmp_path: Path, config: Path,
        capsys: pytest.CaptureFixture[str]) -> None:
    from ddpjob.cli import main

    ranges = {"CategoricalParameterRanges": [{"Name": "level", "Values": ["2", "3"]}]}
    session.sagemaker_client.create_hyper_parameter_tuning_job(**tuning_request(
        session, tmp_path, "cli", strategy="Grid", jobs=None, parallel=2, ranges=ranges))
    wait_tuning(session, "cli")
    capsys.readouterr()
    assert main(["tuning-jobs", "list"]) == 0
    listed = capsys.readouterr().out.splitlines()
    assert listed[0].startswith("cli\tCompleted\t")
    assert sorted(line.split("\t")[2] for line in listed[1:]) == ["loss=0", "loss=1"]
    assert all(re.match(r"  cli-00[12]-[0-9a-f]{8}\tCompleted\t", line) for line in listed[1:])
    assert main(["tuning-jobs", "logs", "cli"]) == 0
    assert len(re.findall(r"^cli-00[12]-[0-9a-f]{8} \[algo-1\] loss=", capsys.readouterr().out,
                          re.M)) == 2
    assert main(["tuning-jobs", "describe", "cli"]) == 0
    assert json.loads(capsys.readouterr().out)["HyperParameterTuningJobStatus"] == "Completed"
    assert main(["tuning-jobs", "stop", "cli"]) == 3  # an ended job: one line


def test_no_success_in_five_attempts_fails_the_tuning_job(
        session: LocalSession, tmp_path: Path) -> None:
    request = tuning_request(session, tmp_path, "hopeless", jobs=8, parallel=2,
                             static={"fail": '"yes"'})
    session.sagemaker_client.create_hyper_parameter_tuning_job(**request)
    described = wait_tuning(session, "hopeless")
    assert described["HyperParameterTuningJobStatus"] == "Failed"
    assert described["FailureReason"].startswith("No training job succeeded after 5 attempts")
    counters = described["TrainingJobStatusCounters"]
    assert counters["NonRetryableError"] >= 5 and counters["InProgress"] == 0
    assert "BestTrainingJob" not in described
    assert_no_processes(session.home)


def test_a_stop_from_another_process_stops_every_running_trial(
        session: LocalSession, tmp_path: Path) -> None:
    client = session.sagemaker_client
    client.create_hyper_parameter_tuning_job(**tuning_request(
        session, tmp_path, "stopped", jobs=6, parallel=2, static={"sleep": "300"}))

    def running() -> bool:
        found = client.describe_hyper_parameter_tuning_job(HyperParameterTuningJobName="stopped")
        return found["TrainingJobStatusCounters"]["InProgress"] == 2

    wait_for(running, JOB_TIMEOUT_S, "two trials to run")
    code = (f"from ddpjob.local.session import LocalSession\n"
            f"LocalSession(home={str(session.home)!r}).stop_tuning_job('stopped')\n")
    subprocess.run([sys.executable, "-c", code], check=True, timeout=120)
    described = wait_tuning(session, "stopped")
    assert described["HyperParameterTuningJobStatus"] == "Stopped"
    assert described["TrainingJobStatusCounters"]["Stopped"] == 2
    assert described["TrainingJobStatusCounters"]["InProgress"] == 0
    assert_no_processes(session.home)
    listed = client.list_hyper_parameter_tuning_jobs()
    _valid("ListHyperParameterTuningJobs", listed)
    assert [s["HyperParameterTuningJobStatus"] for s in listed[
        "HyperParameterTuningJobSummaries"]] == ["Stopped"]
    client.delete_hyper_parameter_tuning_job(HyperParameterTuningJobName="stopped")
    with pytest.raises(client.exceptions.ResourceNotFound):
        client.describe_hyper_parameter_tuning_job(HyperParameterTuningJobName="stopped")


@pytest.mark.parametrize(("change", "refusal"), [
    (lambda r: r.update(Autotune={"Mode": "Enabled"}), "Autotune: not run by local"),
    (lambda r: r["TrainingJobDefinition"]["AlgorithmSpecification"].update(
        MetricDefinitions=[]), "A metric is required"),
    (lambda r: r["HyperParameterTuningJobConfig"].update(Strategy="Grid"),
     "only categorical"),
    (lambda r: r.update(HyperParameterTuningJobName="n" * 33), "HyperParameterTuningJobName"),
    (lambda r: r["TrainingJobDefinition"]["ResourceConfig"].update(InstanceType="ml.p5.48xlarge"),
     "cannot run in local mode"),
])
def test_what_cannot_run_is_one_refusal_before_anything_starts(
        session: LocalSession, tmp_path: Path, change: Any, refusal: str) -> None:
    request = copy.deepcopy(tuning_request(session, tmp_path, "refused"))
    change(request)
    with pytest.raises((session.sagemaker_client.exceptions.ClientError,
                        __import__("botocore").exceptions.ParamValidationError),
                       match=refusal):
        session.sagemaker_client.create_hyper_parameter_tuning_job(**request)
    assert not (session.home / "tuning-jobs" / "refused").exists()
    assert not (session.home / "jobs").exists() or not list((session.home / "jobs").iterdir())


# TRIAL, saving a checkpoint (ddpjob's layout, torch-free) under its own name in the folder the
# trials share, as tuning.parity's warning suggests; the folder sync uploads it (its path is
# not a step folder's, so the sync takes it for the script's own file).
CHECKPOINTING_TRIAL = TRIAL + '''import hashlib
from ddpjob_runtime import checkpoints
from ddpjob_runtime.shared.checkpoint_layout import Manifest, step_dir_name, write_manifest
def save(root, step, data):
    folder = root / step_dir_name(step)
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "state.pt").write_bytes(data)
    write_manifest(folder, Manifest(step, files={"state.pt": {
        "size": len(data), "sha256": hashlib.sha256(data).hexdigest()}}))
save(checkpoints.checkpoint_dir() / os.environ["TRAINING_JOB_NAME"], int(args.level),
     f"level {args.level}".encode())
'''


def test_ddpjobs_tuner_runs_here_and_names_the_best_trial(session: LocalSession,
                                                          tmp_path: Path) -> None:
    """`ddpjob.HyperparameterTuner(...).fit()` on a LocalSession: the same request the tuner
    sends SageMaker (tests/tuning), its trials local jobs of the estimator's definition; the
    best estimator brings back the best trial's own checkpoint, analytics() a row per trial."""
    from ddpjob import CategoricalParameter, HyperparameterTuner, PyTorch

    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "trial.py").write_text(CHECKPOINTING_TRIAL)
    estimator = PyTorch(entry_point="trial.py", source_dir=str(tmp_path / "src"),
                        instance_type="local", session=session, metric_definitions=LOSS,
                        hyperparameters={"sleep": 0}, environment={"WHO": "trial"},
                        checkpoint_s3_uri=(tmp_path / "checkpoints").as_uri())
    tuner = HyperparameterTuner(estimator, "loss", {"level": CategoricalParameter([2, 3, 5])},
                                objective_type="Minimize", strategy="Grid",
                                max_parallel_jobs=2)
    tuner.fit(job_name="ours")
    described = tuner.describe()
    assert described["HyperParameterTuningJobStatus"] == "Completed", described
    best = tuner.best_training_job()
    trial = session.sagemaker_client.describe_training_job(TrainingJobName=best)
    assert json.loads(trial["HyperParameters"]["level"]) == "3"  # v2 quotes categoricals
    assert trial["Environment"] == {"WHO": "trial"}  # what the plain job would carry

    best_estimator = tuner.best_estimator()
    assert isinstance(best_estimator, PyTorch) and best_estimator.latest_training_job.name == best
    folder = best_estimator.download_checkpoint(tmp_path / "best")
    assert (folder.name, (folder / "state.pt").read_bytes()) == ("step-000000003", b"level 3.0")

    rows = tuner.analytics().dataframe().sort_values("FinalObjectiveValue")
    assert rows.TrainingJobName.iloc[0] == best
    assert rows.level.tolist() == ['"3"', '"2"', '"5"']  # categoricals: as sent (v2)
    assert rows.FinalObjectiveValue.tolist() == pytest.approx([0, 1, 4], abs=1e-5)
    assert set(rows.TrainingJobStatus) == {"Completed"}
    assert (rows.TrainingElapsedTimeSeconds > 0).all()
    assert_no_processes(session.home)


DLC_IMAGE = "763104351884.dkr.ecr.us-east-1.amazonaws.com/pytorch-training:2.5-cpu-py311"


@pytest.mark.parametrize(("image", "hosts", "expected"), [
    (DLC_IMAGE, 2, 1),  # SageMaker's toolkit on 2 hosts: port 7777, one trial at a time
    (DLC_IMAGE, 1, 2),  # one host: no rendezvous across hosts, no fixed port
    ("123456789012.dkr.ecr.us-east-1.amazonaws.com/ddpjob:latest", 2, 2),  # ddpjob's runtime
])
def test_trials_on_the_fixed_port_run_one_at_a_time_and_the_controller_says_why(
        image: str, hosts: int, expected: int) -> None:
    from ddpjob.local.tuning import controller

    request = {
        "HyperParameterTuningJobConfig": {"ResourceLimits": {"MaxParallelTrainingJobs": 2}},
        "TrainingJobDefinition": {
            "AlgorithmSpecification": {"TrainingImage": image, "TrainingInputMode": "File"},
            "ResourceConfig": {"InstanceType": "ml.m5.xlarge", "InstanceCount": hosts,
                               "VolumeSizeInGB": 30}}}
    count, note = controller.parallel(request)
    assert count == min(expected, os.cpu_count() or 1)
    if expected == 1:
        assert note == (
            "running 1 trial at a time, not MaxParallelTrainingJobs=2: each trial's 2 hosts run "
            "SageMaker's PyTorch toolkit, and such a job holds this machine's port 7777 (its "
            "torchrun rendezvous) while it runs")


SPOT_TRIAL = '''import argparse, json, os, time
from pathlib import Path
from ddpjob_runtime import checkpoints
parser = argparse.ArgumentParser()
parser.add_argument("--level", type=float)
args, _ = parser.parse_known_args()
# The trials share CheckpointConfig.S3Uri (as on SageMaker): each keeps its own file in it.
state = checkpoints.checkpoint_dir() / f"{os.environ['TRAINING_JOB_NAME']}.json"
first = json.loads(state.read_text())["epoch"] + 1 if state.exists() else 0
print(f"first epoch {first}", flush=True)
for epoch in range(first, 4):
    print(f"loss={(args.level - 3) ** 2 + 1 / (epoch + 1):.6f}", flush=True)
    state.write_text(json.dumps({"epoch": epoch}))
    if epoch == 1 and first == 0:  # wait to be interrupted, as a spot host would be reclaimed
        Path(os.environ["SM_OUTPUT_DATA_DIR"], "ready").touch()
        time.sleep(120)
        raise SystemExit("nobody interrupted the trial within 120 s")
'''


def test_a_spot_interrupted_trial_resumes_from_its_checkpoint_and_counts_once(
        session: LocalSession, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Each of 2 spot trials is interrupted (`LocalSession.interrupt`, as `ddpjob interrupt`)
    after its epoch 1's checkpoint: it restarts, resumes at epoch 2 and completes; the tuning job
    ends Completed with 2 trials, each counted once, their objectives the last epoch's."""
    monkeypatch.setenv(GRACE_ENV, "10")  # the supervisors the controller starts inherit it
    client = session.sagemaker_client
    client.create_hyper_parameter_tuning_job(**tuning_request(
        session, tmp_path, "spot", jobs=2, parallel=1, trial=SPOT_TRIAL,
        EnableManagedSpotTraining=True,
        StoppingCondition={"MaxRuntimeInSeconds": 600, "MaxWaitTimeInSeconds": 900},
        CheckpointConfig={"S3Uri": (tmp_path / "checkpoints").as_uri()}))
    interrupted = []
    for number in (1, 2):
        def started(number: int = number) -> str | None:
            trials = client.list_training_jobs_for_hyper_parameter_tuning_job(
                HyperParameterTuningJobName="spot", SortBy="Name",
                SortOrder="Ascending")["TrainingJobSummaries"]
            return trials[number - 1]["TrainingJobName"] if len(trials) >= number else None

        trial = wait_for(started, JOB_TIMEOUT_S, f"trial {number} to start")
        ready = session.job_dir(trial) / "hosts" / "algo-1" / "output" / "data" / "ready"
        wait_for(ready.exists, JOB_TIMEOUT_S, f"trial {trial} to wait for its interruption")
        session.interrupt(trial)
        interrupted.append(trial)
    described = wait_tuning(session, "spot")
    _valid("DescribeHyperParameterTuningJob", described)
    assert described["HyperParameterTuningJobStatus"] == "Completed", described
    assert described["TrainingJobStatusCounters"] == {
        "Completed": 2, "InProgress": 0, "RetryableError": 0, "NonRetryableError": 0,
        "Stopped": 0}
    assert described["ObjectiveStatusCounters"] == {"Succeeded": 2, "Pending": 0, "Failed": 0}
    listed = client.list_training_jobs_for_hyper_parameter_tuning_job(
        HyperParameterTuningJobName="spot")["TrainingJobSummaries"]
    assert sorted(t["TrainingJobName"] for t in listed) == sorted(interrupted)
    for summary in listed:
        job = client.describe_training_job(TrainingJobName=summary["TrainingJobName"])
        statuses = [t["Status"] for t in job["SecondaryStatusTransitions"]]
        assert statuses.count("Interrupted") == 1 and statuses[-1] == "Completed", statuses
        text = log_text(session, summary["TrainingJobName"], "algo-1")
        assert "first epoch 0" in text and "first epoch 2" in text, text[-3000:]
        level = float(summary["TunedHyperParameters"]["level"])
        assert summary["FinalHyperParameterTuningJobObjectiveMetric"]["Value"] == pytest.approx(
            (level - 3) ** 2 + 1 / 4, abs=1e-5)
    assert_no_processes(session.home)
