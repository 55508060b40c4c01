"""README command 1: examples/quickstart.py trains the example as a 2-host x 2-worker local job."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest
from ddpjob.local.isolation import sandbox
from ddpjob.local.session import LocalSession

from tests.local.conftest import EXAMPLE, JOB_TIMEOUT_S, assert_no_processes, log_text

QUICKSTART = EXAMPLE.parent / "quickstart.py"

pytestmark = pytest.mark.slow


def _members(uri: str) -> dict[str, bytes]:
    with tarfile.open(Path(uri.removeprefix("file://"))) as tar:
        return {m.name: tar.extractfile(m).read() for m in tar.getmembers() if m.isfile()}


def test_quickstart_trains_two_hosts_and_loads_the_checkpoint(tmp_path: Path) -> None:
    home = tmp_path / "home"
    run = subprocess.run(
        [sys.executable, str(QUICKSTART), "--epochs", "2", "--home", str(home)],
        capture_output=True, text=True, timeout=JOB_TIMEOUT_S,
    )  # fmt: skip
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    out = run.stdout
    name = re.search(r"Training job (\S+) completed", out).group(1)
    assert re.search(r"Checkpoint: step-000000002 from file://\S+: epoch 2, loss \d", out)
    assert "[algo-1 rank 0] epoch 1/2" in out and "[algo-2] " in out  # both hosts, prefixed

    # Another process (this one) finds the finished job on disk and describes it.
    session = LocalSession(home)
    job = session.describe(name).raw
    assert (job["TrainingJobStatus"], job["SecondaryStatus"]) == ("Completed", "Completed")
    statuses = [t["Status"] for t in job["SecondaryStatusTransitions"]]
    assert statuses[0] == "Starting" and statuses[-1] == "Completed"
    assert statuses.index("Training") < statuses.index("Uploading")  # forward only
    assert job["TrainingStartTime"] <= job["TrainingEndTime"]
    assert job["ResourceConfig"]["InstanceCount"] == 2
    assert f"Model:      {job['ModelArtifacts']['S3ModelArtifacts']}" in out

    # Outputs where SageMaker puts them: <output_path>/<job>/output/{model,output}.tar.gz.
    model_uri = job["ModelArtifacts"]["S3ModelArtifacts"]
    assert model_uri == f"{session.default_output_path()}/{name}/output/model.tar.gz"
    assert set(_members(model_uri)) == {"model.pt"}
    outputs = _members(model_uri.replace("model.tar.gz", "output.tar.gz"))
    metrics = json.loads(outputs["metrics.json"])
    assert metrics["workers"] == 4 and metrics["epochs"] == 2
    assert metrics["loss"] < 2.3  # below chance level (ln 10): the four workers learned

    # Logs kept per host; each host had its own root, one rendezvous port on loopback (names
    # resolved by the hosts' own /etc/hosts where they have a namespace, else given).
    assert "epoch 2/2" in log_text(session, name, "algo-1")
    assert "host algo-2 finished with exit code 0" in log_text(session, name, "algo-2")
    roots = [session.job_dir(name) / "hosts" / h for h in ("algo-1", "algo-2")]
    configs = [json.loads((r / "input/config/resourceconfig.json").read_text()) for r in roots]
    assert [c["current_host"] for c in configs] == ["algo-1", "algo-2"]
    platforms = [json.loads((r / "input/config/platform.json").read_text()) for r in roots]
    assert platforms[0]["master_port"] == platforms[1]["master_port"]
    assert platforms[1].get("host_addresses") == (
        None if sandbox.available() is None else {"algo-1": "127.0.0.1", "algo-2": "127.0.0.1"})
    assert platforms[0]["checkpoint_s3_uri"] == job["CheckpointConfig"]["S3Uri"]
    assert_no_processes(home)
