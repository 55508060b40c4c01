"""A local host of a request that names its own container command, run as SageMaker runs it.

`AlgorithmSpecification.ContainerEntrypoint` + `ContainerArguments` replace the image's entry
point on every host. The official SDK v3's `ModelTrainer` sends such requests: its drivers
travel as the input channel `sm_drivers` (beside the code as `code`) and the command is
`/bin/bash -c "chmod +x /opt/ml/input/data/sm_drivers/sm_train.sh && .../sm_train.sh"`, which
runs `environment.py` and then `torchrun_driver.py`, `mpi_driver.py` or `basic_script_driver.py`.
Those drivers run here unchanged: `python -m ddpjob.local.hostkinds.container_host JOB_DIR HOST`
does the platform's duties around the command (`platform_host`) and gives it what a SageMaker host
gives it: the config files with hosts named `algo-N`, `TRAINING_JOB_NAME`, a Python with pip on PATH
(`hostpython`: a venv per host, where `requirements.txt` installs go), the host's share of the
machine's GPUs on `local_gpu` and GPU instance types (`gpus`: CUDA_VISIBLE_DEVICES, and the
`nvidia-smi --list-gpus` the drivers count SM_NUM_GPUS from), the request's Environment. The drivers
hard-code `/opt/ml` and the master `algo-1:7777`, so each host runs in its own mount namespace
(`sandbox`, applied by `hosts`), where `/opt/ml` is the host's folder and `algo-N` resolves to a
loopback address; where the machine has none, such a request is refused before anything starts. The
fixed port allows one multi-host job at a time (`fixed_port`: the next one waits).
"""

from __future__ import annotations

import contextlib
import os
import shutil
from pathlib import Path
from typing import Any

from ddpjob_runtime.shared import fsutil, storage
from ddpjob_runtime.shared.contract import DEFAULT_ROOT
from ddpjob_runtime.shared.errors import DdpjobError
from ddpjob_runtime.shared.storage.uris import LOCAL_BUCKET

from ddpjob.local.base import arns
from ddpjob.local.hostkinds import hostpython, platform_host
from ddpjob.local.isolation import sandbox

MODULE = "ddpjob.local.hostkinds.container_host"


def _algorithm(request: dict[str, Any]) -> dict[str, Any]:
    return request.get("AlgorithmSpecification") or {}


def _program_problem(program: str) -> str | None:
    """Why `program` (ContainerEntrypoint[0]) cannot start on a local host, or None."""
    where = "AlgorithmSpecification.ContainerEntrypoint[0]"
    if not program.strip():
        return f"{where} is empty: it must name the program to run, e.g. '/bin/bash'"
    if "/" not in program:
        if shutil.which(program) is None and program not in hostpython.COMMANDS:
            return f"{where} {program!r}: no such program on this machine's PATH"
        return None
    if not program.startswith("/"):
        return (f"{where} {program!r}: a relative path names nothing on a local host; give a "
                f"program name or an absolute path")
    path = os.path.normpath(program)
    if path == DEFAULT_ROOT or path.startswith(DEFAULT_ROOT + "/"):
        return None  # staged by the platform (a channel, the code) before the command starts
    if not (os.path.isfile(path) and os.access(path, os.X_OK)):
        return f"{where} {program!r}: not an executable file on this machine"
    return None


def request_problem(request: dict[str, Any]) -> str | None:
    """Why this machine cannot run the request's container command (one line), or None."""
    if problem := _program_problem(_algorithm(request)["ContainerEntrypoint"][0]):
        return problem
    if (reason := sandbox.available()) is not None:
        return (f"AlgorithmSpecification.ContainerEntrypoint: a container command needs each "
                f"local host in its own mount namespace, where /opt/ml is the host's folder and "
                f"algo-1 resolves (ModelTrainer's drivers hard-code both), and this machine "
                f"gives none: {reason}")
    return None


DRIVERS_CHANNEL, TRAIN_SCRIPT = "sm_drivers", "sm_train.sh"  # ModelTrainer's (sagemaker.train)


def drivers_problem(request: dict[str, Any], bucket_root: Path) -> str | None:
    """Why ModelTrainer's drivers, as its `sm_train.sh` in the drivers channel of a request
    with a container command starts them, cannot run on these local hosts (one line), or None:
    its MPI driver over several hosts starts sshd on each (`/usr/sbin/sshd`), which local hosts
    do not run. The script is read where this machine keeps it (the local bucket or a folder);
    a channel on S3 itself is not read before the job."""
    if request["ResourceConfig"].get("InstanceCount", 1) < 2:
        return None
    uri = next((c["DataSource"]["S3DataSource"]["S3Uri"] for c in
                request.get("InputDataConfig") or [] if c["ChannelName"] == DRIVERS_CHANNEL), "")
    local_bucket = f"s3://{LOCAL_BUCKET}/"
    with contextlib.suppress(OSError, ValueError, DdpjobError):
        folder = (fsutil.contained(bucket_root, uri[len(local_bucket):], what="key")
                  if uri.startswith(local_bucket) else storage.parse(uri).path)
        if folder is not None and b"mpi_driver.py" in (folder / TRAIN_SCRIPT).read_bytes():
            return ("ModelTrainer's MPI() over several hosts needs an SSH daemon on every host "
                    "(its mpi_driver starts /usr/sbin/sshd), which local hosts do not run; use "
                    "Torchrun() or instance_count=1 locally")
    return None


class ContainerHost(platform_host.PlatformHost):
    """One local host of a container-command job: the command, the platform's duties around."""

    program = "the container command"

    def command(self) -> list[str]:
        algorithm = self.job.algorithm
        return [*algorithm["ContainerEntrypoint"], *(algorithm.get("ContainerArguments") or [])]

    def environment(self) -> dict[str, str]:
        """This host's environment (the request's Environment included), with what SageMaker
        adds and the host's Python first on PATH; /opt/ml is the root, as in a container."""
        env = super().environment()
        env.update(TRAINING_JOB_NAME=self.job.name, TRAINING_JOB_ARN=arns.job_arn(self.job.name))
        return env


if __name__ == "__main__":
    platform_host.main(ContainerHost, MODULE)
