"""How long a fresh interpreter takes to build an `ml.*` request against importing the SDK.

An `ml.*` PyTorch job with no `image_uri` runs on SageMaker's container, which the official
SDK's registry names; ddpjob reads that registry from the SDK's files instead of importing it.
Times, each in a fresh interpreter and alternating, with the order swapped every repetition:
  1. `PyTorch(instance_type="ml.g5.12xlarge", ...)` and its `training_job_request()` (a dry
     run, dummy credentials: nothing is sent)                                   (goal <= 1 s)
  2. importing the installed SDK's `image_uris` (v2: `sagemaker.image_uris`, v3:
     `sagemaker.core.image_uris`), which building the request used to do
  3. `python -c pass`, for reference.
Run it with the Python of the venv to measure (the v3 one: `.venv-sdk3/bin/python`)::

    python benchmarks/bench_request.py [--reps 7]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from ddpjob import official_sdk

REQUEST = """\
from ddpjob import PyTorch, Session
estimator = PyTorch(entry_point="train.py", source_dir={source!r}, instance_count=2,
                    role="arn:aws:iam::123456789012:role/SageMakerRole",
                    instance_type="ml.g5.12xlarge", output_path="s3://bench-bucket/out",
                    sagemaker_session=Session())
print(estimator.training_job_request(job_name="bench-1")["AlgorithmSpecification"]["TrainingImage"])
"""
ENV = {**os.environ, "AWS_DEFAULT_REGION": "us-east-1", "AWS_ACCESS_KEY_ID": "bench",
       "AWS_SECRET_ACCESS_KEY": "bench"}


def timed(code: str) -> float:
    started = time.perf_counter()
    done = subprocess.run([sys.executable, "-c", code], env=ENV, capture_output=True, text=True,
                          check=False)
    elapsed = time.perf_counter() - started
    if done.returncode != 0:
        raise SystemExit(f"{code}\nfailed:\n{done.stderr}")
    return elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=7)
    args = parser.parse_args()
    sdk = official_sdk.require("this benchmark")
    with tempfile.TemporaryDirectory() as source:
        Path(source, "train.py").write_text("print('hello')\n")
        commands = {"build an ml.* request (ddpjob)": REQUEST.format(source=source),
                    f"import {sdk.package}.image_uris": f"import {sdk.package}.image_uris",
                    "python -c pass": "pass"}
        for code in commands.values():
            timed(code)  # warm the page cache and the .pyc files
        times: dict[str, list[float]] = {name: [] for name in commands}
        for rep in range(args.reps):
            for name in list(commands)[:: 1 if rep % 2 == 0 else -1]:
                times[name].append(timed(commands[name]))
    print(f"official SDK {sdk.version} (v{sdk.major}), {sys.executable}")
    medians = {name: statistics.median(values) for name, values in times.items()}
    for name, value in medians.items():
        print(f"{name:40s} median {value * 1000:7.1f} ms over {args.reps} runs")
    request = medians["build an ml.* request (ddpjob)"]
    print(f"request <= 1 s: {'met' if request <= 1.0 else 'NOT met'}")


if __name__ == "__main__":
    main()
