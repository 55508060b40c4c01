"""`JobDescription.status` is a `TrainingJobStatus` that still reads and compares as its text."""

import datetime as dt

from ddpjob.job_status import TERMINAL_STATUSES, JobDescription, TrainingJobStatus


def _described(status: str) -> JobDescription:
    return JobDescription.from_response({"TrainingJobName": "j", "TrainingJobStatus": status,
                                         "CreationTime": dt.datetime(2026, 11, 26)})


def test_status_is_the_enum_and_reads_as_its_value():
    job = _described("Failed")
    assert job.status is TrainingJobStatus.FAILED
    assert job.status == "Failed" and f"{job.status}" == "Failed" and str(job.status) == "Failed"
    assert job.is_terminal


def test_every_value_of_the_service_model_is_a_member():
    from botocore.session import get_session

    model = get_session().get_service_model("sagemaker")
    assert {s.value for s in TrainingJobStatus} == set(model.shape_for("TrainingJobStatus").enum)


def test_a_status_a_newer_service_answers_is_kept_not_refused():
    job = _described("Archived")
    assert job.status == "Archived" and str(job.status) == "Archived"
    assert not job.is_terminal and job.status not in TERMINAL_STATUSES
