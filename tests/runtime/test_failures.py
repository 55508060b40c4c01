"""Failure paths of `ddpjob-train`: right exit code, clear output/failure, no process left.

(`run_hosts` itself fails a test when any process of the job survives it.)
"""

from __future__ import annotations

import io
import json
import signal
import tarfile
import time
from pathlib import Path

import pytest

from tests.runtime.conftest import write_job


@pytest.mark.slow
def test_failing_ranks_pass_their_own_exit_codes_through(run_hosts) -> None:
    script = """
    import os, sys
    rank = int(os.environ["RANK"])
    if rank == 1:
        sys.exit(3)
    if rank == 3:
        raise ValueError(f"bad batch on rank {rank}")
    """
    algo1, algo2 = run_hosts(script)
    assert algo1.exit_code == 3, algo1.log[-3000:]
    assert algo1.failure.startswith("host algo-1, rank 1, exit code 3: SystemExit: 3")
    assert algo2.exit_code == 1, algo2.log[-3000:]
    head = algo2.failure[:1024]
    assert head.startswith("host algo-2, rank 3, exit code 1: ValueError: bad batch on rank 3")
    assert 'File "' in algo2.failure and "train.py" in algo2.failure  # the traceback follows


def test_missing_entry_point(run_hosts) -> None:
    (result,) = run_hosts("print('hi')", entry_point="nope.py", hosts=1)
    assert result.exit_code == 1
    assert result.failure.startswith("host algo-1, exit code 1: entry point 'nope.py' not found")
    assert "train.py" in result.failure  # says what the source does hold


def test_malformed_config_file(tmp_path: Path) -> None:
    job = write_job(tmp_path, "print('hi')", hosts=1)
    (job.roots[0] / "input/config/hyperparameters.json").write_text('{"lr": ')
    job.start()
    (result,) = job.wait()
    assert result.exit_code == 1
    assert "hyperparameters.json: not valid JSON" in result.failure
    assert result.failure.startswith("host algo-1, exit code 1:")


def test_unsafe_source_archive(tmp_path: Path) -> None:
    job = write_job(tmp_path, "print('hi')", hosts=1)
    with tarfile.open(tmp_path / "sourcedir.tar.gz", "w:gz") as tar:
        link = tarfile.TarInfo("escape")
        link.type, link.linkname = tarfile.SYMTYPE, "../../../../etc"
        tar.addfile(link)
        tar.addfile(tarfile.TarInfo("train.py"), io.BytesIO(b""))
    job.start()
    (result,) = job.wait()
    assert result.exit_code == 1
    assert "source archive member 'escape' refused: link to" in result.failure
    assert not (job.roots[0] / "code" / "escape").exists()


def test_failing_requirements(run_hosts) -> None:
    source = {
        "train.py": "print('hi')",
        "requirements.txt": "--no-index\nddpjob-no-such-package==1.0\n",
    }
    (result,) = run_hosts(source, hosts=1)
    assert result.exit_code == 1
    assert "pip install -r requirements.txt failed" in result.failure[:1024]
    assert "ddpjob-no-such-package" in result.failure[:1024]


def test_mpi_without_mpirun(run_hosts) -> None:
    (result,) = run_hosts(
        "print('hi')",
        hosts=1,
        distribution="mpi",
        env={"PATH": str(Path(__import__("sys").executable).parent)},
    )
    assert result.exit_code == 1
    assert "mpirun, which is not installed" in result.failure
    assert "torch_distributed" in result.failure


@pytest.mark.slow
def test_sigterm_to_the_bootstrap_stops_every_worker(tmp_path: Path) -> None:
    script = """
    import os, pathlib, time
    pathlib.Path(os.environ["SM_MODEL_DIR"], "started-" + os.environ["RANK"]).touch()
    time.sleep(600)
    """
    job = write_job(tmp_path, script, hosts=1, processes_per_host=2)
    job.start()
    model = job.roots[0] / "model"
    deadline = time.monotonic() + 90
    while len(list(model.glob("started-*"))) < 2 and job.procs[0].poll() is None:
        assert time.monotonic() < deadline, "workers did not start"
        time.sleep(0.1)
    job.procs[0].send_signal(signal.SIGTERM)
    (result,) = job.wait(timeout=60)  # also asserts that no process of the job is left
    assert result.exit_code == 128 + signal.SIGTERM, result.log[-3000:]
    assert result.failure.startswith("host algo-1, exit code 143: stopped by SIGTERM")
    assert json.loads((tmp_path / "algo-1.status").read_text())["phase"] == "Training"
