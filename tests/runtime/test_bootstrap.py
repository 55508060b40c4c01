"""`ddpjob-train` end to end on simulated hosts: real torchrun, real worker processes."""

from __future__ import annotations

import json
import tarfile
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow  # runs ddpjob-train end to end

# Each rank dumps its environment and argv into model/ (its host's own root).
DUMP_ENV = """
import json, os, pathlib, sys
rank = os.environ.get("RANK", "single")
data = sorted(p.name for p in pathlib.Path(os.environ["SM_CHANNEL_TRAINING"]).iterdir())
state = {"env": dict(os.environ), "argv": sys.argv, "cwd": os.getcwd(), "data": data}
pathlib.Path(os.environ["SM_MODEL_DIR"], f"rank-{rank}.json").write_text(json.dumps(state))
pathlib.Path(os.environ["SM_OUTPUT_DATA_DIR"], f"out-{rank}.txt").write_text("done")
"""


@pytest.mark.slow
def test_two_hosts_two_workers_get_the_contract_environment(run_hosts, tmp_path: Path) -> None:
    data = tmp_path / "data"
    data.mkdir()
    (data / "part-0.csv").write_text("1,2\n")
    output = tmp_path / "output"
    results = run_hosts(
        DUMP_ENV,
        hyperparameters={"lr": 0.01, "backend": "gloo", "epochs": 2},
        channels={"training": data.as_uri()},
        platform={"output_path": output.as_uri()},
    )
    for result in results:
        assert result.exit_code == 0, result.log[-3000:]
        assert result.failure is None
    ranks = {}
    for host_index, result in enumerate(results):
        for local_rank in range(2):
            rank = host_index * 2 + local_rank
            state = json.loads((result.root / "model" / f"rank-{rank}.json").read_text())
            ranks[rank] = env = state["env"]
            assert (env["RANK"], env["LOCAL_RANK"]) == (str(rank), str(local_rank))
            assert (env["WORLD_SIZE"], env["LOCAL_WORLD_SIZE"]) == ("4", "2")
            assert env["MASTER_ADDR"] == "127.0.0.1"
            # The script's arguments: user hyperparameters only, sorted, like the toolkit.
            assert state["argv"][1:] == ["--backend", "gloo", "--epochs", "2", "--lr", "0.01"]
            assert state["cwd"] == str(result.root / "code")
            assert state["data"] == ["part-0.csv"]  # the channel was staged before the start
            assert env["SM_CURRENT_HOST"] == result.host
            assert env["SM_HOSTS"] == '["algo-1","algo-2"]'
            assert env["SM_NUM_GPUS"] == "0"
            assert env["SM_HPS"] == '{"backend":"gloo","epochs":2,"lr":0.01}'
            assert (env["SM_HP_LR"], env["SM_HP_BACKEND"]) == ("0.01", "gloo")
            assert env["SM_USER_ARGS"] == '["--backend","gloo","--epochs","2","--lr","0.01"]'
            assert env["SM_CHANNELS"] == '["training"]'
            assert env["SM_CHANNEL_TRAINING"] == str(result.root / "input/data/training")
            assert env["SM_MODEL_DIR"] == str(result.root / "model")
            assert env["SM_USER_ENTRY_POINT"] == "train.py" and env["SM_MODULE_NAME"] == "train"
            assert json.loads(env["SM_FRAMEWORK_PARAMS"]) == {
                "ddpjob_processes_per_host": 2,
                "sagemaker_torch_distributed_enabled": True,
            }
            training_env = json.loads(env["SM_TRAINING_ENV"])
            assert training_env["hyperparameters"] == {"backend": "gloo", "epochs": 2, "lr": 0.01}
            assert training_env["is_master"] is (result.host == "algo-1")
            assert training_env["job_name"] == "test-job"
            assert env["DDPJOB_CHECKPOINT_DIR"] == str(result.root / "checkpoints")
    assert sorted(ranks) == [0, 1, 2, 3]
    # algo-1 uploaded model/ and output/data/ as SageMaker does; the phases were reported.
    uploaded = output / "test-job" / "output"
    with tarfile.open(uploaded / "model.tar.gz") as tar:
        assert sorted(tar.getnames()) == ["rank-0.json", "rank-1.json"]
    with tarfile.open(uploaded / "output.tar.gz") as tar:
        assert sorted(tar.getnames()) == ["out-0.txt", "out-1.txt"]
    job = tmp_path / "job"
    assert json.loads((job / "algo-1.status").read_text())["phase"] == "Uploading"
    assert json.loads((job / "algo-2.status").read_text())["phase"] == "Training"


def test_without_distribution_the_entry_point_runs_once_per_host(run_hosts) -> None:
    """With the rendezvous SageMaker's PyTorch container gives every job (MASTER_ADDR, the
    first host; MASTER_PORT), and no RANK or WORLD_SIZE, as there."""
    script = """#!/bin/sh
    echo "$SM_CURRENT_HOST $*" > "$SM_MODEL_DIR/ran-by-shell"
    echo "$MASTER_ADDR:$MASTER_PORT rank=${RANK-unset} world=${WORLD_SIZE-unset}" \
        > "$SM_MODEL_DIR/rendezvous"
    """
    (result,) = run_hosts(
        {"run.sh": script},
        entry_point="run.sh",
        distribution=None,
        hosts=1,
        hyperparameters={"x": "a b"},
    )
    assert result.exit_code == 0, result.log[-3000:]
    assert (result.root / "model" / "ran-by-shell").read_text() == "algo-1 -x a b\n"
    port = json.loads((result.root / "input" / "config" / "platform.json").read_text())[
        "master_port"]
    assert (result.root / "model" / "rendezvous").read_text() == (
        f"127.0.0.1:{port} rank=unset world=unset\n")


def test_source_from_s3_and_checkpoints_restored_and_flushed(run_hosts, s3_bucket, tmp_path):
    """s3:// source through storage; the checkpoint saved by one run is restored for the next."""
    script = """
    import json, os, pathlib
    from ddpjob_runtime import checkpoints
    previous = checkpoints.load_latest()
    step = 0 if previous is None else previous["step"] + 1
    checkpoints.save({"step": step}, step=step)  # flushed by the runtime after the script
    pathlib.Path(os.environ["SM_MODEL_DIR"], "step").write_text(str(step))
    """
    import boto3
    from ddpjob_runtime.shared import storage

    from tests.runtime.conftest import make_sourcedir

    archive = make_sourcedir(script, tmp_path / "src.tar.gz")
    boto3.client("s3").upload_file(str(archive), s3_bucket, "code/sourcedir.tar.gz")
    ckpt = f"s3://{s3_bucket}/ckpt/run-1"
    options = dict(
        hosts=1,
        distribution=None,
        platform={"checkpoint_s3_uri": ckpt},
        hyperparameters={"sagemaker_submit_directory": f"s3://{s3_bucket}/code/sourcedir.tar.gz"},
    )
    for expected_step in (0, 1):
        (result,) = run_hosts(None, **options)
        assert result.exit_code == 0, result.log[-3000:]
        assert (result.root / "model" / "step").read_text() == str(expected_step)
        names = [o.key for o in storage.list_objects(ckpt + "/")]
        assert any(name.endswith("manifest.json") for name in names), names


def test_a_process_group_left_open_is_destroyed_before_teardown(run_hosts) -> None:
    """Scripts written for smdistributed never destroy their process group; the worker does it
    after a successful run, before interpreter teardown (where gloo can abort a rank)."""
    script = """
    import atexit, os, pathlib
    import torch.distributed
    import ddpjob_runtime.dataparallel.torch.distributed as dist

    dist.init_process_group()
    dist.barrier()
    marker = pathlib.Path(os.environ["SM_MODEL_DIR"], f"open-at-exit-{dist.get_rank()}")
    atexit.register(lambda: marker.write_text(str(torch.distributed.is_initialized())))
    """
    (result,) = run_hosts(script, hosts=1, processes_per_host=2)
    assert result.exit_code == 0, result.log[-3000:]
    for rank in (0, 1):
        assert (result.root / "model" / f"open-at-exit-{rank}").read_text() == "False"


def test_native_teardown_cannot_fail_a_rank_that_succeeded(run_hosts) -> None:
    """torch's C++ teardown at exit sometimes aborted a finished rank (SIGABRT, "terminate
    called without an active exception") and failed the job. Stand-in, deterministic: a native
    exit handler that aborts. The worker leaves after the user's atexit handlers, before it."""
    script = """
    import atexit, ctypes, os, pathlib
    libc = ctypes.CDLL("libc.so.6")
    libc.__cxa_atexit(ctypes.cast(libc.abort, ctypes.c_void_p), None, None)
    marker = pathlib.Path(os.environ["SM_MODEL_DIR"], "user-atexit-" + os.environ["RANK"])
    atexit.register(marker.touch)
    """
    (result,) = run_hosts(script, hosts=1, processes_per_host=2)
    assert result.exit_code == 0, result.log[-3000:]
    assert sorted(p.name for p in (result.root / "model").iterdir()) == [
        "user-atexit-0", "user-atexit-1"]
