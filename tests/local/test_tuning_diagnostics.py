"""What a local tuning job finds wrong with its trials (`ddpjob.local.tuning.diagnostics`): the
rules over a trial's files, then one real tuning job whose trials break them."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import pytest
from ddpjob.local.session import LocalSession
from ddpjob.local.tuning import diagnostics
from ddpjob.local.watch import metrics

from tests.local.conftest import JOB_TIMEOUT_S, assert_no_processes, wait_for
from tests.local.test_tuning_jobs import LOSS, TRIAL, _valid, tuning_request, wait_tuning


def test_checkpoint_writers_are_the_hosts_with_anything_in_their_checkpoint_folder(
        tmp_path: Path) -> None:
    (tmp_path / "hosts" / "algo-1" / "checkpoints").mkdir(parents=True)
    (tmp_path / "hosts" / "algo-1" / "checkpoints" / "last.pt").write_text("w")
    (tmp_path / "hosts" / "algo-2" / "checkpoints").mkdir(parents=True)  # empty
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "file").write_text("x")
    (tmp_path / "hosts" / "algo-3").mkdir()
    (tmp_path / "hosts" / "algo-3" / "checkpoints").symlink_to(elsewhere)  # never followed
    hosts = ["algo-1", "algo-2", "algo-3", "algo-4"]
    assert diagnostics.checkpoint_writers(tmp_path, hosts) == ["algo-1"]


def test_a_metric_printed_by_several_hosts_or_ranks_is_named() -> None:
    one = [{"MetricName": "loss", "Host": "algo-1", "Value": 1.0}] * 3
    assert diagnostics.repeated_by(one, "loss") == []
    hosts = one + [{"MetricName": "loss", "Host": "algo-2", "Value": 1.0},
                   {"MetricName": "acc", "Host": "algo-3", "Value": 1.0}]
    assert diagnostics.repeated_by(hosts, "loss") == ["algo-1", "algo-2"]
    ranks = [{"MetricName": "loss", "Host": "algo-1", "Rank": r, "Value": 1.0} for r in (1, 0)]
    assert diagnostics.repeated_by(ranks, "loss") == ["algo-1 rank 0", "algo-1 rank 1"]


def test_the_metric_series_records_the_rank_of_a_torchrun_workers_line(tmp_path: Path) -> None:
    log = tmp_path / "algo-1.log"
    log.write_text("[rank 1] loss=0.5\nloss=0.25\n")
    collector = metrics.MetricCollector(tmp_path, [("loss", r"loss=([0-9.]+)")],
                                        {"algo-1": log})
    try:
        assert collector.poll(final=True) == 2
    finally:
        collector.close()
    records = metrics.series(tmp_path)
    assert [(r["Value"], r.get("Rank")) for r in records] == [(0.5, 1), (0.25, None)]
    assert diagnostics.repeated_by(records, "loss") == ["algo-1", "algo-1 rank 1"]


def test_a_log_is_read_from_its_end_within_a_bound_and_never_through_a_link(
        tmp_path: Path) -> None:
    (tmp_path / "logs").mkdir()
    (tmp_path / "logs" / "algo-1.log").write_text("".join(f"line {i}\n" for i in range(10_000)))
    tail = diagnostics.log_tail(tmp_path, "algo-1", limit=100)
    assert tail[-1] == "line 9999" and len(tail) < 15 and all(
        line.startswith("line ") for line in tail)  # the cut first line left out
    (tmp_path / "logs" / "algo-2.log").symlink_to(tmp_path / "logs" / "algo-1.log")
    assert diagnostics.log_tail(tmp_path, "algo-2") == []
    assert diagnostics.log_tail(tmp_path, "algo-3") == []
    os.mkfifo(tmp_path / "logs" / "algo-4.log")  # never blocks
    assert diagnostics.log_tail(tmp_path, "algo-4") == []


def test_the_lines_closest_to_a_regex_that_never_matched_are_named() -> None:
    assert diagnostics.regex_text(r"val_loss=([0-9\.]+)") == "val_loss=0"
    assert diagnostics.regex_text(r"^Epoch \d+ (?:acc|accuracy): (.*)$") == "Epoch 0 acc" \
                                                                            "accuracy: 0"
    lines = {"algo-1": ["starting", "[rank 0] val-loss: 0.25", "epoch 1 done", "x" * 500],
             "algo-2": ["[rank 1] val-loss: 0.25", "validation accuracy 0.9",
                        "2026-11-28 20:08:27,709 ddpjob_runtime INFO val_loss=nothing"]}
    closest = diagnostics.closest_lines(r"val_loss=([0-9.]+)", lines, count=2)
    assert closest == ["algo-1: val-loss: 0.25", "algo-2: validation accuracy 0.9"]
    line = diagnostics.unmatched("t-001-abcd0123", "val_loss", r"val_loss=([0-9.]+)", lines)
    assert line.startswith("t-001-abcd0123: the objective metric 'val_loss' never matched its "
                           "Regex 'val_loss=([0-9.]+)'")
    assert "'algo-1: val-loss: 0.25'" in line and "\n" not in line
    assert "its log is empty" in diagnostics.unmatched("t", "m", "m=(.*)", {"algo-1": []})


DIAG = '''import argparse, os, time
parser = argparse.ArgumentParser()
parser.add_argument("--level", type=float)
parser.add_argument("--label")
parser.add_argument("--release")
args, _ = parser.parse_known_args()
folder = os.environ["DDPJOB_CHECKPOINT_DIR"]
os.makedirs(folder, exist_ok=True)
with open(os.path.join(folder, "last.txt"), "w") as out:
    out.write("epoch 1")
print("epoch 1 done", flush=True)
print(f"{args.label}{(args.level - 3) ** 2:.6f}", flush=True)
deadline = time.time() + 60
while not os.path.exists(args.release) and time.time() < deadline:  # the test says when
    time.sleep(0.1)
'''


def test_a_tuning_job_names_what_its_trials_lost_and_got_wrong(
        session: LocalSession, tmp_path: Path, config: Path,
        capsys: pytest.CaptureFixture[str]) -> None:
    """A ModelTrainer-shaped definition (its values unquoted) without its drivers channel, no
    CheckpointConfig, 2 hosts; the trial labelled `loss=` prints its objective on both hosts
    and writes a checkpoint, the one labelled `Loss:` never matches the objective's Regex. The
    trials hold until the test has seen the checkpoint line: it comes while they run."""
    from ddpjob.cli import main

    release = tmp_path / "release"
    ranges = {"CategoricalParameterRanges": [{"Name": "label", "Values": ["loss=", "Loss:"]}]}
    request = tuning_request(session, tmp_path, "diag", strategy="Grid", jobs=None, parallel=2,
                             ranges=ranges, static={"level": "5", "release": str(release)},
                             script_text=DIAG)
    definition = request["TrainingJobDefinition"]
    definition["ResourceConfig"]["InstanceCount"] = 2
    definition["StaticHyperParameters"] = {  # as sagemaker-train sends them: not JSON-quoted
        k: json.loads(v) if v.startswith('"') else v
        for k, v in definition["StaticHyperParameters"].items()}
    session.sagemaker_client.create_hyper_parameter_tuning_job(**request)
    wait_for(lambda: any(" wrote /opt/ml/checkpoints " in line
                         for line in session.tuning_diagnostics("diag")),
             JOB_TIMEOUT_S, "the checkpoint line")
    counters = session.describe_tuning_job("diag")["TrainingJobStatusCounters"]
    release.touch()
    assert counters["InProgress"] >= 1, counters  # seen while a trial ran
    described = wait_tuning(session, "diag")
    _valid("DescribeHyperParameterTuningJob", described)  # nothing of ours in AWS's answer
    assert described["HyperParameterTuningJobStatus"] == "Completed", described
    found = session.tuning_diagnostics("diag")
    assert found[0].startswith("InputDataConfig: no 'sm_drivers' channel")  # before any trial
    assert len(found) == 4, found
    matched, unmatched = sorted(
        session.sagemaker_client.list_training_jobs_for_hyper_parameter_tuning_job(
            HyperParameterTuningJobName="diag")["TrainingJobSummaries"],
        key=lambda t: t["TunedHyperParameters"]["label"], reverse=True)
    written, repeated = sorted(found[1:3], key=lambda line: "printed by" in line)
    assert re.match(r"diag-00[12]-[0-9a-f]{8} wrote /opt/ml/checkpoints on algo-1, algo-2 "
                    r"while the definition has no CheckpointConfig", written)  # both trials do
    assert repeated.startswith(f"{matched['TrainingJobName']}: the objective metric 'loss' was "
                               f"printed by 2 hosts or ranks (algo-1, algo-2)")
    assert found[3].startswith(f"{unmatched['TrainingJobName']}: the objective metric 'loss' "
                               f"never matched")
    assert "'algo-1: Loss:4.000000'" in found[3]
    logged = (session.home / "tuning-jobs" / "diag" / "controller.log").read_text()
    assert all(logged.count(line) == 1 for line in found), logged
    capsys.readouterr()
    assert main(["tuning-jobs", "describe", "diag"]) == 0
    shown = capsys.readouterr()
    assert json.loads(shown.out)["HyperParameterTuningJobName"] == "diag"
    assert shown.err.splitlines() == [f"diagnostic: {line}" for line in found]
    assert_no_processes(session.home)


def test_ddpjobs_tuner_hands_what_a_trial_lost_to_the_local_tuning_job(
        session: LocalSession, tmp_path: Path) -> None:
    """The estimator's plain job would keep TensorBoard output, which no trial can: the tuner's
    warning is the tuning job's first diagnostic, logged by its controller too."""
    from ddpjob import CategoricalParameter, HyperparameterTuner, PyTorch

    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "trial.py").write_text(TRIAL)
    estimator = PyTorch(entry_point="trial.py", source_dir=str(tmp_path / "src"),
                        instance_type="local", session=session, metric_definitions=LOSS,
                        tensorboard_output_config={"S3OutputPath": f"file://{tmp_path}/tb"})
    tuner = HyperparameterTuner(estimator, "loss", {"level": CategoricalParameter([3])},
                                objective_type="Minimize", strategy="Grid")
    tuner.fit(job_name="lost")
    assert tuner.describe()["HyperParameterTuningJobStatus"] == "Completed"
    found = session.tuning_diagnostics("lost")
    assert len(found) == 1 and found[0].startswith(
        "TensorBoardOutputConfig: a trial lost the plain training job's"), found
    assert found[0] in (session.home / "tuning-jobs" / "lost" / "controller.log").read_text()
    assert_no_processes(session.home)
