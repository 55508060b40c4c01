"""2026's `ResourceConfig.InstancePreferences`: a local job runs on the first candidate this
machine can run, and its description says which (`SelectedInstanceType`/`Count`)."""

from __future__ import annotations

import copy
import logging
from pathlib import Path

import pytest
from ddpjob.local.session import LocalSession

from tests.local.conftest import assert_no_processes, source_tar, training_request, wait_until_ended

SCRIPT = "import os\nprint('hosts', os.environ['SM_HOSTS'], flush=True)\n"


def _preferring(session: LocalSession, tmp_path: Path, name: str,
                candidates: list[dict]) -> dict:
    """A plain script, one process per host (no torchrun): which hosts run is the subject."""
    script = tmp_path / "hosts.py"
    script.write_text(SCRIPT)
    request = training_request(session, name, source_tar(tmp_path / "src", script), "hosts.py",
                               workers=1, distributed=False)
    resources = request["ResourceConfig"]
    del resources["InstanceType"], resources["InstanceCount"]
    resources["InstancePreferences"] = candidates
    return request


def test_the_first_candidate_this_machine_runs_is_selected_and_described(
        session: LocalSession, tmp_path: Path) -> None:
    candidates = [{"InstanceType": "ml.p5.48xlarge", "InstanceCount": 2},  # ddpjob's image: no
                  {"InstanceType": "local", "InstanceCount": 100_000},     # too many hosts
                  {"InstanceType": "local", "InstanceCount": 2},
                  {"InstanceType": "local", "InstanceCount": 1}]
    request = _preferring(session, tmp_path, "preferring", candidates)
    session.sagemaker_client.create_training_job(**copy.deepcopy(request))
    job = wait_until_ended(session, "preferring")
    assert job["TrainingJobStatus"] == "Completed", job.get("FailureReason")
    resources = job["ResourceConfig"]
    assert (resources["SelectedInstanceType"], resources["SelectedInstanceCount"]) == ("local", 2)
    assert resources["InstancePreferences"] == candidates
    log = (session.home / "jobs" / "preferring" / "logs" / "algo-2.log").read_text()
    line = next(line for line in log.splitlines() if "hosts [" in line)
    assert '"algo-1"' in line and '"algo-2"' in line  # two hosts ran
    assert_no_processes(session.home)


def test_no_candidate_that_runs_is_one_refusal_naming_each(session: LocalSession,
                                                           tmp_path: Path) -> None:
    request = _preferring(session, tmp_path, "none-run",
                          [{"InstanceType": "ml.p5.48xlarge", "InstanceCount": 1},
                           {"InstanceType": "local", "InstanceCount": 100_000}])
    with pytest.raises(session.sagemaker_client.exceptions.ClientError,
                       match=r"InstancePreferences: no candidate can run on this machine; \[0\] "
                             r"ml.p5.48xlarge x 1: .*; \[1\] local x 100000: .*at most"):
        session.sagemaker_client.create_training_job(**request)
    both = _preferring(session, tmp_path, "both", [{"InstanceType": "local", "InstanceCount": 1}])
    both["ResourceConfig"]["InstanceType"] = "local"
    with pytest.raises(session.sagemaker_client.exceptions.ClientError, match="not both"):
        session.sagemaker_client.create_training_job(**both)
    six = _preferring(session, tmp_path, "six", [{"InstanceType": "local", "InstanceCount": 1}] * 6)
    with pytest.raises(session.sagemaker_client.exceptions.ClientError,
                       match="InstancePreferences: 6 items"):
        session.sagemaker_client.create_training_job(**six)
    assert not session.list()


def test_placement_is_accepted_and_said_to_have_no_effect(session: LocalSession, tmp_path: Path,
                                                          caplog) -> None:
    request = _preferring(session, tmp_path, "placed",
                          [{"InstanceType": "local", "InstanceCount": 1}])
    request["ResourceConfig"]["InstancePlacementConfig"] = {"EnableMultipleJobs": True}
    with caplog.at_level(logging.WARNING):
        checked = session.sagemaker_client.control.checked_request(request)
    assert checked["ResourceConfig"]["InstancePlacementConfig"] == {"EnableMultipleJobs": True}
    assert "InstancePlacementConfig has no effect on this machine" in caplog.text
