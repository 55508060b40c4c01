"""Checkpoint files with names S3 takes (URL escapes, a NUL escape, a newline, 246 characters,
a temp file's shape) in a real local job with a file:// CheckpointConfig: every one reaches the
checkpoint folder under its own name, the sibling run's checkpoint is untouched, model.tar.gz
is uploaded, and the next job restores each under its name."""

from __future__ import annotations

import hashlib
import json
import os
import re
import tarfile
from pathlib import Path

import pytest
from ddpjob.local.session import LocalSession

from tests.local.conftest import (
    JOBS,
    assert_no_processes,
    log_text,
    source_tar,
    training_request,
    wait_until_ended,
)

pytestmark = pytest.mark.slow

NAMES = ["%2E%2E%2Frun-2%2Fmodel.pt", "a%2Fb.txt", "%00nul.txt", "new\nline.txt", "x" * 246,
         ".notes.abcd1234.tmp"]  # as jobs/hostile_names.py writes them


def _run(session: LocalSession, tmp_path: Path, name: str, checkpoints: Path,
         report: str = "found") -> list[str]:
    """The job's Completed run; the names it found (`report`: or held) in its checkpoint
    folder at start."""
    source = source_tar(tmp_path / name, JOBS / "hostile_names.py")
    session.sagemaker_client.create_training_job(**training_request(
        session, name, source, "hostile_names.py", workers=1, distributed=False,
        CheckpointConfig={"S3Uri": checkpoints.as_uri()}))
    job = wait_until_ended(session, name)
    text = log_text(session, name, "algo-1")
    assert job["TrainingJobStatus"] == "Completed", (job.get("FailureReason"), text[-3000:])
    assert_no_processes(session.home)
    return json.loads(re.search(report + r" at start: (\[.*\])", text).group(1))


def test_every_checkpoint_name_s3_takes_is_kept_and_model_tar_gz_uploaded(
        session: LocalSession, tmp_path: Path) -> None:
    runs = tmp_path / "runs with space"
    (runs / "run-2").mkdir(parents=True)
    (runs / "run-2" / "model.pt").write_text("run-2's")
    assert _run(session, tmp_path, "names-1", runs / "run-1") == []
    assert sorted(p.name for p in (runs / "run-1").iterdir()) == sorted(NAMES)
    assert (runs / "run-2" / "model.pt").read_text() == "run-2's"
    model = session.home / "output" / "names-1" / "output" / "model.tar.gz"
    with tarfile.open(model) as tar:
        assert tar.getnames() == ["model.txt"]
    assert _run(session, tmp_path, "names-2", runs / "run-1") == sorted(NAMES)


def test_restoring_a_file_checkpoint_folder_reads_nothing_outside_it_nor_waits_on_a_pipe(
        session: LocalSession, tmp_path: Path) -> None:
    """A team's checkpoint folder holds another user's links out of it (a plain file's and a
    checkpoint's state, whose manifest matches the outside bytes) and a named pipe: the job
    Completes, and its checkpoint folder holds none of them, only what is inside."""
    secret, ckpt = tmp_path / "private.bin", tmp_path / "team" / "run"
    secret.write_bytes(b"root-only bytes")
    step = ckpt / "step-000000001"
    step.mkdir(parents=True)
    (step / "state.pt").symlink_to(secret)
    (step / "manifest.json").write_text(json.dumps({"step": 1, "files": {"state.pt": {
        "size": 15, "sha256": hashlib.sha256(b"root-only bytes").hexdigest()}}}))
    (ckpt / "leak.bin").symlink_to(secret)
    os.mkfifo(ckpt / "pipe")
    (ckpt / "notes.txt").write_text("ours")
    assert _run(session, tmp_path, "team-1", ckpt, report="held") == ["notes.txt"]
