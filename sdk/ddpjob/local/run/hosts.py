"""Start, watch and end the simulated hosts of one local job: one `ddpjob-train` each (or the
command of the request's container), each in its own mount namespace where Linux allows it
(`sandbox`): there `/opt/ml` is the host's folder and the staged channels are read-only mounts.
Each host gives up, as it starts, the Linux capabilities `capabilities.given_up` decides."""

from __future__ import annotations

import contextlib
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

from ddpjob_runtime.shared import contract, fsutil, processes

from ddpjob.local.base import failure_cause, proctree
from ddpjob.local.base.admitted import AdmittedJob
from ddpjob.local.base.homelayout import bucket_folder
from ddpjob.local.base.templates import Template
from ddpjob.local.hostkinds import hostkind
from ddpjob.local.isolation import capabilities, gpus, hostroot, sandbox
from ddpjob.local.run import staging
from ddpjob.local.warmpools import poolcache, pools
from ddpjob.local.warmpools.poolkeeper import Lease
from ddpjob.local.watch import rank_output

log = logging.getLogger("ddpjob.local.run.supervisor")

# The runtime gives its workers 5 s after a SIGTERM; then we SIGKILL whatever is left.
STOP_GRACE_S = 10.0
HOSTS_FILE = "etc-hosts"  # under the job folder: every host's /etc/hosts
BOOTSTRAP_MODULE = "ddpjob_runtime.job.bootstrap"  # what `ddpjob-train` runs
STATUS_LIMIT = 64 * 1024  # bytes of a host's status file read, at most


def reserve_port() -> socket.socket:
    """The rendezvous port, held until the job's hosts end: a socket bound to a free port of
    the first host's address with SO_REUSEADDR that never listens.

    A port merely found free can be taken before the first host's store binds it (another
    job's store, any connection's local port), which fails the job. Held so, Linux gives it to
    no ephemeral bind or connection and refuses it to a bind without SO_REUSEADDR, while the
    store (SO_REUSEADDR) still binds and listens on it (`tests/local/test_port_race.py`).
    """
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((hostroot.LOOPBACK, 0))
    return sock


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


def read_status(job_dir: Path, host: str) -> dict[str, Any]:
    """What a host's runtime last wrote to its status file ({} until it wrote one, or when a
    rank put anything but a file of its size there: a link, a FIFO)."""
    path = hostroot.status_file(job_dir, host)
    try:
        status = json.loads(fsutil.read_below(job_dir, str(path.relative_to(job_dir)),
                                              STATUS_LIMIT))
    except (OSError, ValueError):
        return {}
    return status if isinstance(status, dict) else {}


class Hosts:
    """The host processes of the admitted `job` in `job_dir` (of `kind`)."""

    def __init__(self, job: AdmittedJob, job_dir: Path, kind: hostkind.HostKind,
                 template: Template | Lease | None = None, pool: Path | None = None):
        self.job, self.job_dir, self.kind = job, job_dir, kind
        self.pool = pool  # the folder of the warm pool the job runs on (its hosts' caches)
        self.names = list(job.hosts)
        self.procs: dict[str, subprocess.Popen] = {}
        self.kill_at: float | None = None
        self.signalled_at: float | None = None  # when `terminate` first signalled the hosts
        self.grace_s = STOP_GRACE_S  # of the last `terminate`
        self.exited_at: dict[str, float] = {}  # when each host was first seen ended
        self.log_starts: dict[str, int] = {}  # each host's log size when it was started
        self.isolation: str | None = None  # why hosts have no namespace of their own
        self.checked = False  # whether `isolation` is known
        self.rendezvous: socket.socket | None = None  # holds the port: see `reserve_port`
        # the job's own template, or the warm pool's it holds (`poolkeeper.Lease`)
        self.template = template or Template(job_dir, job_dir / "logs" / "template.log",
                                             job.hash_seed)

    def _env(self, root: Path, gpu_ids: list[str], cache: Path | None) -> dict[str, str]:
        env = dict(os.environ)
        env.update(hostroot.home_environment(root))  # its own home; the request may name one
        env.update(self.job.environment)
        env.pop(contract.ENV_ROOT, None)  # in its own namespace the root is /opt/ml itself
        env.pop(poolcache.ENV, None)  # only a job on a warm pool has a cache
        if cache is not None:
            env[poolcache.ENV] = poolcache.env_value(cache, self.isolation is None)
        if self.isolation is not None:  # the fallback: the root is a folder the runtime is told
            env[contract.ENV_ROOT] = str(root)
        env["PYTHONUNBUFFERED"] = "1"  # lines reach the log as they are printed
        env["CUDA_VISIBLE_DEVICES"] = ",".join(gpu_ids)  # "" for `local`: CPU and gloo
        env.pop(contract.ENV_ZYGOTE, None)
        if self.template.name:  # agents and workers are forked from the job's template
            env[contract.ENV_ZYGOTE] = self.template.name
        return env

    def _check_isolation(self) -> None:
        """Whether the hosts get their own namespace; when not, say once per job what differs
        (in the supervisor's log and the first host's, where fit() shows it)."""
        if self.checked:
            return
        self.isolation, self.checked = sandbox.available(), True
        if self.isolation is None:
            return
        message = (f"hosts have no namespace of their own ({self.isolation}): each host's "
                   f"/opt/ml is {self.job_dir / 'hosts'}/<host> through {contract.ENV_ROOT}, so "
                   f"a script that hard-codes /opt/ml misses it; staged channels are read-only "
                   f"files, not read-only mounts; the names algo-N do not resolve")
        if self.pool is not None:
            message += (f"; the warm pool's caches under {self.pool.parent} are not hidden: "
                        f"any job of this user, on no pool or on another, can read and write "
                        f"them by their path")
        log.warning("%s", message)
        with open(self.log_file(self.names[0]), "a") as out:
            out.write(f"{time.strftime('%Y-%m-%d %H:%M:%S')} ddpjob.local.run.hosts WARNING "
                      f"{message}\n")

    def _isolated(self, command: list[str], root: Path, staged: dict[str, Any] | None,
                  hosts_file: Path, pool_cache: Path | None,
                  give_up: frozenset[int]) -> list[str]:
        """`command` run in the host's own namespace: `/opt/ml` is `root`, every staged channel
        a read-only mount at `input/data/<channel>` (`staged` names them), the host's warm-pool
        cache (`pool_cache`) a writable one at `sagemaker/warmpoolcache`, `/etc/hosts` the job's
        `hosts_file`, the job folders and the object cache read-only but for this job's
        `hosts/`, the local bucket's side read-only but for its folder (the escaped objects and
        multipart uploads beside it are the S3 face's alone), the warm pools' folder empty (no
        pool's cache, record or log by its path), the capabilities `give_up` out of its
        bounding set."""
        views = {}
        for name, spec in ((staged or {}).get("channels") or {}).items():
            target = root / contract.DATA_DIR / name
            target.mkdir(parents=True, exist_ok=True)
            views[target] = Path(spec["staged"])
        home = self.job_dir.parent.parent
        cache = staging.cache_of(home).root
        bucket = bucket_folder(home)
        for folder in (cache, bucket.parent, bucket):  # one made later is read-only here too
            folder.mkdir(mode=0o700, exist_ok=True)
        pools_folder = pools.pools_dir(home)
        pools_folder.mkdir(mode=0o700, exist_ok=True)  # a pool made later is hidden too
        return sandbox.wrap(command, root=root,
                            read_only=[self.job_dir.parent, cache, bucket.parent],
                            writable=[self.job_dir / "hosts", bucket], hosts_file=hosts_file,
                            views=views, writable_views={root / poolcache.IN_ROOT: pool_cache}
                            if pool_cache is not None else None, hidden=[pools_folder],
                            give_up=give_up)

    def _pool_cache(self, host: str, root: Path, own_namespace: bool) -> Path | None:
        """Host `host`'s warm-pool cache, placed in its root (None when the job is on no pool)."""
        if self.pool is None:
            return None
        cache = poolcache.host_folder(self.pool, host)
        poolcache.place(root, cache, own_namespace)
        return cache

    def start(self, staged: dict[str, dict[str, Any]] | None = None) -> dict[str, int]:
        """Render each host's root (with what `staging` staged for it) and start its runtime;
        returns host -> pid."""
        command = train_command()
        self.rendezvous = reserve_port()
        port = self.rendezvous.getsockname()[1]
        slices = gpus.host_shares(self.job.instance_type, len(self.names))
        (self.job_dir / "logs").mkdir(mode=0o700, exist_ok=True)
        self._check_isolation()
        own = self.isolation is None
        hosts_file = self.job_dir / HOSTS_FILE
        if own:
            hosts_file.write_text(
                sandbox.hosts_file_text(hostroot.loopback_addresses(self.names)))
        if self.kind.forks_from_template():
            self.template.start()  # ddpjob's runtime: hosts, agents and workers forked from it
            command = self.template.command(BOOTSTRAP_MODULE)
        for host, gpu_ids in zip(self.names, slices, strict=True):
            host_staged = (staged or {}).get(host)
            mounted = {**host_staged, "channels": {}} if own and host_staged else host_staged
            root = hostroot.prepare(self.job, host, port, self.job_dir, mounted, own)
            host_command = self.kind.host_command(self.job_dir, host) or command
            cache = self._pool_cache(host, root, own)
            give_up = capabilities.given_up(root=os.geteuid() == 0, namespaces=own, staged=bool(
                (host_staged or {}).get(contract.PLATFORM_CHANNELS)))
            preexec = processes.ends_with_this_process()
            if own:  # the sandbox gives them up once the namespace is mounted
                host_command = self._isolated(host_command, root, host_staged, hosts_file, cache,
                                              give_up)
            elif give_up:
                preexec = capabilities.preexec(capabilities.droppable(give_up), preexec)
            with open(self.log_file(host), "ab") as out:
                self.log_starts[host] = out.tell()
                self.procs[host] = subprocess.Popen(
                    host_command, cwd=root, env=self._env(root, gpu_ids, cache),
                    stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                    start_new_session=True, preexec_fn=preexec,
                )  # fmt: skip
            log.info("started %s (pid %d): %s", host, self.procs[host].pid, root)
        return {host: proc.pid for host, proc in self.procs.items()}

    def log_file(self, host: str) -> Path:
        """Where everything `host` prints goes."""
        return hostroot.log_file(self.job_dir, host)

    def phases(self) -> dict[str, str]:
        """host -> the phase its runtime last wrote ("Starting" until it wrote one)."""
        return {h: str(read_status(self.job_dir, h).get("phase", "Starting"))
                for h in self.names}

    def messages(self) -> set[str]:
        """The messages the hosts' runtimes last wrote beside their phase (worker restarts)."""
        found = (read_status(self.job_dir, h).get("message")
                 for h in self.names)
        return {m for m in found if isinstance(m, str)}

    def exit_codes(self) -> dict[str, int | None]:
        """host -> exit code, None while it runs."""
        codes = {host: proc.poll() for host, proc in self.procs.items()}
        for host in (h for h, code in codes.items() if code is not None):
            self.exited_at.setdefault(host, time.time())  # a killed host writes no time itself
        return codes

    def terminate(self, names: list[str] | None = None, grace_s: float = STOP_GRACE_S) -> None:
        """Ask the hosts `names` (default: all) to stop: SIGTERM, which the runtime forwards to
        its workers; `kill_if_overdue` SIGKILLs what is left `grace_s` later."""
        for host, proc in self.procs.items():
            if (names is None or host in names) and proc.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    proc.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + grace_s
        self.kill_at = deadline if self.kill_at is None else min(self.kill_at, deadline)
        self.grace_s = grace_s
        if self.signalled_at is None:
            self.signalled_at = time.time()

    def lose(self, host: str) -> None:
        """Host `host` is lost without notice: SIGKILL its process tree at once."""
        proc = self.procs[host]
        tree = [proc.pid, *proctree.descendants(proc.pid)]
        proctree.signal_all(tree, signal.SIGKILL)

    def kill_if_overdue(self) -> None:
        """SIGKILL everything below the supervisor once the grace after `terminate` is over."""
        if self.kill_at is not None and time.monotonic() > self.kill_at:
            log.warning("hosts still running %.0f s after SIGTERM: SIGKILL", self.grace_s)
            proctree.signal_all(proctree.descendants(os.getpid()), signal.SIGKILL)
            self.kill_at = None

    def end_all(self, restarting: bool = False) -> None:
        """Wait for the hosts (SIGKILL after the grace), then end any process left below us;
        `restarting`: but the job's own template, which the next attempt's hosts fork from
        (it runs no job code: a fresh host needs no fresh template, and a recovery is faster)."""
        for proc in self.procs.values():
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=STOP_GRACE_S)
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        kept = self.template.running_pid() if restarting and isinstance(
            self.template, Template) else None
        if kept is None:
            self.template.stop()
        proctree.end_descendants(grace_s=2.0, keep={kept} if kept else set())
        if self.rendezvous is not None:  # its store is gone; a restart reserves a fresh port
            self.rendezvous.close()
            self.rendezvous = None
        for index, host in enumerate(self.names):  # what a killed host could not remove itself
            if not self.kind.runs_image_program and host in self.log_starts:
                rank_output.recover(self.job_dir / "hosts" / host / "tmp", self.log_file(host),
                                    self.log_starts[host], index)
            for leftover in ("tmp", hostroot.HOME_DIR):  # its home goes as a container's does
                shutil.rmtree(self.job_dir / "hosts" / host / leftover, ignore_errors=True)
            poolcache.remove_place(self.job_dir / "hosts" / host)  # the cache stays in the pool

    def forget(self) -> None:
        """Before the ended hosts start again (a job retry, a spot restart): forget their
        processes and phases, and remove their roots, so that nothing of the last attempt is
        read as new and the next starts on fresh hosts (checkpoints come from the URI)."""
        self.procs, self.exited_at = {}, {}
        self.kill_at = self.signalled_at = None
        for host in self.names:
            hostroot.status_file(self.job_dir, host).unlink(missing_ok=True)
            failure_cause.clear(self.job_dir / "hosts" / host / "output")  # if rmtree fails
            shutil.rmtree(self.job_dir / "hosts" / host, ignore_errors=True)
