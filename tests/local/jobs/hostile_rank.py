"""A rank that turns what it writes against whoever asks for its stacks (`HOSTILE`):

- `link`: its dump file becomes a link to `TARGET` (a file outside the host);
- `fifo`: its dump file becomes a FIFO (whoever opens it to write waits for a reader);
- `forge`: it registers `VICTIMS` (pids, comma-separated) as ranks 8, 9, ... with their start
  times;
- `default`: the stack signal's action is reset to its default (ending the process);
- `flood`: it answers the stack signal with 16 MiB of text;
- anything else: nothing.

Then it says so and waits forever."""

import json
import os
import signal
import time

STACK_SIGNAL = signal.SIGRTMIN + 4
folder = os.environ["DDPJOB_STACKS_DIR"]
rank = int(os.environ.get("RANK", "0"))
dump = os.path.join(folder, f"rank-{rank}.stacks")
hostile = os.environ.get("HOSTILE", "")


def start_time(pid: int) -> int:
    with open(f"/proc/{pid}/stat") as stat:
        text = stat.read()
    return int(text[text.rindex(")") + 2:].split()[19])


def flood(*_args: object) -> None:
    with open(dump, "a") as out:
        out.write("x" * (16 << 20))


if hostile == "link":
    os.unlink(dump)
    os.symlink(os.environ["TARGET"], dump)
elif hostile == "fifo":
    os.unlink(dump)
    os.mkfifo(dump)
elif hostile == "forge":
    for number, pid in enumerate(os.environ["VICTIMS"].split(","), start=8):
        info = {"pid": int(pid), "start_time": start_time(int(pid)), "main_thread": 1}
        with open(os.path.join(folder, f"rank-{number}.json"), "w") as out:
            json.dump(info, out)
elif hostile == "default":
    signal.signal(STACK_SIGNAL, signal.SIG_DFL)
elif hostile == "flood":
    signal.signal(STACK_SIGNAL, flood)
print(f"rank {rank} hostile: {hostile or 'no'}", flush=True)
while True:
    time.sleep(1)
