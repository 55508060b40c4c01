"""Rank 0 starts three processes meant to outlive the job, prints their pids, then ends (raises
with `--fail 1`): (a) a plain background child never waited for, (b) one in a new session
that ignores SIGTERM, (c) a double-forked daemon in a session of its own that writes its pid
file, then sleeps. All keep the job's environment; their stdio is /dev/null."""

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

parser = argparse.ArgumentParser()
parser.add_argument("--fail", type=int, default=0)
args = parser.parse_args()

QUIET = {"stdin": subprocess.DEVNULL, "stdout": subprocess.DEVNULL,
         "stderr": subprocess.DEVNULL}


# A classic daemon, in an interpreter of its own (no fork of this threaded one): fork, new
# session, fork again; the middle process exits, so the daemon's parent is gone.
DAEMON = """
import os, sys, time
if os.fork() == 0:
    os.setsid()
    if os.fork() == 0:
        null = os.open(os.devnull, os.O_RDWR)
        for fd in (0, 1, 2):
            os.dup2(null, fd)
        with open(sys.argv[1] + ".tmp", "w") as out:
            out.write(str(os.getpid()))
        os.rename(sys.argv[1] + ".tmp", sys.argv[1])
        time.sleep(600)
    os._exit(0)
os.wait()
"""


def daemon(pid_file: Path) -> int:
    """Start the daemon and wait for its pid file."""
    subprocess.run([sys.executable, "-c", DAEMON, str(pid_file)], check=True, **QUIET)
    while not pid_file.exists():
        time.sleep(0.01)
    return int(pid_file.read_text())


if os.environ.get("RANK", "0") == "0":
    plain = subprocess.Popen(["sleep", "600"], **QUIET)
    detached = subprocess.Popen(["sh", "-c", "trap '' TERM; exec sleep 600"],
                                start_new_session=True, **QUIET)
    pid_file = Path(os.environ["SM_OUTPUT_DATA_DIR"]) / "daemon.pid"
    pids = {"plain": plain.pid, "setsid": detached.pid, "daemon": daemon(pid_file)}
    print(f"left behind: {json.dumps(pids)}", flush=True)
if args.fail:
    sys.exit("failing on purpose, leaving processes behind")
