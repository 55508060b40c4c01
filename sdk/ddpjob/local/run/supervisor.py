"""The detached process that runs one local job: `python -m ddpjob.local.run.supervisor <job dir>`.

It stages the job's inputs once for all hosts (`staging`), starts the hosts (`hosts`), then
loops: observe them, ask `decision.decide` what to do, apply the answer to the hosts and to the
job's state on disk (for any process to read). When the platform failed (a host killed without
a word) and `RetryStrategy.MaximumRetryAttempts` allows, the whole job is retried, as SageMaker
does: Restarting, then every host starts again from the latest checkpoint; a spot job whose
capacity was reclaimed (`interruptions`) restarts the same way, as long as MaxWaitTimeInSeconds
allows. Whatever happens it
ends every host, removes what it staged and writes the final status. It runs in its own
session, so the job survives the notebook kernel that started it, and with umask 077, so
everything the job writes is private to the user.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping
from pathlib import Path

from ddpjob_runtime.shared import processes

from ddpjob.job_status import EndCause, SecondaryStatus, ending
from ddpjob.local.base import detached, failure_cause, interruptions
from ddpjob.local.base.admitted import AdmittedJob
from ddpjob.local.base.jobstate import MESSAGES, JobState
from ddpjob.local.base.jobstore import JobStore
from ddpjob.local.hostkinds import hostkind
from ddpjob.local.isolation import fixed_port
from ddpjob.local.run import staging
from ddpjob.local.run.decision import Decision, Observation, decide, platform_failure, should_retry
from ddpjob.local.run.hosts import Hosts
from ddpjob.local.warmpools import poolkeeper
from ddpjob.local.watch import metrics
from ddpjob.local.watch.stacks import dump_before_end, with_hung_note

log = logging.getLogger("ddpjob.local.run.supervisor")

POLL_S = 0.1
REASON_CHARS = 1024


class Supervisor:
    """Runs the job `name` of `store` to its end."""

    def __init__(self, store: JobStore, name: str):
        self.store, self.name = store, name
        self.job_dir = store.job_dir(name)
        self.job = store.job(name)
        self.kind = hostkind.named(self.job.host_kind)
        self.lease = _lease(store.home, self.job, self.kind)
        self.hosts = Hosts(self.job, self.job_dir, self.kind, self.lease)  # pool: once acquired
        self.cause: EndCause | None = None
        self.failed_host: str | None = None
        self.failure_seen_at: float | None = None  # when a host was first seen failed
        self.internal_error: str | None = None
        self.hung: str | None = None  # which ranks were elsewhere while others waited
        self.signalled = False
        self.metrics = metrics.MetricCollector(
            self.job_dir, self.job.metric_definitions,
            {h: self.hosts.log_file(h) for h in self.hosts.names})
        self.noted: set[str] = set()  # the hosts' status messages already in the history
        self.max_retries = self.job.max_retries
        self.retries: list[str] = []  # the cause of each job retry so far
        self.reclaimed: list[str] = []  # the hosts an interruption with notice is ending first
        self.port_lock: fixed_port.PortLock | None = None  # held while hosts use port 7777

    def _update(self, change) -> JobState:
        return self.store.update(self.name, change)

    # --- the loop ------------------------------------------------------------------------

    def _observe(self) -> Observation:
        state = self.store.state(self.name)
        now = time.time()
        running = state.training_s(now) if state.training_start_time is not None \
            else now - state.creation_time
        codes = self.hosts.exit_codes()
        # what the failed hosts wrote matters only until the supervisor decided to end them
        failures = self._host_failures(codes) if self.cause is None else []
        if self.failure_seen_at is None and failures:
            self.failure_seen_at = now
        return Observation(
            phases=self.hosts.phases(), exit_codes=codes,
            stop_requested=self.signalled or state.status is SecondaryStatus.STOPPING,
            running_s=running, max_run_s=self.job.max_runtime_s, ending=self.cause,
            waited_s=now - state.creation_time,
            max_wait_s=self.job.max_wait_s,
            interruption=_interruption_due(state, now),
            failed_for_s=0.0 if self.failure_seen_at is None else now - self.failure_seen_at,
            cause_known=any(not failure.is_consequence for failure in failures),
        )  # fmt: skip

    def _apply(self, decision: Decision, codes: dict[str, int | None]) -> None:
        if decision.interrupt is not None:
            self._interrupt(decision.interrupt)
        elif decision.end is not None:
            self.cause, self.failed_host = decision.end, decision.failed_host
            log.info("ending the job: %s%s", decision.end.value,
                     f" ({decision.failed_host} exited {codes[decision.failed_host]})"
                     if decision.failed_host else "")  # fmt: skip
            if decision.end is EndCause.STOP_REQUESTED:
                self._update(JobState.request_stop)
            self.hung = dump_before_end(self.job_dir, self.hosts.names, decision.end.value)
            self.hosts.terminate()
        elif decision.progress is not None:
            self._update(lambda s: s.progress(decision.progress))
        if self.reclaimed and all(codes.get(h) is not None for h in self.reclaimed):
            self.reclaimed = []  # the reclaimed host is gone: its peers go with it
            self.hosts.terminate()
        if self.cause is not None:
            self.hosts.kill_if_overdue()

    def _interrupt(self, event: Mapping[str, object]) -> None:
        """Fire the interruption `event`: with notice, SIGTERM the host it names (all when
        none), SIGKILL after the grace, the job Interrupted; without, SIGKILL the lost host."""
        host, notice, grace = event["host"], bool(event["notice"]), interruptions.grace_s()
        who = f"host {host}" if host else "every host"
        if notice:
            message = (f"Spot interruption ({event['source']}): the capacity of {who} was "
                       f"reclaimed; SIGTERM, then SIGKILL after {grace:g} s")
        else:
            message = f"Host {host} lost without notice ({event['source']}): SIGKILL"
        state = self._update(lambda s: s.interrupted(dict(event), message))
        if state.status is SecondaryStatus.STOPPING or state.is_terminal:
            return  # a stop came first
        log.warning("%s", message)
        with open(self.hosts.log_file(str(host or self.hosts.names[0])), "a") as out:
            out.write(f"{time.strftime('%Y-%m-%d %H:%M:%S')} ddpjob.local.run.supervisor WARNING "
                      f"{message}\n")  # the job's log, where fit() shows it
        if not notice:
            self.hosts.lose(str(host))
            return
        if all(code is not None for code in self.hosts.exit_codes().values()):
            return  # every host ended since the last look: there is no capacity to reclaim
        self.cause = EndCause.INTERRUPTED
        self.reclaimed = [str(host)] if host else []
        self.hosts.terminate(self.reclaimed or None, grace)

    def _note_restarts(self) -> None:
        """Each worker restart a host reported, once in the status history (every host reports
        the same restart)."""
        for message in sorted(self.hosts.messages() - self.noted):
            self.noted.add(message)
            self._update(lambda state, message=message: state.note(message))

    def _watch(self) -> None:
        recorded: dict[str, int | None] = {}
        while True:
            seen = self._observe()
            if seen.exit_codes != recorded:
                recorded = codes = seen.exit_codes
                self._update(lambda state, codes=codes: state.record_exit_codes(codes))
            decision = decide(seen)
            self._apply(decision, seen.exit_codes)
            self._note_restarts()
            self.metrics.poll()
            if decision.done:
                return
            time.sleep(POLL_S)

    def _run_hosts(self, staged: dict[str, dict[str, object]] | None) -> None:
        """Start every host and watch them until they all ended."""
        pids = self.hosts.start(staged)
        self._update(lambda s: s.record_hosts(pids))
        self._watch()

    # --- a job retry ---------------------------------------------------------------------

    def _retry(self) -> bool:
        """After the hosts ended: when the platform failed and retries are left, or a spot
        interruption ended them and MaxWaitTimeInSeconds is not over, end what is left of them,
        show Restarting and the cause, and restage the latest checkpoint; True when the hosts
        are to start again (a stop asked for meanwhile wins)."""
        message = self._restart_message()
        if message is None:
            return False
        if self._update(lambda s: s.retry(message)).status is not SecondaryStatus.RESTARTING:
            if self.cause is EndCause.INTERRUPTED:  # a stop asked for during the notice wins
                self.cause = EndCause.STOP_REQUESTED
            return False
        log.warning("%s", message)
        self.hosts.end_all(restarting=True)
        self.hosts.forget()
        self.cause = self.failed_host = self.hung = self.failure_seen_at = None
        if not self.kind.restores_own_checkpoints:
            staging.stage_checkpoint(self.job_dir, self.job)
        if self._update(JobState.start_again).status is SecondaryStatus.STARTING:
            return True
        self.cause = EndCause.STOP_REQUESTED
        return False

    def _restart_message(self) -> str | None:
        """Why the job starts again (Restarting's message), None when it does not; an
        interrupted job past MaxWaitTimeInSeconds ends as MaxWaitTimeExceeded instead."""
        codes = self.hosts.exit_codes()
        if self.cause is EndCause.INTERRUPTED:
            # The reclaimed hosts are gone whatever their exit codes (docs/rehearsal.md's
            # script saves and exits 0 on SIGTERM): the job restarts.
            state = self.store.state(self.name)
            limit = self.job.max_wait_s
            if limit and time.time() - state.creation_time > limit:
                self.cause = EndCause.MAX_WAIT
                return None
            return (f"Restarting the training job after a spot interruption (attempt "
                    f"{state.attempt + 1})")
        cause = platform_failure(self.cause, self._host_failures(codes), self.hosts.signalled_at)
        if not should_retry(cause, len(self.retries), self.max_retries):
            return None
        what = failure_cause.headline(cause)  # type: ignore[arg-type] - retried: a cause
        self.retries.append(what)
        return (f"Restarting the training job (retry {len(self.retries)} of "
                f"{self.max_retries}) after an internal error: {what}")

    # --- the end -------------------------------------------------------------------------

    def _host_failures(self, codes: dict[str, int | None]) -> list[failure_cause.HostFailure]:
        """What each host that exited non-zero wrote (or that it was killed)."""
        return [
            failure_cause.read_host(h, self.job_dir, code,
                                    self.hosts.exited_at.get(h, time.time()))
            for h, code in codes.items() if code not in (None, 0)
        ]  # fmt: skip

    def _failure_reason(self, codes: dict[str, int | None]) -> str:
        """`AlgorithmError: <the causing host's output/failure>`, at most 1024 characters,
        with ", after N retries" and their causes when the job was retried."""
        reason = failure_cause.reason(self._host_failures(codes), REASON_CHARS) or (
            f"AlgorithmError: the hosts exited with codes {codes}; see {self.job_dir / 'logs'}"
        )
        if self.retries:
            reason = failure_cause.with_retries(reason, self.retries, REASON_CHARS)
        return reason

    def _finish(self) -> None:
        codes = {h: p.returncode for h, p in self.hosts.procs.items()}
        cause = EndCause.HOST_FAILED if self.internal_error else self.cause
        final = ending([c if c is not None else 1 for c in codes.values()], cause)
        reason = None
        if self.internal_error:
            reason = f"InternalServerError: {self.internal_error}"[:REASON_CHARS]
        elif final is SecondaryStatus.FAILED:
            reason = self._failure_reason(codes)
        elif final is SecondaryStatus.MAX_RUNTIME_EXCEEDED:
            limit = self.job.max_runtime_s
            reason = f"MaxRuntimeExceeded: the job ran longer than MaxRuntimeInSeconds ({limit} s)"
        elif final is SecondaryStatus.MAX_WAIT_TIME_EXCEEDED:
            limit = self.job.max_wait_s
            reason = (f"MaxWaitTimeExceeded: the spot job did not complete within "
                      f"MaxWaitTimeInSeconds ({limit} s), interruptions included")
        reason = with_hung_note(reason, self.hung, MESSAGES[final], REASON_CHARS)

        def change(state: JobState) -> bool:
            state.record_exit_codes(codes)
            return state.end(final, reason)

        log.info("job %s: %s", self.name, self._update(change).status.value)

    def _stage(self) -> dict[str, dict[str, object]] | None:
        """Stage the inputs once for all hosts; a host that runs the image's own program stages
        its own, as on SageMaker (`platform_duties`), so nothing is staged for it here."""
        if not self.kind.stages_once:
            return None
        return staging.stage_job(self.store.home, self.job_dir, self.job)

    def _take_fixed_port(self) -> bool:
        """Hosts that rendezvous on the containers' fixed port wait (Starting, naming the job
        ahead) until this job holds it (`fixed_port`); False when the job is stopped meanwhile
        or was pending longer than MaxPendingTimeInSeconds, as SageMaker stops such a job."""
        if not self.kind.on_fixed_port(len(self.hosts.names)):
            return True
        lock = fixed_port.PortLock(self.name)
        limit = self.job.max_pending_s

        def say(message: str) -> None:
            log.info("%s", message)
            self._update(lambda s: s.note_start(f"{MESSAGES[SecondaryStatus.STARTING]}: "
                                                f"{message}"))

        waited = fixed_port.wait_for(lock, limit, lambda: self._observe().stop_requested, say)
        if waited.pending_s:
            say(f"stopped after {waited.pending_s:.0f} s pending, past MaxPendingTimeInSeconds "
                f"({limit} s)")
        self.port_lock = lock if waited.taken else None
        return waited.taken

    def _acquire_pool(self) -> None:
        """Claim a matching warm pool (the history says so) or start a new one."""
        if self.lease is None:
            return
        try:
            self.lease.acquire()
        except Exception:  # noqa: BLE001 - the job still runs, with a template of its own
            log.exception("no warm pool: the job starts its own template")
            self.lease, self.hosts = None, Hosts(self.job, self.job_dir, self.kind)
            return
        self.hosts.pool = self.lease.folder  # known once claimed or created
        if self.lease.reused_from:
            message = (f"{MESSAGES[SecondaryStatus.STARTING]}: reusing the warm pool "
                       f"{self.lease.pool_id} of training job {self.lease.reused_from}")
            self._update(lambda s: s.note_start(message))

    def run(self) -> None:
        """Run the job to its end; the final status is on disk when this returns."""
        try:
            self._acquire_pool()
        finally:
            processes.become_subreaper()  # after the pool's keeper was forked off
        try:
            if self._observe().stop_requested or not self._take_fixed_port():
                self._apply(Decision(end=EndCause.STOP_REQUESTED), {})  # it never started
            else:
                self._update(lambda s: s.progress(SecondaryStatus.DOWNLOADING))
                staged = self._stage()
                self._run_hosts(staged)
                while self._retry():
                    self._run_hosts(staged)
        except Exception as exc:  # noqa: BLE001 - whatever broke, the job must end with a reason
            log.exception("supervisor error")
            self.internal_error = f"the local supervisor failed: {type(exc).__name__}: {exc}"
            if self.cause is None:
                self.cause = EndCause.HOST_FAILED
                self.hosts.terminate()
        finally:
            try:
                self.hosts.end_all()
                if self.port_lock is not None:  # the next job waiting for the port starts
                    self.port_lock.release()
                staging.release(self.store.home, self.job_dir, self.hosts.names)
                if self.lease is not None:  # before the end shows: the next job may claim it
                    self.lease.release(self.internal_error or "")
            except Exception:  # noqa: BLE001 - the final status must still be written
                log.exception("cleanup error")
            self.metrics.poll(final=True)
            self.metrics.close()
            self._finish()


def _interruption_due(state: JobState, now: float) -> Mapping[str, object] | None:
    """The interruption to fire now: the one asked for (`interrupt`), else the current
    attempt's planned one once its moment came (once)."""
    if state.pending is not None:
        return state.pending
    if state.scheduled_fired():
        return None
    start = state.attempt_start_time
    planned = interruptions.due(state.schedule, state.attempt,
                                None if start is None else now - start)
    return None if planned is None else {**planned, "source": "schedule"}


def _lease(home: Path, job: AdmittedJob, kind: hostkind.HostKind) -> poolkeeper.Lease | None:
    """The job's warm pool when it asks for a keep-alive (None otherwise): one with a template
    when its hosts run ddpjob's runtime forked from one, else one without (what SageMaker keeps
    of an instance between jobs: the record and the hosts' caches; a fresh container runs)."""
    if job.pool_key is None:
        return None
    return poolkeeper.Lease(home, job, job.pool_key, kind.forks_from_template())


def main(argv: list[str] | None = None) -> None:
    """`python -m ddpjob.local.run.supervisor <job dir>`."""
    job_dir = detached.folder_argument("ddpjob.local.run.supervisor", "supervisor", argv)
    supervisor = Supervisor(JobStore(job_dir.parent.parent), job_dir.name)
    detached.stop_on_signals(supervisor, log)
    supervisor.run()


if __name__ == "__main__":
    main()
