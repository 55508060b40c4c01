"""A DLC job's requirements.txt: SageMaker's PyTorch toolkit installs it with the host's pip,
which is the host's own Python environment here, so nothing reaches the user's Python."""

from __future__ import annotations

import importlib.util
import json
import re
from pathlib import Path

import pytest
from ddpjob import packaging

from tests.conftest import FIXED_PORT
from tests.dlc.test_dlc_jobs import dlc_image, dlc_request, run_job
from tests.local.conftest import assert_no_processes, local_session_at
from tests.local.test_job_packages import PACKAGE, SCRIPT, _installed_here, make_wheel

pytestmark = [pytest.mark.slow, FIXED_PORT]


def test_a_dlc_jobs_requirements_stay_in_the_job(s3_bucket: str, tmp_path: Path,
                                                 dlc_python: str, monkeypatch) -> None:
    monkeypatch.setenv("DDPJOB_DLC_PYTHON", dlc_python)
    source = tmp_path / "code"
    source.mkdir()
    (source / "probe.py").write_text(SCRIPT.replace('os.environ["RANK"]', '"-"'))
    (source / "requirements.txt").write_text(f"--no-index\n{make_wheel(tmp_path)}\n")
    archive = tmp_path / packaging.ARCHIVE_NAME  # file:// code (the toolkit reads paths)
    packaging.pack(packaging.check_source("probe.py", source), archive, include_runtime=False)
    request = dlc_request("dlc-installs", s3_bucket, archive.as_uri(), dlc_image(), steps=1)
    request["ResourceConfig"]["InstanceCount"] = 1
    request["HyperParameters"]["sagemaker_program"] = json.dumps("probe.py")
    with local_session_at(tmp_path / "home") as session:
        job, lines = run_job(session.sagemaker_client, request)
        assert job["TrainingJobStatus"] == "Completed", (job.get("FailureReason"), lines[-30:])
        text = "\n".join(lines)  # the toolkit may split a printed line at its spaces
        found = re.findall(rf"\S*/{PACKAGE}\.py", text)
        assert found and all("/hosts/algo-1.python/lib/" in path for path in found), text[-3000:]
        assert not (session.home / "jobs" / "dlc-installs" / "hosts" / "algo-1.python").exists()
        assert_no_processes(session.home)
    assert importlib.util.find_spec(PACKAGE) is None and not _installed_here()
