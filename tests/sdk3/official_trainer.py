"""A v3 ModelTrainer job on this machine, as a notebook would run it: `python official_trainer.py
'{"home": ..., "endpoint": ..., "source_dir": ..., "data_uri": ..., "checkpoint_uri": ...}'`.

Run in the SDK v3 venv (`sdk3_python`): `ModelTrainer(..., sagemaker_session=
LocalSession(home).official_session()).train(input_data_config=[...], logs=True)`, the role left
for the SDK to resolve. The SDK's own output (its log lines at INFO) goes to stdout; the last line
is a JSON summary: the job's description (empty when no job was created), the error `train()`
raised, the HTTP requests botocore sent (each must be for the moto server at `endpoint`, or the
script fails) and the telemetry the SDK tried to send.
"""

from __future__ import annotations

import json
import logging
import sys
from typing import Any

import v3_local
from botocore.httpsession import URLLib3Session


def _guard_http(endpoint: str, sent: list[str]) -> None:
    real_send = URLLib3Session.send

    def send(self: Any, request: Any) -> Any:
        sent.append(request.url)
        if not request.url.startswith(endpoint):
            raise RuntimeError(f"a request left the machine: {request.url}")
        return real_send(self, request)

    URLLib3Session.send = send


def main() -> None:
    config = json.loads(sys.argv[1])
    sent: list[str] = []
    _guard_http(config["endpoint"], sent)
    from sagemaker.core.telemetry import telemetry_logging
    from sagemaker.train import ModelTrainer
    from sagemaker.train.configs import CheckpointConfig, Compute, InputData, SourceCode
    from sagemaker.train.distributed import SMP, Torchrun

    telemetry: list[Any] = []
    telemetry_logging._send_telemetry_request = lambda *a, **k: telemetry.append(repr(a))
    logging.basicConfig(level=logging.INFO, format="%(message)s", stream=sys.stdout)

    session, image = v3_local.session_and_image(config["home"])
    trainer = ModelTrainer(
        training_image=image, base_job_name=config["base_job_name"],
        source_code=SourceCode(source_dir=config["source_dir"], entry_script="train.py"),
        compute=Compute(instance_type=config.get("instance_type", "ml.m5.xlarge"),
                        instance_count=2),
        distributed=Torchrun(process_count_per_node=2,
                             smp=SMP(**config["smp"]) if "smp" in config else None),
        hyperparameters=config["hyperparameters"],
        checkpoint_config=CheckpointConfig(s3_uri=config["checkpoint_uri"]),
        sagemaker_session=session,
    )
    error = None
    try:
        trainer.train(input_data_config=[
            InputData(channel_name="training", data_source=config["data_uri"])], logs=True)
    except Exception as exc:  # noqa: BLE001 - reported in the summary, as the notebook sees it
        error = f"{type(exc).__name__}: {exc}"
    jobs = session.sagemaker_client.list_training_jobs(
        NameContains=config["base_job_name"], SortBy="CreationTime", SortOrder="Descending")
    names = [summary["TrainingJobName"] for summary in jobs["TrainingJobSummaries"]]
    job = names and session.sagemaker_client.describe_training_job(TrainingJobName=names[0])
    print(json.dumps({"job": job, "error": error, "sent": sent, "telemetry": telemetry,
                      "role": trainer.role}, default=str))


if __name__ == "__main__":
    main()
