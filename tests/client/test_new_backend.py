"""A new backend is ten members, its policy value among them: one written here with only those
plans, submits and stops a job (an in-memory control plane, its files under tmp_path)."""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest
from ddpjob import backends, packaging, planner
from ddpjob.base_session import BaseSession
from ddpjob.definition import Code, JobDefinition, Resources
from ddpjob.errors import ControlPlaneError, JobNotFoundError, UserInputError
from ddpjob.inputs import parse
from ddpjob.job_status import JobDescription, MetricRow
from ddpjob.request import validate_request

#: What a backend must implement: its policy value, its default output folder, its scheduler.
MEMBERS = {"backend", "default_output_path", "submit_dryrun", "_reserve", "_schedule",
           "_describe", "_stop", "_logs", "list", "_metric_series"}

ROLE = "arn:aws:iam::000000000000:role/toy"
TOY = backends.Backend("toy", f"{__name__}:ToySession", "'toy'", "toy", instance_types=("toy",),
                       default_image="toy-image", default_role=ROLE,
                       storage_schemes=frozenset({"file"}))


class ToySession(BaseSession):
    """Jobs kept in a dict; outputs under `root`."""

    backend = TOY

    def __init__(self, root: Path):
        self.root = root
        self.jobs: dict[str, dict[str, Any]] = {}

    def default_output_path(self) -> str:
        return (self.root / "output").as_uri()

    def submit_dryrun(self, request: Mapping[str, Any]) -> dict[str, Any]:
        return dict(validate_request(request))

    def _reserve(self, request: dict[str, Any]) -> None:
        if request["TrainingJobName"] in self.jobs:
            raise ControlPlaneError("name taken", code="ResourceInUse")
        self.jobs[request["TrainingJobName"]] = {"TrainingJobStatus": "InProgress"}

    def _schedule(self, request: dict[str, Any]) -> None:
        self.jobs[request["TrainingJobName"]].update(
            request, CreationTime=dt.datetime.now(dt.timezone.utc))

    def _describe(self, job_name: str) -> dict[str, Any]:
        if job_name not in self.jobs:
            raise JobNotFoundError(f"no job {job_name}")
        return {"TrainingJobName": job_name, **self.jobs[job_name]}

    def _stop(self, job_name: str) -> None:
        self.jobs[job_name]["TrainingJobStatus"] = "Stopped"

    def _logs(self, job_name: str, follow: bool) -> Iterator[tuple[str, str]]:
        return iter(())

    def list(self, max_results: int | None = None, **filters: Any) -> list[dict[str, Any]]:
        return [{"TrainingJobName": name} for name in self.jobs][:max_results]

    def _metric_series(self, job: JobDescription, metric_names: list[str]) -> list[MetricRow]:
        return []


def test_a_backend_implements_ten_members() -> None:
    assert BaseSession.__abstractmethods__ == MEMBERS
    assert not ToySession.__abstractmethods__  # the policy value given as a class attribute


def test_a_minimal_backend_plans_and_submits_a_job(src: Path, tmp_path: Path) -> None:
    data = tmp_path / "data"
    data.mkdir()
    (data / "part-0").write_text("1 2 3\n")
    session = ToySession(tmp_path / "toy")
    code = Code(packaging.check_source("train.py", str(src)))
    definition = JobDefinition(name="toy-1", code=code, resources=Resources("toy", 2),
                               inputs=parse({"train": str(data)}),
                               members={"input_mode": "File"})
    request = planner.plan(definition, session).request
    output = (tmp_path / "toy" / "output").as_uri()
    assert request["AlgorithmSpecification"]["TrainingImage"] == "toy-image"
    assert request["RoleArn"] == ROLE
    assert request["OutputDataConfig"]["S3OutputPath"] == output
    assert request["InputDataConfig"][0]["DataSource"]["S3DataSource"]["S3Uri"] == \
        f"{output}/toy-1/input/train/"
    assert request["ResourceConfig"] == {**request["ResourceConfig"], "InstanceType": "toy",
                                         "InstanceCount": 2}

    job = planner.submit(definition, session)
    assert session.describe(job.name).raw["RoleArn"] == ROLE
    assert (tmp_path / "toy" / "output" / "toy-1" / "input" / "train" / "part-0").read_text() \
        == "1 2 3\n"  # the local input was uploaded where the request says
    session.stop("toy-1")
    assert session.describe(job.name).status.value == "Stopped"
    assert [j["TrainingJobName"] for j in session.list()] == ["toy-1"]


def test_a_minimal_backend_answers_its_policy(tmp_path: Path) -> None:
    session = ToySession(tmp_path)
    assert session.where == "toy jobs"
    assert session.input_prefix("j") == f"{(tmp_path / 'output').as_uri()}/j/input"
    with pytest.raises(UserInputError, match="instance_type 'ml.m5.large' cannot run on a "
                       "ToySession \\(toy\\): use 'toy' \\(or a Session for an 'ml.\\*' type"):
        session.backend.check_instance_type("ml.m5.large")
    with pytest.raises(UserInputError, match="output_path 's3://b/x': toy jobs need an file://"):
        session.check_location("s3://b/x", "output_path")
    with pytest.raises(UserInputError, match="toy sessions have no default bucket"):
        session.upload_data(str(tmp_path))


def test_a_backend_gives_a_default_role_or_checks_one() -> None:
    with pytest.raises(ValueError, match="backend toy: give a default_role or a role_check"):
        backends.Backend("toy", f"{__name__}:ToySession", "'toy'", "toy")
