"""A request is checked once and admitted once: what `submit_dryrun` accepts, `submit` accepts,
and the job its rooms read is the typed `AdmittedJob` beside `request.json`.

Every kind of request the tests build goes through `submit_dryrun`, again through it (the
checks are a fixed point: a checked request passes them unchanged), then `submit`; the job is
stopped at once (what it runs is other tests' subject)."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest
from ddpjob import PyTorch, planner
from ddpjob.local.base.admitted import AdmittedJob
from ddpjob.local.hostkinds import hostkind
from ddpjob.local.session import LocalSession
from ddpjob_runtime.shared.storage.uris import LOCAL_BUCKET

from tests.local.conftest import assert_no_processes, source_tar, training_request, wait_until_ended

DLC_IMAGE = "763104351884.dkr.ecr.us-east-1.amazonaws.com/pytorch-training:2.5-cpu-py311"


def _plain(session: LocalSession, tmp_path: Path, name: str, **extra: Any) -> dict[str, Any]:
    """A torch-free one-process-per-host job of `name`."""
    script = tmp_path / name / "plain.py"
    script.parent.mkdir(parents=True)
    script.write_text("print('plain', flush=True)\n")
    source = source_tar(tmp_path / name, script)
    return training_request(session, name, source, "plain.py", workers=1, distributed=False,
                            **extra)


def _estimator(session: LocalSession, tmp_path: Path, name: str) -> dict[str, Any]:
    (tmp_path / "est").mkdir()
    (tmp_path / "est" / "train.py").write_text("print('hi')\n")
    estimator = PyTorch(entry_point="train.py", source_dir=str(tmp_path / "est"),
                        instance_type="local", instance_count=2, session=session,
                        distribution={"torch_distributed": {"enabled": True}},
                        hyperparameters={"epochs": 3, "lr": 0.05},
                        checkpoint_s3_uri=f"s3://{LOCAL_BUCKET}/ckpt/{name}")
    return planner.plan(estimator.definition(None, name), session).request


def _requests(session: LocalSession, tmp_path: Path) -> dict[str, dict[str, Any]]:
    spot = {"EnableManagedSpotTraining": True, "CheckpointConfig": {
        "S3Uri": f"s3://{LOCAL_BUCKET}/ckpt/spot"},
        "StoppingCondition": {"MaxRuntimeInSeconds": 600, "MaxWaitTimeInSeconds": 900}}
    preferring = _plain(session, tmp_path, "preferring")
    resources = preferring["ResourceConfig"]
    del resources["InstanceType"], resources["InstanceCount"]
    resources["InstancePreferences"] = [{"InstanceType": "ml.p5.48xlarge", "InstanceCount": 2},
                                        {"InstanceType": "local", "InstanceCount": 2}]
    pooled = _plain(session, tmp_path, "pooled")
    pooled["ResourceConfig"]["KeepAlivePeriodInSeconds"] = 60
    container = _plain(session, tmp_path, "container", Environment={"WHO": "container"})
    container["AlgorithmSpecification"].update(ContainerEntrypoint=["/bin/true"])
    del container["HyperParameters"]
    dlc = _plain(session, tmp_path, "dlc")
    dlc["AlgorithmSpecification"]["TrainingImage"] = DLC_IMAGE
    dlc["ResourceConfig"].update(InstanceType="ml.m5.xlarge", InstanceCount=2)
    return {"estimator": _estimator(session, tmp_path, "estimator"), "spot": _plain(
        session, tmp_path, "spot", **spot), "pooled": pooled,
        "container": container, "dlc": dlc, "preferring": preferring}


def assert_admitted_once(session: LocalSession, request: dict[str, Any]) -> AdmittedJob:
    """Dry run, dry run of its answer, submit; the job as admitted, once the job is stopped."""
    sent = copy.deepcopy(request)
    checked = session.submit_dryrun(request)
    assert request == sent, "a dry run never changes the caller's request"
    assert session.submit_dryrun(copy.deepcopy(checked)) == checked
    job = session.submit(request)
    session.stop(job.name)
    assert wait_until_ended(session, job.name)["TrainingJobStatus"] in ("Stopped", "Completed")
    folder = session.job_dir(job.name)
    stored = json.loads((folder / "request.json").read_text())
    if "InstancePreferences" in checked["ResourceConfig"]:  # admission chose one on this machine
        assert "SelectedInstanceType" in stored["ResourceConfig"]
        stored["ResourceConfig"] = checked["ResourceConfig"]
    assert stored == checked
    return AdmittedJob.from_json(json.loads((folder / "job.json").read_text()))


def test_what_the_dry_run_accepts_submit_accepts_and_admits_once(
        session: LocalSession, tmp_path: Path) -> None:
    admitted = {kind: assert_admitted_once(session, request)
                for kind, request in _requests(session, tmp_path).items()}
    assert admitted["estimator"].hosts == ("algo-1", "algo-2")
    assert admitted["estimator"].checkpoint.s3_uri.endswith("/ckpt/estimator")
    assert admitted["spot"].spot and admitted["spot"].max_wait_s == 900
    assert admitted["spot"].pool_key is None  # SageMaker keeps no spot capacity warm
    assert (admitted["preferring"].instance_type, admitted["preferring"].hosts) == (
        "local", ("algo-1", "algo-2"))
    assert admitted["pooled"].keep_alive_s == 60 and admitted["pooled"].pool_key
    assert admitted["container"].host_kind == hostkind.CONTAINER.name
    assert admitted["container"].environment == {"WHO": "container"}
    assert admitted["dlc"].host_kind == hostkind.DLC.name
    assert admitted["dlc"].submit_directory.startswith("file://")
    assert_no_processes(session.home)


def test_an_admitted_job_reads_back_as_written(session: LocalSession, tmp_path: Path) -> None:
    request = session.submit_dryrun(_estimator(session, tmp_path, "again"))
    job = _admit(request)
    assert AdmittedJob.from_json(json.loads(json.dumps(job.to_json()))) == job
    with pytest.raises(ValueError, match="not an admitted job"):
        AdmittedJob.from_json({**job.to_json(), "extra": 1})


def _admit(request: dict[str, Any]) -> AdmittedJob:
    from ddpjob.local.control.admission import admit

    return admit(request)


def test_one_fit_checks_its_request_once(session: LocalSession, tmp_path: Path,
                                         monkeypatch: pytest.MonkeyPatch) -> None:
    """The estimator's plan is the dry run; `submit_checked` does not check it again (the
    control plane's own check counted, the real one run)."""
    from ddpjob.local.control import validation

    checks: list[str] = []
    real = validation.check_create
    monkeypatch.setattr(validation, "check_create", lambda request, *args: checks.append(
        request["TrainingJobName"]) or real(request, *args))
    (tmp_path / "train.py").write_text("print('hi')\n")
    estimator = PyTorch(entry_point="train.py", source_dir=str(tmp_path), instance_type="local",
                        session=session)
    estimator.fit(wait=False, job_name="checked-once")
    estimator.latest_training_job.stop()
    wait_until_ended(session, "checked-once")
    assert checks == ["checked-once"]
