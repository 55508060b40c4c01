"""A local host of a job whose TrainingImage is SageMaker's PyTorch training container (DLC).

Such a host runs the DLC's own entry point, as SageMaker runs it in the container: the `train`
of `sagemaker-training` with `SAGEMAKER_TRAINING_MODULE=sagemaker_pytorch_container.training:main`
(the `ddpjob[dlc]` extra installs both toolkits), so a user sees on this machine what the DLC
will do with the job. `python -m ddpjob.local.hostkinds.dlc_host JOB_DIR HOST` is that host: it
does the platform's duties around the toolkit (`platform_host`) and exits with the toolkit's code.

The toolkit runs in `$DDPJOB_DLC_PYTHON` (a Python that mirrors the DLC: torch and the two
toolkits), default this Python; ddpjob need not be installed there: the code archive carries
`ddpjob_runtime`. In its own namespace (`sandbox`) a host is `algo-N` with its `/opt/ml`, as on
SageMaker; elsewhere hosts are named by loopback addresses and the toolkit finds its root through
`SAGEMAKER_BASE_DIR`. The toolkit's torchrun rendezvous is on the first host at its fixed port
7777, so one such job runs at a time on a machine (`fixed_port`: the next one waits).
"""

from __future__ import annotations

import importlib.util
import re
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ddpjob_runtime.shared import contract

from ddpjob import image_uris
from ddpjob.local.hostkinds import hostpython, platform_host

MODULE = "ddpjob.local.hostkinds.dlc_host"
TRAINING_MODULE = "sagemaker_pytorch_container.training:main"
TOOLKITS = ("sagemaker_training", "sagemaker_pytorch_container")
EXTRA = 'pip install "ddpjob[dlc]"'
# The DLCs whose toolkits run on local hosts (the model-parallel one needs SageMaker's cluster).
LOCAL_REPOSITORIES = ("pytorch-training", "huggingface-pytorch-training")


def dlc_tag(request: dict[str, Any]) -> str | None:
    """The image tag when the request's TrainingImage is SageMaker's PyTorch training DLC."""
    image = (request.get("AlgorithmSpecification") or {}).get("TrainingImage")
    found = image_uris.dlc_repository(image)
    return found[1] if found and found[0] in LOCAL_REPOSITORIES else None


def _toolkits_missing() -> str | None:
    python = hostpython.image_python()
    if python == sys.executable:
        missing = [m for m in TOOLKITS if importlib.util.find_spec(m) is None]
        return ", ".join(missing) or None
    probe = f"import {', '.join(TOOLKITS)}"
    try:
        done = subprocess.run([python, "-c", probe], capture_output=True, timeout=60, check=False)
    except OSError as exc:
        return f"{hostpython.PYTHON_ENV}={python} cannot run ({exc.strerror})"
    return None if done.returncode == 0 else f"{hostpython.PYTHON_ENV}={python} lacks them"


# Launches SageMaker's PyTorch container offers that need what a machine cannot give its hosts.
_DLC_LAUNCH_REFUSED = {
    contract.SMDDP: "smdistributed.dataparallel (smddprun, SageMaker's own library on p4d/p5 "
                    "hosts)",
    contract.PYTORCH_DDP: "pytorchddp (the toolkit launches it with smddprun)",
    contract.PYTORCH_XLA: "pytorchxla (Trainium)",
}


def dlc_refusal(request: Mapping[str, Any], tag: str) -> str | None:
    """Why local hosts cannot run this request on SageMaker's PyTorch container of image tag
    `tag` (one line), or None."""
    kind = request["ResourceConfig"].get("InstanceType", "")
    if kind.startswith("ml.") and re.search(r"(^|-)gpu(-|$)", tag):
        return (f"ResourceConfig.InstanceType {kind!r} with the GPU image {tag!r}: local mode "
                f"runs SageMaker's PyTorch container on CPU instance types (ml.m5, ml.c5, ...) or "
                f"on instance_type 'local' / 'local_gpu'")
    hps = request.get("HyperParameters") or {}
    for name, what in _DLC_LAUNCH_REFUSED.items():
        if hps.get(name) == "true":
            return (f"distribution {what} cannot run on this machine; use "
                    f"{{'torch_distributed': {{'enabled': True}}}}")
    if hps.get(contract.MPI) == "true" and request["ResourceConfig"].get("InstanceCount", 1) > 1:
        return ("distribution 'mpi' over several hosts needs sshd on every host, which local "
                "hosts do not run; use instance_count=1 or torch_distributed")
    return None


def request_problem(request: dict[str, Any]) -> str | None:
    """Why this machine cannot run the DLC request (one line), or None (also for other images)."""
    tag = dlc_tag(request)
    if tag is None:
        return None
    if missing := _toolkits_missing():
        return (f"TrainingImage is SageMaker's PyTorch container: running it locally needs its "
                f"toolkits sagemaker-training and sagemaker-pytorch-training ({missing}): {EXTRA}")
    return dlc_refusal(request, tag)


# ------------------------------------------------------------------ the host itself


class DlcHost(platform_host.PlatformHost):
    """One local host of a DLC job: the toolkit's `train`, with the platform's duties around."""

    program = "SageMaker's PyTorch toolkit"

    def command(self) -> list[str]:
        """The toolkit's `train`, in this host's Python over the one that mirrors the DLC
        (its `pip install -r requirements.txt` lands there, and ends with the host)."""
        return [str(self.bin_dir / "python"), "-c",
                "from sagemaker_training.cli.train import main; main()"]

    def environment(self) -> dict[str, str]:
        """The container's environment for the toolkit: its module (and, as every such host,
        its Python first on PATH and the job root: `PlatformHost.environment`)."""
        return {**super().environment(), "SAGEMAKER_TRAINING_MODULE": TRAINING_MODULE}

    def workdir(self) -> Path:
        """The code folder, where the toolkit unpacks the source."""
        return self.root / "code"


if __name__ == "__main__":
    platform_host.main(DlcHost, MODULE)
