"""Every rank joins; `--victim` then fails as `--how` says while the others wait in collectives.

--how exit: os._exit(3); sigkill: SIGKILL itself; agent: SIGKILL its torchrun agent;
host: SIGKILL its host's ddpjob-train (the agent's launcher). Without a victim: a clean run.
A process forked from the job's template has the template as its parent: its launcher is named
by `DDPJOB_LAUNCHER`.
"""

import argparse
import os
import signal
import time
from pathlib import Path

import ddpjob_runtime.dataparallel.torch.distributed as dist
import torch
from group_teardown import finish

parser = argparse.ArgumentParser()
parser.add_argument("--victim", type=int, default=-1)
parser.add_argument("--how", default="exit")
parser.add_argument("--steps", type=int, default=3)
args = parser.parse_args()


def launcher_of(pid: int) -> int:
    environ = Path(f"/proc/{pid}/environ").read_bytes().decode(errors="replace").split("\0")
    env = dict(e.split("=", 1) for e in environ if "=" in e)
    if "DDPJOB_LAUNCHER" in env:
        return int(env["DDPJOB_LAUNCHER"])
    stat = Path(f"/proc/{pid}/stat").read_text()
    return int(stat[stat.rindex(")") + 2 :].split()[1])


dist.init_process_group()
dist.barrier()
Path(os.environ["SM_OUTPUT_DATA_DIR"], f"joined-{dist.get_rank()}").touch()
if dist.get_rank() == args.victim:
    time.sleep(1.0)
    agent = launcher_of(os.getpid())
    if args.how == "exit":
        os._exit(3)
    elif args.how == "sigkill":
        os.kill(os.getpid(), signal.SIGKILL)
    elif args.how == "agent":
        os.kill(agent, signal.SIGKILL)
    elif args.how == "host":
        os.kill(launcher_of(agent), signal.SIGKILL)
    time.sleep(60)
for _ in range(args.steps if args.victim < 0 else 600):
    dist.all_reduce(torch.ones(1))
    time.sleep(0.1)
print(f"rank {dist.get_rank()} done", flush=True)
finish()  # a clean run only: a victim's peers fail in all_reduce
