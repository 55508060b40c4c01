"""`plan(definition, scheduler)`: any front end builds a JobDefinition and gets the request the
estimator would get; the scheduler fills in what it owns."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ddpjob import PyTorch, packaging
from ddpjob.definition import Code, JobDefinition, Resources, Stopping
from ddpjob.inputs import parse
from ddpjob.planner import plan
from ddpjob_runtime.shared import storage


def test_a_definition_built_by_hand_plans_as_the_estimators(src: Path, local_session: Any,
                                                            tmp_path: Path) -> None:
    data = tmp_path / "data"
    data.mkdir()
    definition = JobDefinition(
        name="hand-1", code=Code(packaging.check_source("train.py", str(src))),
        resources=Resources("local", 2), stopping=Stopping(max_run=600),
        hyperparameters={"lr": "0.1"}, inputs=parse({"train": str(data)}),
        checkpoint=storage.parse(str(tmp_path / "ckpt")), environment={"A": "1"},
        members={"volume_size": 30, "input_mode": "File"})
    planned = plan(definition, local_session)
    estimator = PyTorch(entry_point="train.py", source_dir=str(src), instance_count=2,
                        max_run=600, hyperparameters={"lr": 0.1}, session=local_session,
                        checkpoint_s3_uri=str(tmp_path / "ckpt"), environment={"A": "1"})
    assert planned.request == estimator.training_job_request({"train": str(data)}, "hand-1")
    assert planned.code_uri == planned.request["HyperParameters"][
        "sagemaker_submit_directory"].strip('"')
    assert [channel.upload_from for channel in planned.channels] == [None]  # read in place


def test_the_definition_holds_parsed_locations(src: Path, local_session: Any,
                                               tmp_path: Path) -> None:
    estimator = PyTorch(entry_point="train.py", source_dir=str(src), session=local_session,
                        checkpoint_s3_uri=str(tmp_path / "ckpt"))
    definition = estimator.definition(str(tmp_path), "parsed-1")
    assert definition.checkpoint == storage.parse(str(tmp_path / "ckpt"))
    assert estimator.checkpoint_s3_uri == definition.checkpoint.uri
    assert [item.location.path for item in definition.inputs] == [tmp_path]
