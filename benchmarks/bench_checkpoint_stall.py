"""Training-loop stall of checkpoints.save() of a 256 MB state, with the upload to S3 (moto).

Baseline in the same run: the in-memory snapshot alone (what save() must at least cost).
Goal: stall / snapshot <= 1.5. For contrast, the stall of a synchronous torch.save + upload.

    python benchmarks/bench_checkpoint_stall.py [--mb 256] [--repeats 5]
"""

from __future__ import annotations

import argparse
import logging
import os
import socket
import statistics
import tempfile
import time
from pathlib import Path


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mb", type=int, default=256, help="state size in MB")
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)
    logging.getLogger("werkzeug").setLevel(logging.ERROR)  # no line per request

    from moto.server import ThreadedMotoServer

    port = _free_port()
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    work = Path(tempfile.mkdtemp(prefix="bench-ckpt-"))
    os.environ.update({
        "AWS_ENDPOINT_URL": f"http://127.0.0.1:{port}", "AWS_ACCESS_KEY_ID": "bench",
        "AWS_SECRET_ACCESS_KEY": "bench", "AWS_DEFAULT_REGION": "us-east-1", "RANK": "0",
        "DDPJOB_CHECKPOINT_DIR": str(work / "ckpt"),
        "DDPJOB_CHECKPOINT_URI": "s3://bench/ckpt/run-1",
    })
    try:
        import torch
        from ddpjob_runtime import checkpoints
        from ddpjob_runtime.shared import storage

        storage.client().create_bucket(Bucket="bench")
        # a model-like state: 64 tensors of 1M float32 each (4 MB), plus small entries
        n = args.mb // 4
        state = {"model": {f"layer{i}.weight": torch.randn(1 << 20) for i in range(n)},
                 "step": 0, "lr": 0.01}

        def timed(fn) -> float:
            start = time.perf_counter()
            fn()
            return time.perf_counter() - start

        # Baseline: the snapshot alone as a copy into an existing buffer (the pure copy cost,
        # the strictest lower bound); a copy into fresh memory is printed too.
        buffer = checkpoints._snapshot(state)
        snapshot = [timed(lambda b=buffer: checkpoints._snapshot(state, b))
                    for _ in range(args.repeats)]
        fresh = [timed(lambda: checkpoints._snapshot(state)) for _ in range(args.repeats)]
        buffer = None

        stall, total = [], []
        for step in range(args.repeats):
            start = time.perf_counter()
            stall.append(timed(lambda step=step: checkpoints.save(state, step=step, keep=2)))
            checkpoints.flush()  # in training, the next steps run here; not part of the stall
            total.append(time.perf_counter() - start)

        def sync_save_and_upload() -> None:
            path = work / "sync.pt"
            torch.save(state, path)
            storage.upload_file(path, "s3://bench/sync/state.pt")

        sync = [timed(sync_save_and_upload) for _ in range(max(2, args.repeats // 2))]

        med = statistics.median
        print(f"state: {args.mb} MB, {args.repeats} repeats, medians")
        print(f"  in-memory snapshot alone     {med(snapshot):7.3f} s   (baseline)")
        print(f"  snapshot into fresh memory   {med(fresh):7.3f} s")
        print(f"  save() stall, upload in bg   {med(stall):7.3f} s   "
              f"ratio {med(stall) / med(snapshot):.2f} (goal <= 1.5)")
        print(f"  background write + upload    {med(total):7.3f} s   (hidden from the loop)")
        print(f"  sync torch.save + upload     {med(sync):7.3f} s   "
              f"ratio {med(sync) / med(snapshot):.2f}")
    finally:
        server.stop()
        import shutil

        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
