"""Recovery from a spot interruption against the same job's cold start, same run.

Each repetition runs one local spot job (2 hosts x 1 worker) whose script, at the first
training step of every attempt, writes a mark file (the time, and whether it resumed) into
a folder of this benchmark. Three times are taken, interleaved job by job:
  1. cold start: `fit()` to the first training step of attempt 1 (nothing to restore)
  2. recovery: `session.interrupt(job)` (SIGTERM to every host, the job restarted on fresh
     hosts) to the first training step of attempt 2, which resumed from a checkpoint of
     `--checkpoint-mb` MB under `checkpoint_s3_uri`
  3. the restore's transfer: `checkpoints.restore_latest` of that checkpoint into an empty
     folder, timed in this process (what the platform does before the fresh hosts start)
Goal: recovery <= 1.2 x cold start + the restore's transfer, printed as
(recovery - transfer) / cold start <= 1.2. The script leaves at once on SIGTERM (no last save),
so the recovery holds no save of its own. Medians and every run are printed, and the parts of
each time from the job's SecondaryStatusTransitions (until Training, then to the first step)::

    python benchmarks/bench_interrupt.py [--reps 3] [--checkpoint-mb 100]
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

from ddpjob import LocalSession, PyTorch
from ddpjob_runtime.platform import checkpoint_restore

GOAL = 1.2
T = TypeVar("T")
#: What is printed, in order: each key's median and runs (a `:` key is part of the one before).
LINES = {
    "cold": "cold start, fit() to the first step",
    "cold:to_training": "  fit() to Training",
    "cold:first_step": "  Training to the first step",
    "recovery": "recovery, interrupt() to the first resumed step",
    "recovery:gone": "  interrupt() to the hosts gone (end of Interrupted)",
    "recovery:to_training": "  to Training (Restarting, Starting, Downloading)",
    "recovery:first_step": "  Training to the first resumed step",
    "recovery:load": "    of which the script's checkpoints.load_latest()",
    "transfer": "the restore's transfer of the checkpoint (alone)",
}
SCRIPT = """\
import argparse, json, os, signal, time
from pathlib import Path
import torch
import ddpjob_runtime.dataparallel.torch.distributed as dist
from ddpjob_runtime import checkpoints

parser = argparse.ArgumentParser()
parser.add_argument("--marks")
parser.add_argument("--checkpoint-mb", type=int)
args = parser.parse_args()
stopping = False


def on_sigterm(signum, frame):
    global stopping
    stopping = True


signal.signal(signal.SIGTERM, on_sigterm)
dist.init_process_group()
loading = time.perf_counter()
state = checkpoints.load_latest()
loaded_s = time.perf_counter() - loading
start = 0 if state is None else state["step"] + 1
weights = torch.zeros(args.checkpoint_mb << 18) if state is None else state["weights"]
for step in range(start, 1_000_000):
    flag = torch.tensor([float(stopping)])
    dist.all_reduce(flag, op=dist.ReduceOp.MAX)  # the step: a collective over both hosts
    if flag.item():
        break
    if step == start and dist.get_rank() == 0:
        mark = Path(args.marks, f"{os.getpid()}.json")
        tmp = mark.with_suffix(".tmp")
        tmp.write_text(json.dumps({"time": time.time(), "resumed": state is not None,
                                   "load_s": loaded_s}))
        tmp.rename(mark)  # whole or absent
        checkpoints.save({"weights": weights, "step": step}, step=step)
    time.sleep(0.05)
"""


def wait_for(session: LocalSession, job: str, what: str, probe: Callable[[], T | None],
             timeout_s: float = 300) -> T:
    """The first value of `probe` that is not None; an error when `job` ends or time is up."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        found = probe()
        if found is not None:
            return found
        description = session.describe(job)
        if description.is_terminal:
            raise RuntimeError(f"{job} ended {description.status} before {what}: "
                               f"{description.failure_reason}")
        time.sleep(0.02)
    raise TimeoutError(f"no {what} of {job} in {timeout_s} s")


def mark(marks: Path, resumed: bool) -> dict[str, float] | None:
    """The mark of attempt 1 (`resumed` False) or of a resumed attempt, if there is one yet:
    the time of its first step, the seconds its `load_latest()` took."""
    for path in marks.glob("*.json"):
        found = json.loads(path.read_text())
        if found["resumed"] == resumed:
            return found
    return None


def run_job(session: LocalSession, source: Path, marks: Path, checkpoint: str,
            megabytes: int) -> dict[str, float]:
    """One interrupted job, stopped after its resumed step: the seconds of its cold start and
    of its recovery, and of their parts (the keys of LINES but the transfer)."""
    estimator = PyTorch(
        entry_point="probe.py", source_dir=str(source), instance_count=2, instance_type="local",
        distribution={"torch_distributed": {"enabled": True}, "processes_per_host": 1},
        hyperparameters={"marks": str(marks), "checkpoint-mb": megabytes},
        use_spot_instances=True, max_run=600, max_wait=1200, checkpoint_s3_uri=checkpoint,
        session=session,
    )  # fmt: skip
    marks.mkdir()
    started = time.time()
    with contextlib.redirect_stdout(io.StringIO()):
        estimator.fit(wait=False)
    job = estimator.latest_training_job.name
    try:
        first_step = wait_for(session, job, "the first step", lambda: mark(marks, False))
        # The first checkpoint complete under checkpoint_s3_uri: the restart restores it.
        wait_for(session, job, "a checkpoint", lambda: estimator.checkpoints() or None)
        interrupted = time.time()
        session.interrupt(job)
        resumed = wait_for(session, job, "the resumed step", lambda: mark(marks, True))
    except Exception:
        print((session.job_dir(job) / "supervisor.log").read_text(), file=sys.stderr)
        raise
    finally:
        if not session.describe(job).is_terminal:
            session.stop(job)
        while not session.describe(job).is_terminal:
            time.sleep(0.1)
    transitions = session.describe(job).raw["SecondaryStatusTransitions"]
    gone = next(t["EndTime"] for t in transitions if t["Status"] == "Interrupted").timestamp()
    first, second = [t["StartTime"].timestamp() for t in transitions
                     if t["Status"] == "Training"][:2]
    return {"cold": first_step["time"] - started, "cold:to_training": first - started,
            "cold:first_step": first_step["time"] - first,
            "recovery": resumed["time"] - interrupted, "recovery:gone": gone - interrupted,
            "recovery:to_training": second - gone, "recovery:first_step": resumed["time"] - second,
            "recovery:load": resumed["load_s"]}


def time_restore(checkpoint: str, folder: Path) -> float:
    """Seconds to bring the latest checkpoint of `checkpoint` down into the empty `folder`."""
    started = time.perf_counter()
    if checkpoint_restore.restore_latest(checkpoint, folder) is None:
        raise RuntimeError(f"no complete checkpoint under {checkpoint}")
    return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--checkpoint-mb", type=int, default=100)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="ddpjob-bench-") as tmp:
        source = Path(tmp, "src")
        source.mkdir()
        (source / "probe.py").write_text(SCRIPT)
        session = LocalSession(Path(tmp, "home"))
        times: dict[str, list[float]] = {name: [] for name in LINES}
        print(f"{os.cpu_count()} CPUs, {args.reps} repetitions (after one warm-up), 2 hosts x 1 "
              f"worker, checkpoint {args.checkpoint_mb} MB under a file:// checkpoint_s3_uri")
        for rep in range(args.reps + 1):
            checkpoint = Path(tmp, "checkpoints", f"rep-{rep}").as_uri()
            found = run_job(session, source, Path(tmp, f"marks-{rep}"), checkpoint,
                            args.checkpoint_mb)
            found["transfer"] = time_restore(checkpoint, Path(tmp, f"restore-{rep}"))
            if rep:  # rep 0 warms the page cache and this process's imports
                for name in times:
                    times[name].append(found[name])
        report(times)


def report(times: dict[str, list[float]]) -> None:
    for name, label in LINES.items():
        print(f"{label:<58} median {statistics.median(times[name]):5.2f} s  "
              f"({', '.join(f'{v:.2f}' for v in times[name])})")
    cold, recovery, transfer = (statistics.median(times[n]) for n in ("cold", "recovery",
                                                                       "transfer"))
    ratio = (recovery - transfer) / cold
    print(f"recovery / cold start {recovery / cold:.2f}; (recovery - transfer) / cold start "
          f"{ratio:.2f} (goal <= {GOAL}: {'met' if ratio <= GOAL else 'NOT met'})")


if __name__ == "__main__":
    main()
