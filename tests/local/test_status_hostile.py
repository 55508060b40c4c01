"""A rank that replaces its host's status file (in `hosts/`, which its namespace lets it write)
with a FIFO or a link: the supervisor reads it without waiting or following, and a stop still
ends the job and every process."""

from __future__ import annotations

from pathlib import Path

import pytest
from ddpjob.local.session import LocalSession

from tests.local.conftest import (
    JOB_TIMEOUT_S,
    assert_no_processes,
    source_tar,
    training_request,
    wait_for,
    wait_until_ended,
)

HOSTILE = '''import json, os, pathlib, time
root = pathlib.Path(os.environ.get("SAGEMAKER_BASE_DIR", "/opt/ml"))
status = pathlib.Path(json.loads((root / "input/config/platform.json").read_text())["status_file"])
status.unlink()
if os.environ["MAKE"] == "fifo":
    os.mkfifo(status)
else:
    status.symlink_to("/etc/passwd")
print("replaced", flush=True)
time.sleep(600)
'''


@pytest.mark.parametrize("make", ["fifo", "link"])
def test_a_status_file_a_rank_replaced_blocks_nothing_and_the_job_stops(
        session: LocalSession, tmp_path: Path, make: str) -> None:
    script = tmp_path / "hostile_status.py"
    script.write_text(HOSTILE)
    request = training_request(session, "status", source_tar(tmp_path / "src", script),
                               script.name, workers=1, distributed=False,
                               Environment={"MAKE": make})
    session.sagemaker_client.create_training_job(**request)
    log = session.job_dir("status") / "logs" / "algo-1.log"
    wait_for(lambda: log.is_file() and "replaced" in log.read_text(), JOB_TIMEOUT_S,
             "the rank to replace its status file")
    session.stop("status")
    assert wait_until_ended(session, "status")["TrainingJobStatus"] == "Stopped"
    assert_no_processes(session.home)
