"""A v3 ModelTrainer 2x2 job on this machine against the same script under bare torchrun, same run.

`examples/modeltrainer/train.py` (DDP on 64 points, 20 epochs, a checkpoint per epoch) runs as
  1. `ModelTrainer(compute=Compute("ml.m5.xlarge", 2), distributed=Torchrun(
     process_count_per_node=2), sagemaker_session=LocalSession().official_session())
     .train(logs=True)`: the SDK uploads code and drivers, creates the job and follows it; each
     host runs ModelTrainer's drivers in its own /opt/ml, the checkpoints synced with the local
     bucket;
  2. two `torchrun --nnodes=2 --node_rank=i --nproc_per_node=2` processes on loopback, given the
     channel, model and checkpoint folders as SageMaker would.
`train()` is timed from the call to its return, which includes the SDK's own 5 s status polling;
the job alone is its description's CreationTime to TrainingEndTime. The two sides alternate, and
which goes first swaps every repetition. Run in a venv with the official SDK v3 and ddpjob, on a
machine whose hosts get their own mount namespace (root or unprivileged user namespaces)::

    .venv-sdk3/bin/python benchmarks/bench_modeltrainer.py [--reps 3]
"""

from __future__ import annotations

import argparse
import contextlib
import io
import logging
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from ddpjob import LocalSession
from ddpjob.local.isolation import sandbox

SOURCE = Path(__file__).parents[1] / "examples" / "modeltrainer"
EPOCHS = 20
RENDEZVOUS_PORT = 7777  # ModelTrainer's torchrun_driver


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def wait_for_rendezvous_port(timeout_s: float = 600) -> None:
    """Until no other job on this machine holds port 7777, where ModelTrainer's drivers start
    their torchrun rendezvous (one such job at a time)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        with socket.socket() as sock:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                sock.bind(("", RENDEZVOUS_PORT))
                return
            except OSError:
                time.sleep(1)
    sys.exit(f"port {RENDEZVOUS_PORT} stayed in use for {timeout_s:.0f} s")


def write_points(folder: Path) -> Path:
    """The channel: 64 points of y = 3x + 1."""
    folder.mkdir(parents=True)
    lines = [f"{x / 16 - 2:.4f},{3 * (x / 16 - 2) + 1:.4f}" for x in range(64)]
    (folder / "points.csv").write_text("\n".join(lines))
    return folder


class Trainer:
    """The ModelTrainer side: one job per call, each with a fresh checkpoint prefix."""

    def __init__(self, home: Path, data: Path):
        self.local = LocalSession(home)
        self.session = self.local.official_session()
        self.data = self.session.upload_data(str(data), key_prefix="bench/data")
        self.runs = 0

    def __call__(self) -> tuple[float, float]:
        """(train()'s wall time, the job's own time from creation to its end)."""
        from sagemaker.core import image_uris
        from sagemaker.train import ModelTrainer
        from sagemaker.train.configs import CheckpointConfig, Compute, InputData, SourceCode
        from sagemaker.train.distributed import Torchrun

        self.runs += 1
        bucket = self.session.default_bucket()
        trainer = ModelTrainer(
            training_image=image_uris.retrieve(
                "pytorch", region=self.session.boto_region_name, version="2.5",
                py_version="py311", instance_type="ml.m5.xlarge", image_scope="training"),
            source_code=SourceCode(source_dir=str(SOURCE), entry_script="train.py"),
            compute=Compute(instance_type="ml.m5.xlarge", instance_count=2),
            distributed=Torchrun(process_count_per_node=2),
            hyperparameters={"epochs": EPOCHS},
            checkpoint_config=CheckpointConfig(s3_uri=f"s3://{bucket}/bench/ckpt-{self.runs}"),
            base_job_name="bench-modeltrainer", sagemaker_session=self.session,
        )  # fmt: skip
        wait_for_rendezvous_port()
        started = time.perf_counter()
        try:
            with contextlib.redirect_stdout(io.StringIO()):  # the SDK's progress panel
                trainer.train(input_data_config=[
                    InputData(channel_name="training", data_source=self.data)], logs=True)
        except Exception:
            print(self.local.job_dir(self.latest()["TrainingJobName"]).joinpath(
                "logs", "algo-1.log").read_text()[-3000:], file=sys.stderr)
            raise
        elapsed = time.perf_counter() - started
        job = self.latest()
        return elapsed, (job["TrainingEndTime"] - job["CreationTime"]).total_seconds()

    def latest(self) -> dict:
        """The description of the latest job."""
        client = self.session.sagemaker_client
        found = client.list_training_jobs(NameContains="bench-modeltrainer", SortBy="CreationTime",
                                          SortOrder="Descending")["TrainingJobSummaries"][0]
        return client.describe_training_job(TrainingJobName=found["TrainingJobName"])


def run_torchrun(data: Path, work: Path) -> float:
    """Both hosts under bare torchrun, 2 processes each, on loopback."""
    port, env = free_port(), {**os.environ, "SM_CHANNEL_TRAINING": str(data)}
    folders = [Path(tempfile.mkdtemp(dir=work)) for _ in range(2)]
    started = time.perf_counter()
    procs = [
        subprocess.Popen(
            [sys.executable, "-m", "torch.distributed.run", "--nnodes=2", f"--node_rank={rank}",
             "--nproc_per_node=2", "--master_addr=127.0.0.1", f"--master_port={port}",
             str(SOURCE / "train.py"), "--epochs", str(EPOCHS),
             "--checkpoint-dir", str(folder / "checkpoints")],
            env={**env, "SM_MODEL_DIR": str(folder)}, stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )  # fmt: skip
        for rank, folder in enumerate(folders)
    ]
    codes = [proc.wait(timeout=300) for proc in procs]
    elapsed = time.perf_counter() - started
    if any(codes):
        raise RuntimeError(f"torchrun exited with {codes}")
    return elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=3)
    args = parser.parse_args()
    if (reason := sandbox.available()) is not None:
        sys.exit(f"ModelTrainer's drivers need each local host in its own /opt/ml: {reason}")
    # The SDK prints the job's logs at INFO: formatted, as a notebook shows them, then dropped.
    logging.basicConfig(level=logging.INFO, format="%(message)s", stream=io.StringIO())
    os.environ.setdefault("OMP_NUM_THREADS", "1")  # as torchrun sets it for >1 worker
    with tempfile.TemporaryDirectory(prefix="ddpjob-bench-") as tmp:
        work = Path(tmp)
        data = write_points(work / "data")
        trainer = Trainer(work / "home", data)
        trainer(), run_torchrun(data, work)  # warm-up: page cache, the SDK's first imports
        times: dict[str, list[float]] = {"train": [], "job": [], "torchrun": []}
        for rep in range(args.reps):
            for side in ("modeltrainer", "torchrun") if rep % 2 == 0 else ("torchrun",
                                                                          "modeltrainer"):
                if side == "torchrun":
                    times["torchrun"].append(run_torchrun(data, work))
                else:
                    train, job = trainer()
                    times["train"].append(train)
                    times["job"].append(job)
    bare = statistics.median(times["torchrun"])
    print(f"{os.cpu_count()} CPUs, {args.reps} repetitions each, 2 hosts x 2 processes, "
          f"{EPOCHS} epochs")
    for label, what in (("train", "ModelTrainer.train()"), ("job", "the job alone")):
        ours = statistics.median(times[label])
        print(f"{what}: median {ours:.2f} s, torchrun median {bare:.2f} s, ratio "
              f"{ours / bare:.2f}   (runs: {', '.join(f'{t:.2f}' for t in times[label])})")
    print(f"torchrun runs: {', '.join(f'{t:.2f}' for t in times['torchrun'])}")


if __name__ == "__main__":
    main()
