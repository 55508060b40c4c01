"""How fast a local job starts on a warm pool, and when its processes fork from a template.

1. The edit-run loop: a new estimator (`keep_alive_period_in_seconds`) on an edited no-op DDP
   script, `fit()` (1 host x 2 workers) on the warm pool the previous `fit()` left, against bare
   `torchrun --standalone --nproc_per_node=2` of the same script; the two alternate (which goes
   first swaps every repetition). Goal: ratio <= 0.3.
2. No-op `fit()` wall time for 1, 2, 4, 8 hosts x 2 workers: on a warm pool (workers from its
   spare interpreters), with a template of the job's own (cold, the default without
   keep-alive: hosts and agents forked, each worker its own interpreter) and without templates
   (`DDPJOB_PRELOAD=0`, every agent and worker imports torch itself), in rotating order.
3. The goal, 8 hosts <= 1.5x 1 host with templates: 1 and 8 hosts alternating, templates only.

    python benchmarks/bench_warm_start.py [--reps 3] [--hosts 1 2 4 8]
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
from pathlib import Path

from bench_fit_overhead import NOOP, run_fit, run_torchrun_standalone
from ddpjob import LocalSession

SWITCH = "DDPJOB_PRELOAD"  # ddpjob.local.base.templates.SWITCH_ENV, read by the supervisor
KEEP_ALIVE_S = 600
MODES = ("warm pool", "templates", "without")


def _fit(session: LocalSession, source: Path, hosts: int, mode: str, edit: int = 0) -> float:
    if edit:  # the user edited the script since the last run
        (source / "noop.py").write_text(f"{NOOP}# edit {edit}\n")
    os.environ[SWITCH] = "0" if mode == "without" else "1"
    keep = {"keep_alive_period_in_seconds": KEEP_ALIVE_S} if mode == "warm pool" else {}
    return run_fit(session, source, hosts=hosts, workers=2, **keep)


def edit_run_loop(session: LocalSession, source: Path, reps: int) -> None:
    _fit(session, source, 1, "warm pool"), run_torchrun_standalone(source / "noop.py", workers=2)
    times: dict[str, list[float]] = {"fit": [], "torchrun": []}
    for rep in range(reps):
        order = [("fit", lambda rep=rep: _fit(session, source, 1, "warm pool", edit=rep + 1)),
                 ("torchrun", lambda: run_torchrun_standalone(source / "noop.py", workers=2))]
        for label, run in order if rep % 2 == 0 else order[::-1]:
            times[label].append(run())
    fit, bare = statistics.median(times["fit"]), statistics.median(times["torchrun"])
    print(f"edit-run loop, 1 host x 2 workers, warm pool: fit() median {fit:.2f} s, torchrun "
          f"--standalone median {bare:.2f} s, ratio {fit / bare:.2f} (goal <= 0.3: "
          f"{'met' if fit / bare <= 0.3 else 'NOT met'})")
    print(f"    fit() runs:    {', '.join(f'{t:.2f}' for t in times['fit'])}")
    print(f"    torchrun runs: {', '.join(f'{t:.2f}' for t in times['torchrun'])}")


def host_scaling(session: LocalSession, source: Path, hosts: list[int], reps: int) -> None:
    medians: dict[tuple[int, str], float] = {}
    for count in hosts:
        _fit(session, source, count, "warm pool")  # leaves the pool the measured runs reuse
        runs: dict[str, list[float]] = {mode: [] for mode in MODES}
        for rep in range(reps):
            for mode in MODES[rep % 3:] + MODES[:rep % 3]:
                runs[mode].append(_fit(session, source, count, mode))
        for mode, times in runs.items():
            medians[count, mode] = statistics.median(times)
        print(f"{count} host(s) x 2 workers: " + "; ".join(
            f"{mode} {medians[count, mode]:.2f} s ({', '.join(f'{t:.2f}' for t in runs[mode])})"
            for mode in MODES))
    first, last = hosts[0], hosts[-1]
    for mode in MODES:
        print(f"{mode}: {last} hosts / {first} host = "
              f"{medians[last, mode] / medians[first, mode]:.2f}")


def templates_ratio(session: LocalSession, source: Path, first: int, last: int,
                    reps: int) -> None:
    """The goal's ratio as every ratio benchmark here measures one: the two sides alternate in
    one loop, so both meet the same machine (above, the 8-host runs follow 20-s runs without
    templates that slow whatever comes next, the 1-host runs do not)."""
    times: dict[int, list[float]] = {first: [], last: []}
    for rep in range(2 * reps):
        for count in (first, last) if rep % 2 == 0 else (last, first):
            times[count].append(_fit(session, source, count, "templates"))
    one, many = statistics.median(times[first]), statistics.median(times[last])
    print(f"templates, {first} and {last} host(s) alternating: medians {one:.2f} / {many:.2f} s, "
          f"{last} hosts / {first} host = {many / one:.2f} (goal <= 1.5: "
          f"{'met' if many / one <= 1.5 else 'NOT met'})")
    for count, runs in times.items():
        print(f"    {count} host(s): {', '.join(f'{t:.2f}' for t in runs)}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--hosts", type=int, nargs="+", default=[1, 2, 4, 8])
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="ddpjob-bench-") as tmp:
        source = Path(tmp, "src")
        source.mkdir()
        (source / "noop.py").write_text(NOOP)
        session = LocalSession(Path(tmp, "home"))
        os.environ.setdefault("OMP_NUM_THREADS", "1")  # as torchrun sets it for >1 worker
        print(f"{os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.2f} at the start, "
              f"{args.reps} repetitions each, no-op DDP script")
        edit_run_loop(session, source, args.reps)
        host_scaling(session, source, args.hosts, args.reps)
        templates_ratio(session, source, args.hosts[0], args.hosts[-1], args.reps)
        for pool in session.warm_pools():  # no keeper outlives the benchmark's home
            session.stop_warm_pool(pool["Name"])
        print(f"load average {os.getloadavg()[0]:.2f} at the end")


if __name__ == "__main__":
    main()
