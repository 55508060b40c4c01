"""2026's `ResourceConfig.InstancePreferences`: a local job runs on the first candidate this
machine can run, and its description says which (`SelectedInstanceType`/`Count`)."""

from __future__ import annotations

import copy
import logging
from pathlib import Path

import pytest
from ddpjob.errors import ControlPlaneError
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


def test_placement_without_preferences_is_accepted_and_said_to_have_no_effect(
        session: LocalSession, tmp_path: Path, caplog) -> None:
    request = training_request(session, "placed", "file:///nowhere.tar.gz", "hosts.py")
    request["ResourceConfig"]["InstancePlacementConfig"] = {"EnableMultipleJobs": True}
    with caplog.at_level(logging.WARNING):
        checked = session.sagemaker_client.control.checked_request(request)
    assert checked["ResourceConfig"]["InstancePlacementConfig"] == {"EnableMultipleJobs": True}
    assert "InstancePlacementConfig has no effect on this machine" in caplog.text


LOCAL_ONE = {"InstanceType": "local", "InstanceCount": 1}


@pytest.mark.parametrize(("change", "message"), [
    ({"EnableManagedSpotTraining": True}, r"InstancePreferences cannot be combined with "
                                          r"EnableManagedSpotTraining: give InstancePreferences"),
    ({"ResourceConfig": {"InstancePlacementConfig": {"EnableMultipleJobs": True}}},
     r"cannot be combined with ResourceConfig.InstancePlacementConfig"),
    ({"ResourceConfig": {"InstancePreferences": [LOCAL_ONE, {"InstanceType": "ml.m5.xlarge"}]}},
     r"set InstanceCount on every preference and not ResourceConfig.InstanceCount, or only "
     r"ResourceConfig.InstanceCount; got it on 1 of 2 preferences and not on ResourceConfig"),
    ({"ResourceConfig": {"InstancePreferences": [{"InstanceType": "local"}]}},
     r"got it on 0 of 1 preferences and not on ResourceConfig"),
    ({"ResourceConfig": {"InstanceCount": 1}}, r"got it on 1 of 1 preferences and also on"),
    ({"ResourceConfig": {"InstancePreferences": [
        LOCAL_ONE, {"InstanceType": "ml.b5fake.xlarge", "InstanceCount": 1}]}},
     r"ResourceConfig.InstancePreferences\[1\].InstanceType 'ml.b5fake.xlarge': must be one of "
     r"local, local_gpu, ml\.m4\.xlarge"),
], ids=["spot", "placement", "some-counts", "no-count", "both-counts", "unknown-type"])
def test_preferences_sagemaker_refuses_are_one_refusal(session: LocalSession, tmp_path: Path,
                                                       change: dict, message: str) -> None:
    """What botocore's model documents for InstancePreferences, refused before anything is
    written, with its boto3 error (no KeyError for a candidate without InstanceCount)."""
    request = _preferring(session, tmp_path, "refused", [LOCAL_ONE])
    for key, value in change.items():
        if key == "ResourceConfig":
            request[key].update(value)
        else:
            request[key] = value
    with pytest.raises(session.sagemaker_client.exceptions.ClientError, match=message):
        session.sagemaker_client.create_training_job(**request)
    with pytest.raises(ControlPlaneError, match=message):
        session.submit_dryrun(request)
    assert not session.list()


def test_an_unknown_instance_type_is_refused_as_sagemaker_refuses_it(
        session: LocalSession) -> None:
    request = training_request(session, "fake-type", "file:///nowhere.tar.gz", "hosts.py")
    request["ResourceConfig"]["InstanceType"] = "ml.b5fake.xlarge"
    with pytest.raises(ControlPlaneError, match=r"ResourceConfig.InstanceType 'ml.b5fake.xlarge'"
                                                r": must be one of local, local_gpu, ml"):
        session.submit_dryrun(request)


def test_a_job_count_and_a_dry_runs_answer_are_accepted_again_and_run(
        session: LocalSession, tmp_path: Path) -> None:
    """The dry run leaves the request as it was given (the choice is the job's, kept apart),
    so `submit`, which checks it again, accepts what `submit_dryrun` accepted."""
    request = _preferring(session, tmp_path, "dry-then-run",
                          [{"InstanceType": "ml.p5.48xlarge"}, {"InstanceType": "local"}])
    request["ResourceConfig"]["InstanceCount"] = 2  # one count for every preference
    given = copy.deepcopy(request)
    checked = session.submit_dryrun(request)
    assert request == given
    assert checked["ResourceConfig"] == given["ResourceConfig"]
    assert session.submit_dryrun(checked) == checked
    session.submit(checked)
    job = wait_until_ended(session, "dry-then-run")
    assert job["TrainingJobStatus"] == "Completed", job.get("FailureReason")
    resources = job["ResourceConfig"]
    assert (resources["SelectedInstanceType"], resources["SelectedInstanceCount"]) == ("local", 2)
    assert resources["InstancePreferences"] == given["ResourceConfig"]["InstancePreferences"]
    assert_no_processes(session.home)
