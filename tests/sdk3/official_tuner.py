"""A v3 tuning job on this machine, as a notebook would run it: `python official_tuner.py
'{"home": ..., "source_dir": ..., "stop": false}'`.

Run in the SDK v3 venv (`sdk3_python`): `sagemaker.train.tuner.HyperparameterTuner` on a
`ModelTrainer` with `Torchrun()` over 2 hosts, whose session is `LocalSession(home)
.official_session()`: `tune()`, its `HyperParameterTuningJob` resource (`refresh()`, `wait()`),
`best_training_job()` and `analytics().dataframe()` (`"parallel"`: MaxParallelTrainingJobs,
default 1); with `"stop": true` it starts the job
without waiting and stops it (`stop_tuning_job()`, then `wait()`). No HTTP request may leave the
process: every one fails the script. The last line printed is a JSON summary.
"""

from __future__ import annotations

import json
import logging
import sys
from typing import Any

import v3_local
from botocore.httpsession import URLLib3Session


def _refuse_http() -> None:
    def send(self: Any, request: Any) -> Any:
        raise RuntimeError(f"a request left the machine: {request.url}")

    URLLib3Session.send = send


def main() -> None:
    config = json.loads(sys.argv[1])
    _refuse_http()
    from sagemaker.core.parameter import ContinuousParameter
    from sagemaker.train import ModelTrainer
    from sagemaker.train.configs import CheckpointConfig, Compute, SourceCode
    from sagemaker.train.distributed import Torchrun
    from sagemaker.train.tuner import HyperparameterTuner

    logging.basicConfig(level=logging.INFO, format="%(message)s", stream=sys.stdout)
    import ddpjob

    session, image = v3_local.session_and_image(config["home"])
    trainer = ModelTrainer(
        training_image=image, base_job_name="v3-tune",
        source_code=SourceCode(source_dir=config["source_dir"], entry_script="train.py"),
        compute=Compute(instance_type="ml.m5.xlarge", instance_count=2),
        distributed=Torchrun(process_count_per_node=1),
        hyperparameters={"epochs": config.get("epochs", 3)},
        checkpoint_config=CheckpointConfig(s3_uri="s3://sagemaker-local/v3-tune/ckpt"),
        sagemaker_session=session,
    )
    tuner = HyperparameterTuner(
        trainer, "loss", {"lr": ContinuousParameter(0.05, 0.45)},
        metric_definitions=[{"Name": "loss", "Regex": r"loss=([0-9.]+)"}],
        strategy="Random", objective_type="Minimize", max_jobs=2,
        max_parallel_jobs=config.get("parallel", 1),
        random_seed=7, base_tuning_job_name="v3-tune")
    summary: dict[str, Any] = {"ddpjob": ddpjob.__file__}
    if config.get("stop"):
        tuner.tune(wait=False)
        tuner.stop_tuning_job()
        tuner.wait()
        summary["described"] = tuner.describe().hyper_parameter_tuning_job_status
    else:
        tuner.tune()  # waits: HyperParameterTuningJob.wait()
        job = tuner.latest_tuning_job.refresh()
        summary["status"] = job.hyper_parameter_tuning_job_status
        summary["best"] = tuner.best_training_job()
        best = job.best_training_job.final_hyper_parameter_tuning_job_objective_metric
        summary["best_value"] = best.value
        frame = tuner.analytics().dataframe()
        summary["frame"] = frame[["TrainingJobName", "FinalObjectiveValue", "lr"]].to_dict(
            "records")
    summary["name"] = tuner.latest_tuning_job.hyper_parameter_tuning_job_name
    print(json.dumps(summary, default=str))


if __name__ == "__main__":
    main()
