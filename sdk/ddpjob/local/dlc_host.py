"""A local host of a job whose TrainingImage is SageMaker's PyTorch training container (DLC).

Such a host runs the DLC's own entry point, as SageMaker runs it in the container: the `train`
of `sagemaker-training` with `SAGEMAKER_TRAINING_MODULE=sagemaker_pytorch_container.training:main`
(the `ddpjob[dlc]` extra installs both toolkits), so a user sees on this machine what the DLC
will do with the job. `python -m ddpjob.local.dlc_host JOB_DIR HOST` is that host: it does the
platform's duties (`platform_duties`) around the toolkit and exits with the toolkit's code.

The toolkit runs in `$DDPJOB_DLC_PYTHON` (a Python that mirrors the DLC: torch and the two
toolkits), default this Python; ddpjob need not be installed there: the code archive carries
`ddpjob_runtime`. In its own namespace (`sandbox`) a host is `algo-N` with its `/opt/ml`, as on
SageMaker; elsewhere hosts are named by loopback addresses and the toolkit finds its root through
`SAGEMAKER_BASE_DIR`. The toolkit's torchrun rendezvous is on the first host at its fixed port
7777, so one such job runs at a time on a machine.
"""

from __future__ import annotations

import contextlib
import importlib.util
import logging
import os
import re
import signal
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

from ddpjob_runtime import contract, failure, phases

from ddpjob import image_uris
from ddpjob.local import hostroot, platform_duties, sandbox
from ddpjob.local.jobstore import JobStore

log = logging.getLogger("ddpjob.local.dlc_host")

MODULE = "ddpjob.local.dlc_host"
PYTHON_ENV = "DDPJOB_DLC_PYTHON"
TRAINING_MODULE = "sagemaker_pytorch_container.training:main"
TOOLKITS = ("sagemaker_training", "sagemaker_pytorch_container")
EXTRA = 'pip install "ddpjob[dlc]"'
TOOLKIT_PORT = 7777  # sagemaker_training.torch_distributed.MASTER_PORT
# The DLCs whose toolkits run on local hosts (the model-parallel one needs SageMaker's cluster).
LOCAL_REPOSITORIES = ("pytorch-training", "huggingface-pytorch-training")
# Launches the DLC offers that need what a machine cannot give its local hosts.
_REFUSED = {
    "sagemaker_distributed_dataparallel_enabled": "smdistributed.dataparallel (smddprun, "
                                                  "SageMaker's own library on p4d/p5 hosts)",
    "sagemaker_pytorch_ddp_enabled": "pytorchddp (the toolkit launches it with smddprun)",
    "sagemaker_pytorch_xla_multi_worker_enabled": "pytorchxla (Trainium)",
}


def dlc_tag(request: dict[str, Any]) -> str | None:
    """The image tag when the request's TrainingImage is SageMaker's PyTorch training DLC."""
    image = (request.get("AlgorithmSpecification") or {}).get("TrainingImage")
    found = image_uris.dlc_repository(image)
    return found[1] if found and found[0] in LOCAL_REPOSITORIES else None


def is_dlc_request(request: dict[str, Any]) -> bool:
    """Whether the request runs on SageMaker's PyTorch (or Hugging Face PyTorch) training DLC."""
    return dlc_tag(request) is not None


def toolkit_python() -> str:
    """The Python that runs the toolkits: `$DDPJOB_DLC_PYTHON`, else this one."""
    return os.environ.get(PYTHON_ENV) or sys.executable


def _toolkits_missing() -> str | None:
    python = toolkit_python()
    if python == sys.executable:
        missing = [m for m in TOOLKITS if importlib.util.find_spec(m) is None]
        return ", ".join(missing) or None
    probe = f"import {', '.join(TOOLKITS)}"
    try:
        done = subprocess.run([python, "-c", probe], capture_output=True, timeout=60, check=False)
    except OSError as exc:
        return f"{PYTHON_ENV}={python} cannot run ({exc.strerror})"
    return None if done.returncode == 0 else f"{PYTHON_ENV}={python} lacks them"


def request_problem(request: dict[str, Any]) -> str | None:
    """Why this machine cannot run the DLC request (one line), or None (also for other images)."""
    tag = dlc_tag(request)
    if tag is None:
        return None
    missing = _toolkits_missing()
    if missing:
        return (f"TrainingImage is SageMaker's PyTorch container: running it locally needs its "
                f"toolkits sagemaker-training and sagemaker-pytorch-training ({missing}): {EXTRA}")
    kind = request["ResourceConfig"].get("InstanceType", "")
    if kind.startswith("ml.") and re.search(r"(^|-)gpu(-|$)", tag):
        return (f"ResourceConfig.InstanceType {kind!r} with the GPU image {tag!r}: local mode "
                f"runs SageMaker's PyTorch container on CPU instance types (ml.m5, ml.c5, ...) or "
                f"on instance_type 'local' / 'local_gpu'")
    hps = request.get("HyperParameters") or {}
    for name, what in _REFUSED.items():
        if hps.get(name) == "true":
            return (f"distribution {what} cannot run on this machine; use "
                    f"{{'torch_distributed': {{'enabled': True}}}}")
    if hps.get("sagemaker_mpi_enabled") == "true" and request["ResourceConfig"].get(
            "InstanceCount", 1) > 1:
        return ("distribution 'mpi' over several hosts needs sshd on every host, which local "
                "hosts do not run; use instance_count=1 or torch_distributed")
    return None


def host_command(request: dict[str, Any], job_dir: Path, host: str) -> list[str] | None:
    """The command of local host `host` when the request runs on the DLC, else None."""
    if not is_dlc_request(request):
        return None
    return [sys.executable, "-m", MODULE, str(job_dir), host]


# ------------------------------------------------------------------ the host itself


def _toolkit_env(root: Path, own_namespace: bool) -> dict[str, str]:
    """The container's environment for the toolkit: its module, torchrun on PATH, and the job
    root (`/opt/ml` itself in the host's own namespace)."""
    env = dict(os.environ)
    python = Path(toolkit_python())
    env.update(SAGEMAKER_TRAINING_MODULE=TRAINING_MODULE,
               PATH=os.pathsep.join([str(python.parent), env.get("PATH", "")]))
    env.pop(contract.ENV_ROOT, None)
    if not own_namespace:
        env[contract.ENV_ROOT] = str(root)
    return env


def _port_free(port: int) -> bool:
    with socket.socket() as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as torch's store binds it
        try:
            sock.bind(("", port))
        except OSError:
            return False
    return True


class DlcHost:
    """One local host of a DLC job, from the config files to the uploads."""

    def __init__(self, job_dir: Path, host: str):
        self.request = JobStore(job_dir.parent.parent).request(job_dir.name)
        self.host, self.job_dir = host, job_dir
        self.root = job_dir / "hosts" / host
        self.own_namespace = sandbox.inside(self.root)
        self.status_file = hostroot.status_file(job_dir, host)
        self.sync = platform_duties.checkpoint_sync(self.request, self.root)
        self.tensorboard = platform_duties.tensorboard_sync(self.request, host, self.root)
        self.proc: subprocess.Popen | None = None

    def _prepare(self) -> None:
        phases.write_phase(self.status_file, "Downloading")
        platform_duties.write_config(self.request, self.host, self.root, self.job_dir,
                                     self.own_namespace)
        for folder in ("code", "model", "output/data"):
            (self.root / folder).mkdir(parents=True, exist_ok=True)
        platform_duties.stage_channels(self.request, self.root)
        self.sync.download()
        first = hostroot.host_names(self.request)[0] == self.host
        if first and len(hostroot.host_names(self.request)) > 1 and not _port_free(TOOLKIT_PORT):
            raise RuntimeError(f"port {TOOLKIT_PORT}, where SageMaker's PyTorch toolkit starts its "
                               f"torchrun rendezvous, is in use on this machine (another job on "
                               f"SageMaker's PyTorch container?); one such job runs at a time")

    def _run_toolkit(self) -> int:
        phases.write_phase(self.status_file, "Training")
        command = [toolkit_python(), "-c", "from sagemaker_training.cli.train import main; main()"]
        log.info("host %s%s: %s", self.host, "" if self.own_namespace else
                 f" ({hostroot.loopback_addresses(self.request)[self.host]})", " ".join(command))
        self.proc = subprocess.Popen(command, cwd=self.root / "code", start_new_session=True,
                                     env=_toolkit_env(self.root, self.own_namespace))
        with self.sync.running(), self.tensorboard.running():
            return self.proc.wait()

    def stop(self, signum: int, _frame: object) -> None:
        """SIGTERM from the supervisor: pass it to the toolkit's whole process group."""
        if self.proc is not None and self.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signum)
        else:
            raise SystemExit(128 + signum)

    def run(self) -> int:
        """This host's part of the job; the exit code (the toolkit's, else 1)."""
        code = 1
        try:
            self._prepare()
            code = self._run_toolkit()
        except Exception as exc:  # noqa: BLE001 - the host fails with a reason, like SageMaker
            log.exception("host %s failed before training", self.host)
            failure.write_failure(self.root / "output",
                                  f"{self.host}: {type(exc).__name__}: {exc}")
        finally:
            phases.write_phase(self.status_file, "Uploading")
            code = self._finish(code)
        log.info("host %s finished with exit code %d", self.host, code)
        return code

    def _finish(self, code: int) -> int:
        try:
            self.sync.upload()
            self.tensorboard.upload()
            platform_duties.upload_results(self.request, self.host, self.root)
        except Exception as exc:  # noqa: BLE001 - a failed upload fails the host
            log.error("uploading the results failed: %s", exc)
            if code == 0:
                failure.write_failure(self.root / "output", f"{self.host}: upload: {exc}")
                return 1
        return code


def main(argv: list[str] | None = None) -> None:
    """`python -m ddpjob.local.dlc_host JOB_DIR HOST`."""
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) != 2:
        sys.exit("usage: python -m ddpjob.local.dlc_host JOB_DIR HOST")
    logging.basicConfig(level=logging.INFO, format="%(asctime)s platform %(message)s")
    host = DlcHost(Path(argv[0]).absolute(), argv[1])
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, host.stop)
    sys.exit(host.run())


if __name__ == "__main__":
    main()
