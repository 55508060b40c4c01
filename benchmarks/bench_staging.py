"""Channel staging of local jobs: a 4-host job against a 1-host job on the same channel.

For a `file://` channel and an `s3://` channel (a moto server in a child process), each of
`--files` files, `--size-mb` in all:
  1. disk used by the 4-host job while it runs (its job folder's files, each counted once)
     vs the channel's size                                                       (goal <= 1.05)
  2. time from `fit()` to the first training step (every rank has opened every file of its
     channel and passed a barrier), 4 hosts vs 1 host, cold cache               (goal <= 1.2)
  3. s3 only: staging time of a second job on the same channel (cache warm) vs the first
     (cold), from the staging line of the job's log                             (goal <= 0.1)
The 1-host and 4-host jobs alternate, the first swapping every repetition; medians are printed::

    python benchmarks/bench_staging.py [--size-mb 1024] [--files 8] [--reps 1]
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import multiprocessing
import os
import re
import signal
import statistics
import sys
import tempfile
import time
from pathlib import Path

from bench_transfers import _free_port, _serve, _wait_for_port
from ddpjob import LocalSession, PyTorch
from ddpjob.local.run.staging import cache_of

BUCKET = "bench-staging"
SCRIPT = """\
import json, os, time
from pathlib import Path
import ddpjob_runtime.dataparallel.torch.distributed as dist

dist.init_process_group()
channel = Path(os.environ["SM_CHANNEL_TRAIN"])
for path in channel.rglob("*"):
    if path.is_file():
        with open(path, "rb") as f:
            f.read(1)
dist.barrier()
first_step = time.time()


def du(*paths):  # bytes on disk, a file seen under several names (links, mounts) counted once
    seen, total = set(), 0
    for top in paths:
        for folder, _, files in os.walk(top):
            for name in files:
                st = os.lstat(os.path.join(folder, name))
                if (st.st_dev, st.st_ino) not in seen:
                    seen.add((st.st_dev, st.st_ino))
                    total += st.st_blocks * 512
    return total


if dist.get_rank() == 0:
    job = Path(os.environ["DDPJOB_STATUS_FILE"]).parents[1]  # <home>/jobs/<job>/hosts/algo-1.status
    cache = job.parents[1] / "cache"
    print("BENCH " + json.dumps({"first_step": first_step, "job_bytes": du(job),
          "with_cache_bytes": du(job, *([cache] if cache.exists() else []))}), flush=True)
"""
_BENCH = re.compile(r"BENCH (\{.*\})")
_STAGING = re.compile(r"train: .*\((\d+\.\d+) s\)")


def run_job(session: LocalSession, source: Path, uri: str, hosts: int) -> dict[str, float]:
    """fit() one job; {"to_first_step", "staging", "job_bytes", "with_cache_bytes"}."""
    estimator = PyTorch(entry_point="probe.py", source_dir=str(source), instance_count=hosts,
                        instance_type="local", session=session,
                        distribution={"torch_distributed": {"enabled": True},
                                      "processes_per_host": 1})
    started = time.time()
    with contextlib.redirect_stdout(io.StringIO()):
        estimator.fit({"train": uri})
    log = (session.job_dir(estimator.latest_training_job.name) / "logs" / "algo-1.log").read_text()
    found = json.loads(_BENCH.search(log).group(1))
    return {"to_first_step": found["first_step"] - started,
            "staging": float(_STAGING.search(log).group(1)),
            "job_bytes": found["job_bytes"], "with_cache_bytes": found["with_cache_bytes"]}


def make_channel(folder: Path, size_mb: int, files: int) -> int:
    """`files` files of random bytes, `size_mb` MB in all; returns the size in bytes."""
    each = size_mb * (1 << 20) // files
    for i in range(files):
        with open(folder / f"part-{i:04d}.bin", "wb") as f:
            for _ in range(each >> 20):
                f.write(os.urandom(1 << 20))
            f.write(os.urandom(each % (1 << 20)))
    return each * files


def compare(label: str, session: LocalSession, source: Path, uri: str, size: int,
            reps: int) -> None:
    cold: dict[int, list[dict[str, float]]] = {1: [], 4: []}
    for rep in range(reps):
        for hosts in (1, 4) if rep % 2 == 0 else (4, 1):
            cache_of(session.home).evict(0)  # cold: nothing cached
            cold[hosts].append(run_job(session, source, uri, hosts))
    t1 = statistics.median(r["to_first_step"] for r in cold[1])
    t4 = statistics.median(r["to_first_step"] for r in cold[4])
    disk = statistics.median(r["job_bytes"] for r in cold[4])
    print(f"{label}: channel {size / 1e6:.0f} MB")
    print(f"  disk used by the 4-host job: {disk / 1e6:.0f} MB, ratio to the channel "
          f"{disk / size:.3f} (goal <= 1.05); with the cache: "
          f"{statistics.median(r['with_cache_bytes'] for r in cold[4]) / 1e6:.0f} MB")
    print(f"  fit() to first step: 4 hosts {t4:.2f} s, 1 host {t1:.2f} s, ratio {t4 / t1:.2f} "
          f"(goal <= 1.2); of which staging: 4 hosts "
          f"{statistics.median(r['staging'] for r in cold[4]):.2f} s, 1 host "
          f"{statistics.median(r['staging'] for r in cold[1]):.2f} s")
    if uri.startswith("s3://"):
        warm = [run_job(session, source, uri, 4) for _ in range(reps)]
        first = statistics.median(r["staging"] for r in cold[4])
        second = statistics.median(r["staging"] for r in warm)
        print(f"  staging, second job on the channel: {second:.2f} s, first {first:.2f} s, "
              f"ratio {second / first:.3f} (goal <= 0.1)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size-mb", type=int, default=1024, help="channel size (MB)")
    parser.add_argument("--files", type=int, default=8, help="files in the channel")
    parser.add_argument("--reps", type=int, default=1)
    args = parser.parse_args()
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(1))  # run `finally`: stop the server
    port = _free_port()
    server = multiprocessing.get_context("spawn").Process(target=_serve, args=(port,),
                                                          daemon=True)
    server.start()
    os.environ.update({
        "AWS_ENDPOINT_URL": f"http://127.0.0.1:{port}", "AWS_ACCESS_KEY_ID": "bench",
        "AWS_SECRET_ACCESS_KEY": "bench", "AWS_DEFAULT_REGION": "us-east-1",
        "AWS_CONFIG_FILE": os.devnull, "AWS_SHARED_CREDENTIALS_FILE": os.devnull,
    })
    for name in ("AWS_PROFILE", "AWS_ENDPOINT_URL_S3"):
        os.environ.pop(name, None)
    try:
        with tempfile.TemporaryDirectory(prefix="bench-staging-") as tmp:
            _wait_for_port(port)
            from ddpjob_runtime.shared import storage

            source, data = Path(tmp, "src"), Path(tmp, "data")
            source.mkdir()
            data.mkdir()
            (source / "probe.py").write_text(SCRIPT)
            size = make_channel(data, args.size_mb, args.files)
            storage.client().create_bucket(Bucket=BUCKET)
            storage.upload_dir(data, f"s3://{BUCKET}/channel")
            session = LocalSession(Path(tmp, "home"))
            compare("file://", session, source, data.as_uri(), size, args.reps)
            compare("s3://", session, source, f"s3://{BUCKET}/channel", size, args.reps)
    finally:
        server.terminate()


if __name__ == "__main__":
    main()
