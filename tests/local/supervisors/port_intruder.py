"""The local supervisor with an intruder in the rendezvous port's window (`test_port_race`).

`python -m port_intruder JOB_DIR` (this folder on `PYTHONPATH`) runs the local supervisor
unchanged but for one thing: the moment it has chosen the rendezvous port (it prepares the
first host's root with it, before any host starts), a socket of this process binds that port
as a program that binds a port outright does (no SO_REUSEADDR) and listens on it for the rest
of the job. What it got is written to `<job dir>/intruder.json`: `{"port": N, "taken": true}`
or the error that refused it.
"""

from __future__ import annotations

import json
import socket
from pathlib import Path

from ddpjob.local.base.admitted import AdmittedJob
from ddpjob.local.isolation import hostroot
from ddpjob.local.run import supervisor

_held: list[socket.socket] = []
_prepare = hostroot.prepare


def _intrude(job: AdmittedJob, host: str, master_port: int, job_dir: Path, *args: object,
             **kwargs: object) -> Path:
    if host == job.hosts[0]:
        sock = socket.socket()
        try:
            sock.bind((hostroot.LOOPBACK, master_port))
            sock.listen()
        except OSError as exc:
            sock.close()
            taken: bool | str = str(exc)
        else:
            _held.append(sock)
            taken = True
        (job_dir / "intruder.json").write_text(json.dumps({"port": master_port, "taken": taken}))
    return _prepare(job, host, master_port, job_dir, *args, **kwargs)


if __name__ == "__main__":
    hostroot.prepare = _intrude  # what `hosts` calls once it chose the port
    supervisor.main()
