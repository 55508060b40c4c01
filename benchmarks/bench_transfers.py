"""S3 transfers of ddpjob_runtime.shared.storage against the AWS CLI, same moto endpoint, same run.

Four cases, each timed for ours and for the CLI, alternating which goes first, medians printed
with the ratio ours/CLI (goal <= 1.0):

  upload   one --size-mb file      storage.upload_file      vs  aws s3 cp FILE s3://...
  download the same object         storage.download_file    vs  aws s3 cp s3://... FILE
  sync up  --files small files     storage.upload_dir       vs  aws s3 cp --recursive DIR s3://...
  sync down the same prefix        storage.download_prefix  vs  aws s3 cp --recursive s3://... DIR

The CLI runs with its defaults (an empty config file: max_concurrent_requests 10,
multipart_threshold and multipart_chunksize 8 MB) and `--endpoint-url` set to the moto server.
Its time includes starting the `aws` process (printed once, as "CLI start-up"); ours runs in
this process with a warm client, as in the runtime. moto's ThreadedMotoServer runs in a child
process so that neither client shares a GIL with the server. Objects above ~5 MB are spooled to
temporary files by moto, so memory stays small; disk needs about 3x --size-mb.
ddpjob's DDPJOB_S3_* variables (see storage.py) change our settings for tuning runs.

    pip install awscli          # the baseline, into the same venv
    python benchmarks/bench_transfers.py [--size-mb 1024] [--files 2000] [--repeats 3]
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import random
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

BUCKET = "bench"


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _serve(port: int) -> None:
    """Child process: the moto server, until the parent terminates it."""
    import logging

    from moto.server import ThreadedMotoServer

    logging.getLogger("werkzeug").setLevel(logging.ERROR)  # no line per request

    ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False).start()
    threading.Event().wait()


def _wait_for_port(port: int, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.1)


def _make_files(root: Path, size_mb: int, count: int) -> tuple[Path, Path]:
    """One big file of random bytes and `count` small files of 4-64 KB in 20 folders."""
    big = root / "big.bin"
    with open(big, "wb") as f:
        for _ in range(size_mb):
            f.write(os.urandom(1 << 20))
    small = root / "small"
    rng = random.Random(0)
    for i in range(count):
        path = small / f"dir{i % 20:02d}" / f"file{i:05d}.bin"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(rng.randbytes(rng.randint(4, 64) * 1024))
    return big, small


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size-mb", type=int, default=1024, help="size of the big file (MB)")
    parser.add_argument("--files", type=int, default=2000, help="number of small files")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--no-cli", action="store_true", help="time ours only (tuning runs)")
    args = parser.parse_args()

    aws = shutil.which("aws") or shutil.which("aws", path=str(Path(sys.executable).parent))
    if aws is None and not args.no_cli:
        sys.exit("bench_transfers: the AWS CLI (the baseline) is not installed; run\n"
                 f"    {sys.executable} -m pip install awscli\n"
                 "or pass --no-cli to time ddpjob alone.")

    signal.signal(signal.SIGTERM, lambda *_: sys.exit(1))  # run `finally`: stop the server
    port = _free_port()
    server = multiprocessing.get_context("spawn").Process(target=_serve, args=(port,),
                                                          daemon=True)
    server.start()
    work = Path(tempfile.mkdtemp(prefix="bench-transfers-"))
    endpoint = f"http://127.0.0.1:{port}"
    (work / "aws-config").write_text("[default]\n")  # CLI defaults, whatever ~/.aws holds
    os.environ.update({
        "AWS_ENDPOINT_URL": endpoint, "AWS_ACCESS_KEY_ID": "bench",
        "AWS_SECRET_ACCESS_KEY": "bench", "AWS_DEFAULT_REGION": "us-east-1",
        "AWS_CONFIG_FILE": str(work / "aws-config"),
        "AWS_SHARED_CREDENTIALS_FILE": str(work / "aws-config"),
    })
    os.environ.pop("AWS_PROFILE", None)
    os.environ.pop("AWS_ENDPOINT_URL_S3", None)
    try:
        _wait_for_port(port)
        from ddpjob_runtime.shared import storage

        storage.client().create_bucket(Bucket=BUCKET)
        big, small = _make_files(work, args.size_mb, args.files)
        src = f"s3://{BUCKET}/src"
        storage.upload_file(big, f"{src}/big.bin")
        storage.upload_dir(small, f"{src}/small")
        out = work / "out"

        def cli(*words: str) -> list[str]:
            return [aws, "s3", *words, "--endpoint-url", endpoint, "--only-show-errors"]

        def fresh_remote(uri: str):
            return lambda: storage.delete_prefix(uri)

        def fresh_local() -> None:
            shutil.rmtree(out, ignore_errors=True)
            out.mkdir()

        # name, ours, CLI command, cleanup before each run (untimed), for ours / for the CLI
        cases = [
            ("upload 1 file", lambda: storage.upload_file(big, f"s3://{BUCKET}/ours/big.bin"),
             cli("cp", str(big), f"s3://{BUCKET}/cli/big.bin"),
             fresh_remote(f"s3://{BUCKET}/ours"), fresh_remote(f"s3://{BUCKET}/cli")),
            ("download 1 file", lambda: storage.download_file(f"{src}/big.bin", out / "big.bin"),
             cli("cp", f"{src}/big.bin", str(out / "big.bin")), fresh_local, fresh_local),
            ("sync up small files", lambda: storage.upload_dir(small, f"s3://{BUCKET}/ours/small"),
             cli("cp", "--recursive", str(small), f"s3://{BUCKET}/cli/small"),
             fresh_remote(f"s3://{BUCKET}/ours"), fresh_remote(f"s3://{BUCKET}/cli")),
            ("sync down small files", lambda: storage.download_prefix(f"{src}/small", out),
             cli("cp", "--recursive", f"{src}/small", str(out)), fresh_local, fresh_local),
        ]

        def timed(fn) -> float:
            start = time.perf_counter()
            fn()
            return time.perf_counter() - start

        if not args.no_cli:
            startup = statistics.median(
                timed(lambda: subprocess.run([aws, "s3", "ls", f"s3://{BUCKET}/none/",
                                              "--endpoint-url", endpoint], check=False))
                for _ in range(3))
        print(f"big file {args.size_mb} MB, {args.files} small files (4-64 KB), "
              f"{args.repeats} repeats, medians")
        if not args.no_cli:
            print(f"  CLI start-up (aws s3 ls of an empty prefix): {startup:.2f} s")
        print(f"  {'case':24s} {'ours':>8s} {'CLI':>8s} {'ours/CLI':>9s}")
        for name, ours, command, clean_ours, clean_cli in cases:
            times: dict[str, list[float]] = {"ours": [], "cli": []}
            for rep in range(args.repeats):
                order = ["ours", "cli"] if rep % 2 == 0 else ["cli", "ours"]
                for who in order:
                    if who == "cli" and args.no_cli:
                        continue
                    (clean_ours if who == "ours" else clean_cli)()
                    if who == "ours":
                        times[who].append(timed(ours))
                    else:
                        times[who].append(timed(lambda c=command: subprocess.run(c, check=True)))
            mine = statistics.median(times["ours"])
            if args.no_cli:
                print(f"  {name:24s} {mine:8.2f}")
                continue
            theirs = statistics.median(times["cli"])
            print(f"  {name:24s} {mine:8.2f} {theirs:8.2f} {mine / theirs:9.2f}  (goal <= 1.0)")
    finally:
        server.terminate()
        server.join()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
