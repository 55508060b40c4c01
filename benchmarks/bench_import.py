"""How long `import ddpjob` takes against `import boto3`, each in a fresh interpreter, same run.

The client must stay light (it never imports torch). Runs alternate between the commands, and
the order swaps every repetition. Prints medians and the ratio (goal: `import ddpjob` <= 1.5x
`import boto3`); also shows `from ddpjob import PyTorch, LocalSession` (what a notebook does
first) and a bare interpreter for reference::

    python benchmarks/bench_import.py [--reps 15]
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time

COMMANDS = {
    "python -c pass": "pass",
    "import boto3": "import boto3",
    "import ddpjob": "import ddpjob",
    "from ddpjob import PyTorch, LocalSession": "from ddpjob import PyTorch, LocalSession",
}
TORCH_CHECK = (
    "import sys, ddpjob; ddpjob.PyTorch, ddpjob.LocalSession; print('torch' in sys.modules)"
)


def timed(code: str) -> float:
    started = time.perf_counter()
    subprocess.run([sys.executable, "-c", code], check=True)
    return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=15)
    args = parser.parse_args()
    for code in COMMANDS.values():
        timed(code)  # warm the page cache and the .pyc files
    times: dict[str, list[float]] = {name: [] for name in COMMANDS}
    for rep in range(args.reps):
        names = list(COMMANDS) if rep % 2 == 0 else list(COMMANDS)[::-1]
        for name in names:
            times[name].append(timed(COMMANDS[name]))
    medians = {name: statistics.median(values) for name, values in times.items()}
    for name, value in medians.items():
        print(f"{name:45s} median {value * 1000:7.1f} ms over {args.reps} runs")
    ratio = medians["import ddpjob"] / medians["import boto3"]
    print(f"import ddpjob / import boto3 = {ratio:.2f} (goal <= 1.5: "
          f"{'met' if ratio <= 1.5 else 'NOT met'})")
    full = medians["from ddpjob import PyTorch, LocalSession"] / medians["import boto3"]
    print(f"from ddpjob import PyTorch, LocalSession / import boto3 = {full:.2f}")
    loaded = subprocess.run([sys.executable, "-c", TORCH_CHECK], capture_output=True, text=True,
                            check=True).stdout.strip()  # fmt: skip
    print(f"torch imported by the client: {loaded}")


if __name__ == "__main__":
    main()
