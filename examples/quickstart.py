"""The README's main job: a 2-host x 2-worker DDP job on this machine, then its checkpoint.

    python examples/quickstart.py [--epochs 3] [--home DIR]

No Docker and no cloud account: `instance_type="local"` runs each of the two hosts as its own
`ddpjob-train` process tree (torchrun, two CPU workers each, gloo) under `~/.ddpjob` (or
$DDPJOB_HOME). The same estimator with `instance_type="ml.g5.12xlarge"`, an `image_uri` and a
`Session()` runs on SageMaker.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import torch
from ddpjob import LocalSession, PyTorch

HERE = Path(__file__).resolve().parent


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--home", help="where local jobs live (default: $DDPJOB_HOME or ~/.ddpjob)")
    args = parser.parse_args()

    session = LocalSession(args.home)
    run = time.strftime("%Y%m%d-%H%M%S")
    estimator = PyTorch(
        entry_point="train.py",
        source_dir=str(HERE / "mnist_cnn"),
        instance_count=2,
        instance_type="local",
        distribution={"torch_distributed": {"enabled": True}, "processes_per_host": 2},
        hyperparameters={"epochs": args.epochs, "lr": 0.05, "batch-size": 32},
        checkpoint_s3_uri=(session.home / "checkpoints" / f"mnist-{run}").as_uri(),
        base_job_name="mnist-cnn",
        session=session,
    )
    started = time.perf_counter()
    estimator.fit()  # streams every host's log lines, prefixed [algo-1] / [algo-2]
    job = estimator.latest_training_job.name
    print(f"\nTraining job {job} completed in {time.perf_counter() - started:.1f} s")
    print(f"Model:      {estimator.model_data}")
    print(f"Host logs:  {session.job_dir(job) / 'logs'}/algo-{{1,2}}.log")

    with tempfile.TemporaryDirectory(prefix="ddpjob-quickstart-") as tmp:
        folder = estimator.download_checkpoint(tmp)  # the latest complete rank-0 checkpoint
        state = torch.load(folder / "state.pt", weights_only=True)
        print(f"Checkpoint: {folder.name} from {estimator.checkpoint_s3_uri}: epoch "
              f"{state['epoch'] + 1}, loss {state['loss']:.4f}, "
              f"{sum(t.numel() for t in state['model'].values())} parameters")


if __name__ == "__main__":
    main()
