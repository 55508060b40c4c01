"""What a local `fit()` costs on top of launching the same script with bare torchrun, same run.

A no-op DDP script (join the process group, one barrier, exit) is run as
  1. `PyTorch(instance_count=1, processes_per_host=2).fit()`  vs  `torchrun --standalone
     --nproc_per_node=2 noop.py`                                              (goal ratio <= 1.25)
  2. `PyTorch(instance_count=2, processes_per_host=1).fit()`  vs  two `torchrun --nnodes=2
     --node_rank=i --nproc_per_node=1 noop.py` processes on loopback          (goal ratio <= 1.3)
`fit()` is timed from the call to its return (packing, request validation, supervisor, one
`ddpjob-train` per host, status polling, log streaming, the end); torchrun from start to exit.
The two sides alternate, and which goes first swaps every repetition, so drift of the machine
hits both alike. Prints medians and ratios::

    python benchmarks/bench_fit_overhead.py [--reps 5]
"""

from __future__ import annotations

import argparse
import contextlib
import io
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ddpjob import LocalSession, PyTorch

NOOP = """\
import ddpjob_runtime.dataparallel.torch.distributed as dist

dist.init_process_group()
dist.barrier()
print(f"rank {dist.get_rank()} of {dist.get_world_size()} done", flush=True)
"""


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def run_fit(session: LocalSession, source: Path, hosts: int, workers: int,
            **arguments: Any) -> float:
    estimator = PyTorch(
        entry_point="noop.py", source_dir=str(source), instance_count=hosts,
        instance_type="local", session=session,
        distribution={"torch_distributed": {"enabled": True}, "processes_per_host": workers},
        **arguments,
    )  # fmt: skip
    started = time.perf_counter()
    try:
        with contextlib.redirect_stdout(io.StringIO()):  # the streamed logs are part of the cost
            estimator.fit()
    except Exception:
        job_dir = session.job_dir(estimator.latest_training_job.name)
        print((job_dir / "supervisor.log").read_text(), file=sys.stderr)
        raise
    return time.perf_counter() - started


def _torchrun(args: list[str], script: Path) -> list[str]:
    return [sys.executable, "-m", "torch.distributed.run", *args, str(script)]


def run_torchrun_standalone(script: Path, workers: int) -> float:
    started = time.perf_counter()
    subprocess.run(_torchrun(["--standalone", f"--nproc_per_node={workers}"], script),
                   check=True, capture_output=True, cwd=script.parent)  # fmt: skip
    return time.perf_counter() - started


def run_torchrun_nodes(script: Path, hosts: int) -> float:
    port = free_port()
    started = time.perf_counter()
    procs = [
        subprocess.Popen(
            _torchrun([f"--nnodes={hosts}", f"--node_rank={rank}", "--nproc_per_node=1",
                       "--master_addr=127.0.0.1", f"--master_port={port}"], script),
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=script.parent,
        )  # fmt: skip
        for rank in range(hosts)
    ]
    codes = [proc.wait(timeout=300) for proc in procs]
    elapsed = time.perf_counter() - started
    if any(codes):
        raise RuntimeError(f"torchrun exited with {codes}")
    return elapsed


def compare(
    name: str, ours: Callable[[], float], baseline: Callable[[], float], reps: int, goal: float
) -> None:
    ours(), baseline()  # warm-up: page cache, first imports of botocore's model in this process
    times: dict[str, list[float]] = {"fit": [], "torchrun": []}
    for rep in range(reps):
        order = [("fit", ours), ("torchrun", baseline)]
        for label, run in order if rep % 2 == 0 else order[::-1]:
            times[label].append(run())
    fit, bare = statistics.median(times["fit"]), statistics.median(times["torchrun"])
    ratio = fit / bare
    print(f"{name}: fit() median {fit:.2f} s, torchrun median {bare:.2f} s, ratio {ratio:.2f} "
          f"(goal <= {goal}: {'met' if ratio <= goal else 'NOT met'})")
    print(f"    fit() runs:    {', '.join(f'{t:.2f}' for t in times['fit'])}")
    print(f"    torchrun runs: {', '.join(f'{t:.2f}' for t in times['torchrun'])}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=5)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="ddpjob-bench-") as tmp:
        source = Path(tmp, "src")
        source.mkdir()
        script = source / "noop.py"
        script.write_text(NOOP)
        session = LocalSession(Path(tmp, "home"))
        os.environ.setdefault("OMP_NUM_THREADS", "1")  # as torchrun sets it for >1 worker
        print(f"{os.cpu_count()} CPUs, {args.reps} repetitions each, no-op DDP script")
        compare(
            "1 host x 2 workers vs torchrun --standalone --nproc_per_node=2",
            lambda: run_fit(session, source, hosts=1, workers=2),
            lambda: run_torchrun_standalone(script, workers=2),
            args.reps, goal=1.25,
        )  # fmt: skip
        compare(
            "2 hosts x 1 worker vs two torchrun --nnodes=2",
            lambda: run_fit(session, source, hosts=2, workers=1),
            lambda: run_torchrun_nodes(script, hosts=2),
            args.reps, goal=1.3,
        )  # fmt: skip


if __name__ == "__main__":
    main()
