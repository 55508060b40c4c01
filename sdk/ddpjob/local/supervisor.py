"""The detached process that runs one local job: `python -m ddpjob.local.supervisor <job dir>`.

It prepares every simulated host's root, starts one `ddpjob-train` per host, turns the hosts'
phases and exit codes into the job's status (on disk, for any process to read), ends every host
on the first failure, a stop request or MaxRuntimeInSeconds, and leaves no process behind.
It runs in its own session, so the job survives the notebook kernel that started it.
"""

from __future__ import annotations

import contextlib
import ctypes
import functools
import json
import logging
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from ddpjob.job_status import (
    EndCause,
    SecondaryStatus,
    advance,
    can_move,
    ending,
    job_progress,
)
from ddpjob.local import failure_cause, gpus, hostroot, jobstate, proctree
from ddpjob.local.jobstore import JobStore

log = logging.getLogger("ddpjob.local.supervisor")

MODULE = "ddpjob.local.supervisor"
POLL_S = 0.1
# The runtime gives its workers 5 s after a SIGTERM; then we SIGKILL whatever is left.
STOP_GRACE_S = 10.0
REASON_CHARS = 1024


def free_port() -> int:
    """A TCP port on loopback that nothing listens on right now (the rendezvous port)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def train_command() -> list[str]:
    """The runtime's entry point: the `ddpjob-train` installed beside this Python, else on PATH."""
    beside = Path(sys.executable).parent / "ddpjob-train"
    found = str(beside) if beside.exists() else shutil.which("ddpjob-train")
    if found is None:
        raise RuntimeError(
            "ddpjob-train (the ddpjob runtime) is not installed in this Python environment: "
            "pip install ddpjob"
        )
    return [found]


def _die_with_supervisor() -> None:
    """In each host before exec: a SIGKILLed supervisor still ends its hosts (PDEATHSIG)."""
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)


def _read_phase(path: Path) -> str:
    try:
        return str(json.loads(path.read_text())["phase"])
    except (OSError, ValueError, KeyError, TypeError):
        return "Starting"


def _read_message(path: Path) -> str | None:
    with contextlib.suppress(OSError, ValueError, AttributeError):
        return json.loads(path.read_text()).get("message")
    return None


class Supervisor:
    """Runs the job `name` of `store` to its end."""

    def __init__(self, store: JobStore, name: str):
        self.store, self.name = store, name
        self.job_dir = store.job_dir(name)
        self.request = store.request(name)
        self.hosts = hostroot.host_names(self.request)
        self.procs: dict[str, subprocess.Popen] = {}
        self.cause: EndCause | None = None
        self.failed_host: str | None = None
        self.internal_error: str | None = None
        self.signalled = False
        self.kill_at: float | None = None
        self.exited_at: dict[str, float] = {}
        self.noted: set[str] = set()  # the hosts' status messages already in the history

    # --- state on disk -------------------------------------------------------------------

    def _move(self, new: SecondaryStatus, message: str | None = None) -> None:
        """Move to `new` unless another process moved the job elsewhere meanwhile (a stop)."""

        def change(state: dict[str, Any]) -> bool:
            if not can_move(jobstate.status(state), new):
                return False
            jobstate.move(state, new, message)
            return True

        self.store.update(self.name, change)

    def _stop_requested(self) -> bool:
        if self.signalled:
            return True
        with contextlib.suppress(OSError, ValueError):
            return jobstate.status(self.store.state(self.name)) is SecondaryStatus.STOPPING
        return False

    # --- hosts ---------------------------------------------------------------------------

    def _host_env(self, host: str, root: Path, gpu_ids: list[str]) -> dict[str, str]:
        env = dict(os.environ)
        env.update(self.request.get("Environment") or {})
        env["SAGEMAKER_BASE_DIR"] = str(root)
        env["PYTHONUNBUFFERED"] = "1"  # lines reach the log as they are printed
        env["CUDA_VISIBLE_DEVICES"] = ",".join(gpu_ids)  # "" for `local`: CPU and gloo
        return env

    def _start_hosts(self) -> None:
        command = train_command()
        port = free_port()
        kind = self.request["ResourceConfig"]["InstanceType"]
        slices = (
            gpus.split(gpus.visible_gpus(), len(self.hosts))
            if kind == "local_gpu"
            else [[] for _ in self.hosts]
        )
        (self.job_dir / "logs").mkdir(exist_ok=True)
        for host, gpu_ids in zip(self.hosts, slices, strict=True):
            root = hostroot.prepare(self.request, host, port, self.job_dir)
            with open(self.job_dir / "logs" / f"{host}.log", "ab") as out:
                self.procs[host] = subprocess.Popen(
                    command, cwd=root, env=self._host_env(host, root, gpu_ids),
                    stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                    start_new_session=True, preexec_fn=_die_with_supervisor,
                )  # fmt: skip
            log.info("started %s (pid %d): %s", host, self.procs[host].pid, root)
        pids = {h: {"pid": p.pid, "exit_code": None} for h, p in self.procs.items()}

        def record(state: dict[str, Any]) -> bool:
            state["hosts"] = pids
            return True

        self.store.update(self.name, record)

    def _begin_end(self, cause: EndCause) -> None:
        """Record why the job ends early and ask every host to stop (SIGTERM)."""
        self.cause = cause
        log.info("ending the job: %s", cause.value)
        if cause is EndCause.STOP_REQUESTED:
            self._move(SecondaryStatus.STOPPING)
        for proc in self.procs.values():
            if proc.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    proc.send_signal(signal.SIGTERM)  # the runtime forwards it to its workers
        self.kill_at = time.monotonic() + STOP_GRACE_S

    def _check_ending(self, codes: dict[str, int | None]) -> None:
        if self._stop_requested():
            self._begin_end(EndCause.STOP_REQUESTED)
            return
        max_runtime = (self.request.get("StoppingCondition") or {}).get("MaxRuntimeInSeconds")
        state = self.store.state(self.name)
        started = state["training_start_time"] or state["creation_time"]
        if max_runtime and time.time() - started > max_runtime:
            self._begin_end(EndCause.MAX_RUNTIME)
            return
        failed = [h for h, code in codes.items() if code not in (None, 0)]
        if failed:
            self.failed_host = failed[0]
            log.info("host %s exited with code %d", failed[0], codes[failed[0]])
            self._begin_end(EndCause.HOST_FAILED)

    def _progress(self, codes: dict[str, int | None]) -> None:
        phases = [
            "Done" if codes[h] == 0 else _read_phase(hostroot.status_file(self.job_dir, h))
            for h in self.hosts
        ]
        state = self.store.state(self.name)
        current = jobstate.status(state)
        new = advance(current, job_progress(phases))
        if new is not current:
            self._move(new)
        for host in self.hosts:  # worker restarts, told by every host: noted once
            message = _read_message(hostroot.status_file(self.job_dir, host))
            if message and message not in self.noted:
                self.noted.add(message)
                self.store.update(self.name, functools.partial(jobstate.note, message=message))

    def _watch(self) -> None:
        known: dict[str, int | None] = {}
        while True:
            codes = {h: p.poll() for h, p in self.procs.items()}
            for host in (h for h, code in codes.items() if code is not None):
                self.exited_at.setdefault(host, time.time())  # when a killed host failed
            if codes != known:
                known = codes
                self.store.update(self.name, functools.partial(self._record_codes, codes=codes))
            if self.cause is None:
                self._check_ending(codes)
            if self.cause is None:
                self._progress(codes)
            elif self.kill_at is not None and time.monotonic() > self.kill_at:
                log.warning("hosts still running %.0f s after SIGTERM: SIGKILL", STOP_GRACE_S)
                proctree.signal_all(proctree.descendants(os.getpid()), signal.SIGKILL)
                self.kill_at = None
            if all(code is not None for code in codes.values()):
                return
            time.sleep(POLL_S)

    @staticmethod
    def _record_codes(state: dict[str, Any], codes: dict[str, int | None]) -> bool:
        for host, code in codes.items():
            state["hosts"].setdefault(host, {})["exit_code"] = code
        return True

    # --- the end -------------------------------------------------------------------------

    def _failure_reason(self, codes: dict[str, int | None]) -> str:
        """`AlgorithmError: <the causing host's output/failure>`, at most 1024 characters."""
        found = [
            failure_cause.read_host(h, self.job_dir / "hosts" / h / "output", code,
                                    self.exited_at.get(h, time.time()))
            for h, code in codes.items() if code not in (None, 0)
        ]  # fmt: skip
        return failure_cause.reason(found, REASON_CHARS) or (
            f"AlgorithmError: the hosts exited with codes {codes}; see {self.job_dir / 'logs'}"
        )

    def _finish(self) -> None:
        codes = {h: p.returncode for h, p in self.procs.items()}
        cause = self.cause
        if self.internal_error:
            cause = EndCause.HOST_FAILED
        end = ending([c if c is not None else 1 for c in codes.values()], cause)
        reason = None
        if self.internal_error:
            reason = f"InternalServerError: {self.internal_error}"[:REASON_CHARS]
        elif end is SecondaryStatus.FAILED:
            reason = self._failure_reason(codes)
        elif end is SecondaryStatus.MAX_RUNTIME_EXCEEDED:
            limit = self.request["StoppingCondition"]["MaxRuntimeInSeconds"]
            reason = f"MaxRuntimeExceeded: the job ran longer than MaxRuntimeInSeconds ({limit} s)"

        def change(state: dict[str, Any]) -> bool:
            current, final = jobstate.status(state), end
            if current.is_terminal:  # another process already declared the end
                return False
            if current is SecondaryStatus.STOPPING and end is not SecondaryStatus.FAILED:
                final = SecondaryStatus.STOPPED  # a stop asked for meanwhile wins
            if final is not SecondaryStatus.STOPPED:
                state["failure_reason"] = reason
            message = reason.split("\n", 1)[0] if reason else None
            jobstate.move(state, final, message)
            self._record_codes(state, codes)
            return True

        state = self.store.update(self.name, change)
        log.info("job %s: %s", self.name, state["secondary_status"])

    def run(self) -> None:
        """Run the job to its end; the final status is on disk when this returns."""
        proctree.become_subreaper()
        try:
            if self._stop_requested():
                self._begin_end(EndCause.STOP_REQUESTED)  # stopped before it started
            else:
                self._start_hosts()
                self._watch()
        except Exception as exc:  # noqa: BLE001 - whatever broke, the job must end with a reason
            log.exception("supervisor error")
            self.internal_error = f"the local supervisor failed: {type(exc).__name__}: {exc}"
            if self.cause is None and self.procs:
                self._begin_end(EndCause.HOST_FAILED)
        finally:
            try:
                self._end_everything()
            except Exception:  # noqa: BLE001 - the final status must still be written
                log.exception("cleanup error")
            self._finish()

    def _end_everything(self) -> None:
        """Wait for the hosts (SIGKILL after the grace), then end any process left below us."""
        for proc in self.procs.values():
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=STOP_GRACE_S)
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        proctree.end_descendants(grace_s=2.0)
        for host in self.hosts:  # what a killed host could not remove itself
            shutil.rmtree(self.job_dir / "hosts" / host / "tmp", ignore_errors=True)


def _on_signal(supervisor: Supervisor):
    def handler(signum: int, _frame: object) -> None:
        log.info("received signal %d: stopping the job", signum)
        supervisor.signalled = True

    return handler


def main(argv: list[str] | None = None) -> None:
    """`python -m ddpjob.local.supervisor <job dir>`."""
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) != 1:
        sys.exit("usage: python -m ddpjob.local.supervisor JOB_DIR")
    logging.basicConfig(level=logging.INFO, format="%(asctime)s supervisor %(message)s")
    job_dir = Path(argv[0]).absolute()
    supervisor = Supervisor(JobStore(job_dir.parent.parent), job_dir.name)
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, _on_signal(supervisor))
    signal.signal(signal.SIGHUP, signal.SIG_IGN)  # the terminal that started the client may close
    supervisor.run()


if __name__ == "__main__":
    main()
