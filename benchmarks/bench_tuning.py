"""A local tuning job against what a user would otherwise write: a loop of bare torchruns.

A no-op DDP script (join the process group, one barrier, print its objective) is run as
  1. a 10-trial Random tuning job of ddpjob's tuner on a LocalSession: 1 host x 2 workers per
     trial, MaxParallelTrainingJobs 2, keep-alive set (trials run on warm pools), timed from
     `fit()` to its return (every trial a full local job: staging, hosts, logs, metrics);
  2. the same script launched 10 times, one after another, with `torchrun --standalone
     --nproc_per_node=2 noop.py --level <value>`.
The two sides alternate, and which goes first swaps every repetition. Prints medians and the
ratio (goal: the tuning job <= 0.6x the ten torchruns)::

    python benchmarks/bench_tuning.py [--reps 2] [--trials 10]
"""

from __future__ import annotations

import argparse
import contextlib
import io
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from ddpjob import ContinuousParameter, HyperparameterTuner, LocalSession, PyTorch

NOOP = """\
import argparse
import ddpjob_runtime.dataparallel.torch.distributed as dist

parser = argparse.ArgumentParser()
parser.add_argument("--level", type=float, default=0.0)
args, _ = parser.parse_known_args()
dist.init_process_group()
dist.barrier()
if dist.get_rank() == 0:
    print(f"loss={(args.level - 3) ** 2:.6f}", flush=True)
dist.destroy_process_group()
"""


def run_tuning(home: Path, source: Path, trials: int, rep: int) -> float:
    session = LocalSession(home=home)
    estimator = PyTorch(
        entry_point="noop.py", source_dir=str(source), instance_type="local", session=session,
        distribution={"torch_distributed": {"enabled": True}, "processes_per_host": 2},
        keep_alive_period_in_seconds=60,
        metric_definitions=[{"Name": "loss", "Regex": r"loss=([0-9.]+)"}])
    tuner = HyperparameterTuner(estimator, "loss", {"level": ContinuousParameter(0, 6)},
                                objective_type="Minimize", strategy="Random", max_jobs=trials,
                                max_parallel_jobs=2, random_seed=rep)
    started = time.perf_counter()
    with contextlib.redirect_stdout(io.StringIO()):
        tuner.fit(job_name=f"bench-{rep}")
    elapsed = time.perf_counter() - started
    described = tuner.describe()
    assert described["ObjectiveStatusCounters"]["Succeeded"] == trials, described
    return elapsed


def run_torchruns(script: Path, trials: int) -> float:
    started = time.perf_counter()
    for i in range(trials):
        subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone",
                        "--nproc_per_node=2", str(script), "--level", str(i * 6 / trials)],
                       check=True, capture_output=True, cwd=script.parent)
    return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=2)
    parser.add_argument("--trials", type=int, default=10)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(ignore_cleanup_errors=True) as tmp:  # keepers may lag
        source = Path(tmp) / "src"
        source.mkdir()
        (source / "noop.py").write_text(NOOP)
        ours, theirs = [], []
        for rep in range(args.reps):
            sides = [lambda r=rep: ours.append(run_tuning(Path(tmp) / "home", source,
                                                          args.trials, r)),
                     lambda: theirs.append(run_torchruns(source / "noop.py", args.trials))]
            for side in sides if rep % 2 == 0 else reversed(sides):
                side()
        session = LocalSession(home=Path(tmp) / "home")
        for pool in session.warm_pools():  # no keeper outlives the benchmark's home
            session.stop_warm_pool(pool["Name"])
    tuning, loop = statistics.median(ours), statistics.median(theirs)
    print(f"{args.trials}-trial Random tuning job (2 at once, warm pools): {tuning:.2f} s "
          f"(runs {', '.join(f'{t:.2f}' for t in ours)})")
    print(f"{args.trials} bare torchruns one after another: {loop:.2f} s "
          f"(runs {', '.join(f'{t:.2f}' for t in theirs)})")
    print(f"ratio tuning / torchrun loop: {tuning / loop:.2f} (goal <= 0.6)")


if __name__ == "__main__":
    main()
