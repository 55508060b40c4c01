"""The official SDK v3's tuner runs here: `sagemaker.train.tuner.HyperparameterTuner` on a
`ModelTrainer` with `Torchrun()` over 2 hosts, through `LocalSession().official_session()`.

Everything the SDK does happens in the SDK v3 venv (`official_tuner.py`), without one HTTP
request: `tune()` uploads the drivers and the code archive and sends
CreateHyperParameterTuningJob, its `HyperParameterTuningJob` resource waits and refreshes,
`best_training_job()` and `analytics().dataframe()` read our answers. The trials are real local
jobs on SageMaker's PyTorch container toolkit (the v3 tuner's definition cannot carry
ModelTrainer's container command), which runs in this environment's Python
(`DDPJOB_DLC_PYTHON`, which has the toolkits).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from botocore.validate import ParamValidator
from ddpjob.request import service_model

from tests.conftest import FIXED_PORT, HOST_NAMESPACES
from tests.local.conftest import assert_no_processes, local_session_at

pytestmark = [
    pytest.mark.slow,
    FIXED_PORT,
    HOST_NAMESPACES,
]

HERE = Path(__file__).parent
REPO = HERE.parents[1]
TUNER = HERE / "official_tuner.py"
SCRIPT = HERE / "jobs" / "tuning" / "train.py"
TIMEOUT_S = 500


def tune(sdk3_python: Path, home: Path, source: Path, **config: Any) -> dict[str, Any]:
    """Run `official_tuner.py` in the v3 venv: its JSON summary."""
    env = {**{k: v for k, v in os.environ.items() if not k.startswith("AWS_")},
           "AWS_CONFIG_FILE": "/dev/null", "AWS_SHARED_CREDENTIALS_FILE": "/dev/null",
           "DDPJOB_DLC_PYTHON": sys.executable,
           "PYTHONPATH": os.pathsep.join([str(REPO / "sdk"), str(REPO / "runtime")])}
    arguments = json.dumps({"home": str(home), "source_dir": str(source), **config})
    done = subprocess.run([str(sdk3_python), str(TUNER), arguments], env=env,
                          capture_output=True, text=True, timeout=TIMEOUT_S, check=False)
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-4000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def _valid(operation: str, response: dict[str, Any]) -> None:
    shape = service_model().operation_model(operation).output_shape
    answer = {k: v for k, v in response.items() if k != "ResponseMetadata"}
    report = ParamValidator().validate(answer, shape)
    assert not report.has_errors(), report.generate_report()


@pytest.fixture
def source(tmp_path: Path) -> Path:
    folder = tmp_path / "src"
    folder.mkdir()
    shutil.copy(SCRIPT, folder / "train.py")
    return folder


def test_the_v3_tuner_runs_its_trials_here_and_names_the_best(
    sdk3_python: Path, source: Path, tmp_path: Path
) -> None:
    """Two trials, two asked in parallel: their hosts hold port 7777, so the controller runs
    one at a time and says why in its log."""
    with local_session_at(tmp_path / "home") as local:
        summary = tune(sdk3_python, local.home, source, parallel=2)
        assert summary["status"] == "Completed", summary
        name, client = summary["name"], local.sagemaker_client
        assert summary["ddpjob"].startswith(str(REPO / "sdk"))  # this checkout's ddpjob ran
        log = (local.home / "tuning-jobs" / name / "controller.log").read_text()

        frame = {row["TrainingJobName"]: row for row in summary["frame"]}
        assert len(frame) == 2 and log.count("Started local training job") == 2
        # Both trials' 2 hosts need port 7777: one trial at a time, and the controller says so.
        assert "running 1 trial at a time, not MaxParallelTrainingJobs=2: each trial's 2 hosts " \
               "run SageMaker's PyTorch toolkit" in log
        # ...and that its trials will not run the ModelTrainer's torchrun, before they run.
        assert any(line.startswith("AlgorithmSpecification: the tuning API carries no "
                                   "ContainerEntrypoint")
                   for line in local.tuning_diagnostics(name))
        best = min(frame.values(), key=lambda row: row["FinalObjectiveValue"])
        assert summary["best"] == best["TrainingJobName"]
        lr = best["lr"]  # three steps of w -= lr * 2 * (w - 3) from 0: loss = 9 (1 - 2 lr)^6
        assert summary["best_value"] == pytest.approx(9 * (1 - 2 * lr) ** 6, abs=1e-5)

        described = client.describe_hyper_parameter_tuning_job(HyperParameterTuningJobName=name)
        _valid("DescribeHyperParameterTuningJob", described)
        assert described["ObjectiveStatusCounters"]["Succeeded"] == 2
        listed = client.list_training_jobs_for_hyper_parameter_tuning_job(
            HyperParameterTuningJobName=name)
        _valid("ListTrainingJobsForHyperParameterTuningJob", listed)
        first, second = sorted(frame, key=lambda t: client.describe_training_job(
            TrainingJobName=t)["CreationTime"])
        assert client.describe_training_job(TrainingJobName=second)["CreationTime"] >= (
            client.describe_training_job(TrainingJobName=first)["TrainingEndTime"])
        for trial in frame:
            job = client.describe_training_job(TrainingJobName=trial)
            assert job["TuningJobArn"] == described["HyperParameterTuningJobArn"]
            assert job["HyperParameters"]["sagemaker_program"] == "train.py"  # raw: v3's form
            channels = {c["ChannelName"] for c in job["InputDataConfig"]}
            assert "sm_drivers" in channels and job["CheckpointConfig"]["S3Uri"].endswith(
                "/v3-tune/ckpt")
            # SageMaker's PyTorch toolkit reads neither sm_drivers nor ModelTrainer's
            # distribution: each host ran `python train.py` alone (v3's #5508 in another form).
            for host in ("algo-1", "algo-2"):
                lines = (local.job_dir(trial) / "logs" / f"{host}.log").read_text()
                assert f"rank 0/1 host {host} lr " in lines and "epoch 2 loss=" in lines
        assert_no_processes(local.home)


def test_the_v3_tuner_stops_a_job_it_just_started(
    sdk3_python: Path, source: Path, tmp_path: Path
) -> None:
    """`tune(wait=False)`, `stop_tuning_job()` at once, `wait()`: Stopped, no process left (a
    stop that signalled the controller before it set its handlers lost the job)."""
    with local_session_at(tmp_path / "home") as local:
        summary = tune(sdk3_python, local.home, source, stop=True)
        assert summary["described"] == "Stopped", summary
        assert_no_processes(local.home)
