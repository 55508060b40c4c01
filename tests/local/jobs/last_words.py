"""One worker under torchrun: prints a line, waits for `<SM_OUTPUT_DATA_DIR>/go` (the test
writes it once the line is in the host's log), then stops its agent (SIGSTOP: torchrun's tail
copies nothing more), prints its last words and writes `printed`, then waits to be killed."""

import os
import signal
import time
from pathlib import Path

out = Path(os.environ["SM_OUTPUT_DATA_DIR"])
print("a line the agent copies", flush=True)
while not (out / "go").exists():
    time.sleep(0.05)
agent = int(os.environ.get("DDPJOB_LAUNCHER") or os.getppid())  # forked: the template's child
os.kill(agent, signal.SIGSTOP)
print("last words before the host is killed", flush=True)
(out / "printed").touch()
time.sleep(600)
