"""The keeper of one warm pool (`python -m ddpjob.local.warmpools.poolkeeper <home>/pools/<id>`),
and the lease a job's supervisor holds on a pool.

The keeper runs in its own session, outside every job's process tree (the supervisor forks it
off before it becomes a subreaper), so it outlives the job that created it. It starts the
pool's template process if the pool holds one (`templates.Template`: torch and the runtime
imported, dies with the keeper) and ends it — and with it every process forked from it, and
anything that outlived it (the keeper is a subreaper) — and removes the hosts' persistent
caches (`poolcache`) when the pool ends:
its keep-alive passed while Available, a stop was asked for (`pools.stop`, SIGTERM), the pool's
folder is gone (its home was removed), memory is short while it is Available
(MemAvailable below `DDPJOB_POOL_MIN_AVAILABLE_MB`, default the larger of 512 MiB and 5% of
MemTotal, for 2 s), the job holding it lost its supervisor, or the template died.

What a job on the pool started ends with the job, as without a pool: the template is the
subreaper of every process forked from it (a script's background child, one in a new session, a
double-forked daemon land there, not at init), and when the job's hosts end the job's lease
(`Lease.stop`) ends everything below the template but the template's own session (its spares).
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from ddpjob_runtime.shared import forkrun, processes, proctitle

from ddpjob.local.base import proctree, templates
from ddpjob.local.base.admitted import AdmittedJob
from ddpjob.local.base.jobstore import JobStore
from ddpjob.local.base.templates import Template
from ddpjob.local.warmpools import poolcache, pools

log = logging.getLogger("ddpjob.local.warmpools.poolkeeper")

POLL_S = 0.1
MIN_AVAILABLE_ENV = "DDPJOB_POOL_MIN_AVAILABLE_MB"
KEEPER_START_S = 30.0  # a new keeper names its template within this, or the job starts cold
LEFTOVER_GRACE_S = 5.0
MEMORY_GRACE_S = 2.0


def _meminfo() -> dict[str, int]:
    """/proc/meminfo's fields in KiB ({} where there is none)."""
    try:
        lines = Path("/proc/meminfo").read_text().splitlines()
    except OSError:
        return {}
    return {k: int(v.split()[0]) for k, v in (line.split(":", 1) for line in lines)}


class MemoryWatch:
    """Whether memory has been short for `MEMORY_GRACE_S` on end (a moment's dip, another
    process's peak, does not end a pool)."""

    def __init__(self) -> None:
        self.short_since: float | None = None

    def short(self) -> str:
        """Why memory is too short to keep a pool warm, or "" when it is not (yet)."""
        info = _meminfo()
        if "MemAvailable" not in info:
            return ""
        bound = os.environ.get(MIN_AVAILABLE_ENV)
        floor_mb = float(bound) if bound else max(512.0, info.get("MemTotal", 0) / 1024 * 0.05)
        available_mb = info["MemAvailable"] / 1024
        if available_mb >= floor_mb:
            self.short_since = None
            return ""
        now = time.monotonic()
        self.short_since = self.short_since or now
        if now - self.short_since < MEMORY_GRACE_S:
            return ""
        return (f"memory pressure: MemAvailable {available_mb:.0f} MiB < {floor_mb:.0f} MiB "
                f"for {MEMORY_GRACE_S:.0f} s")


def why_end(folder: Path, template: Template, signalled: list[str],
            memory: MemoryWatch) -> tuple[str, bool]:
    """Why the pool in `folder` must end now ("" while it stays), and whether that holds only
    while no job holds it (a stop, the keep-alive, memory: reasons to end an Available pool)."""
    if signalled:
        return signalled[0], False
    try:
        pool = pools.read(folder)
    except (OSError, ValueError, TypeError):
        return "its folder is gone (the home was removed)", False
    if pool.preloaded and (template.proc is None or template.proc.poll() is not None):
        return "the template process exited", False
    if pool.status == pools.AVAILABLE:
        if pool.stop_requested:
            return pool.stop_requested, True
        if time.time() >= (pool.expires_at or 0):
            return f"KeepAlivePeriodInSeconds ({pool.keep_alive} s) passed", True
        return memory.short(), True  # a job that holds the pool runs on
    if pool.status == pools.IN_USE and pool.supervisor_pid is not None \
            and not proctree.is_alive(pool.supervisor_pid):
        return f"the supervisor of job {pool.job} is gone", False
    return "", False


def _end_idle(home: Path, pool_id: str, reason: str) -> bool:
    """Mark the pool Terminated if it is still Available (under the pools' lock, so that no job
    claims a pool whose template is about to end); False when a job claimed it meanwhile."""
    with contextlib.suppress(OSError, ValueError, TypeError):
        ended = pools.update(home, pool_id, lambda pool: _terminate(pool, reason, idle_only=True))
        return ended.status == pools.TERMINATED
    return True  # the record is gone: nothing can claim the pool


def _terminate(pool: pools.Pool, reason: str, idle_only: bool = False) -> None:
    """Mark `pool` Terminated, unless it is already (by `_end_idle`) or, with `idle_only`, a
    job holds it."""
    if pool.status == pools.TERMINATED or (idle_only and pool.status != pools.AVAILABLE):
        return
    pools.move(pool, pools.TERMINATED, reason=reason)


def main(argv: list[str] | None = None) -> None:
    """`python -m ddpjob.local.warmpools.poolkeeper POOL_FOLDER`: keep the pool until it ends."""
    folder = Path((sys.argv[1:] if argv is None else argv)[0]).absolute()
    home = folder.parent.parent
    logging.basicConfig(level=logging.INFO, format="%(asctime)s poolkeeper %(message)s")
    proctitle.set_title("pool-keeper", folder)
    signalled: list[str] = []
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: signalled.append(
            pools.read(folder).stop_requested if (folder / pools.RECORD).exists() else "stopped"))
    signal.signal(signal.SIGHUP, signal.SIG_IGN)
    processes.become_subreaper()  # what outlives the template ends with the pool
    template = Template(folder, folder / "template.log", spares=True)
    name = template.start() if pools.read(folder).preloaded else ""

    def started(pool: pools.Pool) -> None:
        pool.keeper_pid, pool.template = os.getpid(), name
        pool.template_pid = template.proc.pid if template.proc else None
        pool.template_started = proctree.started(pool.template_pid)

    pools.update(home, folder.name, started)
    reason, memory = "", MemoryWatch()
    try:
        while True:
            reason, idle_only = why_end(folder, template, signalled, memory)
            if reason and (not idle_only or _end_idle(home, folder.name, reason)):
                break
            time.sleep(POLL_S)
    finally:
        template.stop()
        proctree.end_descendants(LEFTOVER_GRACE_S)
        poolcache.remove(folder)
        log.info("pool %s ended: %s", folder.name, reason)
        with contextlib.suppress(OSError, ValueError, TypeError):
            pools.update(home, folder.name,
                         lambda pool: _terminate(pool, reason or "the keeper failed"))


def spawn(folder: Path, seed: str | None = None) -> None:
    """Start the keeper of the pool in `folder`, outside this process's tree: the child that
    starts it exits at once, so the keeper is nobody's below us (fork this before becoming a
    subreaper). Its template gets the str hash seed `seed` fixes (the creating job's)."""
    out = os.open(folder / "keeper.log", os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    pid = os.fork()
    if pid == 0:
        try:
            subprocess.Popen([sys.executable, "-m", pools.KEEPER_MODULE, str(folder)],
                             stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                             start_new_session=True, env=templates.environment(seed),
                             )  # fmt: skip
        finally:
            os._exit(0)
    os.close(out)
    os.waitpid(pid, 0)


class Lease:
    """A job's hold on a warm pool; to `hosts.Hosts` it is the job's template (`start`,
    `command`, `stop`, `name`), which a pool that is not `preloaded` does not hold (its hosts
    run an image's own program, or `DDPJOB_PRELOAD=0`: `start` is never called)."""

    def __init__(self, home: Path, job: AdmittedJob, key: str, preloaded: bool = True):
        self.home, self.admitted, self.key, self.preloaded = home, job, key, preloaded
        self.job = job.name
        self.pool_id = ""
        self.reused_from = ""  # the job whose pool this job reuses ("" when started cold)
        self.name = ""  # the template's `DDPJOB_ZYGOTE` for the job's hosts, once started
        self.pool_template = ""  # the pool's own
        self.template_pid: int | None = None  # read before any job process ran (`stop`)
        # The pool's socket as the job's hosts reach it (their namespaces hide the pools).
        self.socket_link = JobStore(home).job_dir(self.job) / templates.SOCKET_NAME

    def acquire(self) -> None:
        """Claim a matching Available pool, else create one and start its keeper (call it
        before the supervisor becomes a subreaper)."""
        pool = pools.claim(self.home, self.key, self.job, os.getpid())
        if pool is not None:
            self.pool_id, self.reused_from = pool.id, pool.jobs[-2]["job"]
            self.pool_template, self.template_pid = pool.template, pool.template_pid
            return
        folder = pools.create(self.home, self.admitted, self.key, os.getpid(), self.preloaded)
        self.pool_id = folder.name
        spawn(folder, self.admitted.hash_seed)

    def start(self) -> str:
        """The template's name, once the pool's keeper started it (again for each attempt's
        hosts: `stop` removed the way to it)."""
        deadline = time.monotonic() + KEEPER_START_S
        while not self.pool_template and time.monotonic() < deadline:
            pool = pools.read(self.folder)
            if pool.template or pool.status == pools.TERMINATED:
                self.pool_template, self.template_pid = pool.template, pool.template_pid
                break
            time.sleep(0.01)
        if not self.pool_template:
            raise RuntimeError(f"the keeper of warm pool {self.pool_id} did not start")
        self.name = self._reachable(self.pool_template)
        return self.name

    def _reachable(self, value: str) -> str:
        """The pool template's `DDPJOB_ZYGOTE` (`value`) as the job's hosts reach it: through a
        hard link of its socket in the job's folder, which names the same socket, where the
        hosts' namespaces hide the pools' folder (`hosts`)."""
        if not value:
            return value
        pid, _, path = value.partition(":")
        self.socket_link.unlink(missing_ok=True)
        try:
            os.link(path, self.socket_link)
        except OSError as exc:  # the template is gone: its clients start their modules
            log.warning("warm pool %s: its template's socket is gone (%s)", self.pool_id, exc)
            return value
        return forkrun.template_value(int(pid), str(self.socket_link))

    @property
    def folder(self) -> Path:
        """The pool's folder (where its hosts' caches are)."""
        return pools.pools_dir(self.home) / self.pool_id

    command = Template.command

    def stop(self) -> None:
        """The job's hosts ended: end every process the job started that is left, however it
        detached (a background child, a new session, a double fork: the template is their
        subreaper, so they are below it), SIGTERM then SIGKILL after `LEFTOVER_GRACE_S`. The
        pool, its template and its spare worker interpreters stay: they are the processes in
        the template's session, which no job process can join (a spare that was handed a
        worker exits with it)."""
        self.socket_link.unlink(missing_ok=True)
        self.name = ""
        pool_session = proctree.session_of(self.template_pid) if self.template_pid else None
        if pool_session is not None:
            proctree.end_below(self.template_pid, LEFTOVER_GRACE_S,
                               lambda pid: proctree.session_of(pid) == pool_session)

    def release(self, end_reason: str = "") -> None:
        """The job ended: the pool stays warm for the job's keep-alive (or ends: `end_reason`)."""
        if self.pool_id:
            pools.release(self.home, self.pool_id, self.job, self.admitted.keep_alive_s,
                          end_reason)


if __name__ == "__main__":
    main()
