"""docs/rehearsal.md's resume code, torch-free, for one process: a SIGTERM handler that only sets
a flag, a resume from the latest checkpoint, and a loop that saves and leaves on the flag, so
the script exits 0 after a notice.

The checkpoint is `step.json` in the checkpoint folder (the runtime syncs that folder to
`checkpoint_s3_uri` and brings it back). A fresh start holds at step `--hold-at` (it writes
`ready` into its output data folder) until the notice comes; `--ignore-sigterm true` ignores
the notice instead (then it holds until SIGKILL). Prints `loaded L first F`, `left after step S` and
`trained to step S of N`.
"""

import argparse
import json
import os
import signal
import time
from pathlib import Path

stopping = False


def on_sigterm(signum, frame):  # only set a flag: no I/O in a handler
    global stopping
    stopping = True


parser = argparse.ArgumentParser()
parser.add_argument("--steps", type=int, default=15)
parser.add_argument("--hold-at", type=int, default=3)
parser.add_argument("--ignore-sigterm", default="false")
args = parser.parse_args()
ignore = args.ignore_sigterm.lower() == "true"  # the hyperparameter true arrives as True
signal.signal(signal.SIGTERM, signal.SIG_IGN if ignore else on_sigterm)

saved = Path(os.environ["DDPJOB_CHECKPOINT_DIR"]) / "step.json"
loaded = json.loads(saved.read_text())["step"] if saved.exists() else None
start = 0 if loaded is None else loaded + 1
print(f"loaded {loaded} first {start}", flush=True)


def save(step: int) -> None:
    partial = saved.with_suffix(".partial")
    partial.write_text(json.dumps({"step": step}))
    partial.replace(saved)  # whole or not at all


step = start - 1
for step in range(start, args.steps):
    time.sleep(0.05)  # one training step
    if loaded is None and step == args.hold_at:  # wait here for the notice
        Path(os.environ["SM_OUTPUT_DATA_DIR"], "ready").touch()
        while not stopping:  # ignoring SIGTERM, only SIGKILL ends it (or MaxRuntime's)
            time.sleep(0.1)
    leaving = stopping
    if leaving or step % 5 == 0:
        save(step)
    if leaving:
        print(f"left after step {step}", flush=True)
        break
else:
    save(step)
    print(f"trained to step {step} of {args.steps}", flush=True)
