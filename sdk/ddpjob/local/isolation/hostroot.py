"""Render one simulated host's `/opt/ml`-shaped root from an admitted job.

The files are what SageMaker writes into a training container, plus `platform.json`, which
hands the runtime the platform's duties on this machine (see docs/contract.md), and the host's
own home (`home_environment`).
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from ddpjob_runtime.shared import contract, fsutil
from ddpjob_runtime.shared.platform_config import ChannelSource, PlatformConfig

from ddpjob import packaging
from ddpjob.local.base import templates
from ddpjob.local.base.admitted import AdmittedJob

LOOPBACK = "127.0.0.1"
GROUP = "homogeneousCluster"
HOME_DIR = "home"  # below the host's root: its HOME
PIP_CONFIG_ENV = "PIP_CONFIG_FILE"


def loopback_addresses(hosts: Sequence[str]) -> dict[str, str]:
    """`{algo-N: 127.0.0.N}`: one loopback address per host, for names that must resolve (a
    host's own `/etc/hosts`, or SageMaker's container toolkit given addresses as names)."""
    if len(hosts) > 254:
        raise ValueError(f"at most 254 hosts on loopback, got {len(hosts)}")
    return {host: f"127.0.0.{i + 1}" for i, host in enumerate(hosts)}


def status_file(job_dir: Path, host: str) -> Path:
    """Where host `host`'s runtime writes its phase."""
    return job_dir / "hosts" / f"{host}.status"


def python_dir(job_dir: Path, host: str) -> Path:
    """Host `host`'s own Python environment (`ddpjob_runtime.shared.pyenv`), where what the job
    installs goes; removed when the host ends."""
    return job_dir / "hosts" / f"{host}.python"


def log_file(job_dir: Path, host: str) -> Path:
    """Where everything host `host` prints goes."""
    return job_dir / "logs" / f"{host}.log"


def home_dir(root: Path) -> Path:
    """The HOME of the host whose root is `root` (`prepare` makes it, private): SageMaker's
    container has a home of its own (HOME=/root), so what a script or a requirement's build
    writes into `~` stays with the host, never in the user's home."""
    return root / HOME_DIR


def home_environment(root: Path) -> dict[str, str]:
    """What gives the processes of the host at `root` its own home (`home_dir`) whatever this
    process's environment says: HOME, the XDG base folders below it and pip's cache there;
    the user's own Python packages and pip configuration stay visible
    (`templates.user_python`, and `PIP_CONFIG_FILE`: an index or a proxy this machine needs
    is found under the user's home)."""
    home = home_dir(root)
    return {"HOME": str(home), "XDG_CACHE_HOME": str(home / ".cache"),
            "XDG_CONFIG_HOME": str(home / ".config"),
            "XDG_DATA_HOME": str(home / ".local" / "share"),
            "XDG_STATE_HOME": str(home / ".local" / "state"),
            "PIP_CACHE_DIR": str(home / ".cache" / "pip"), **templates.user_python(),
            **_pip_config()}


def _pip_config() -> dict[str, str]:
    """`PIP_CONFIG_FILE` naming the user's pip configuration, which pip looks for under HOME
    (none when the environment names one already, or the user has none)."""
    if PIP_CONFIG_ENV in os.environ:
        return {}
    config = Path(os.environ.get("XDG_CONFIG_HOME") or Path.home() / ".config")
    found = [p for p in (config / "pip" / "pip.conf", Path.home() / ".pip" / "pip.conf")
             if p.is_file()]
    return {PIP_CONFIG_ENV: str(found[0])} if found else {}


def sagemaker_files(job: AdmittedJob, host: str) -> dict[str, Any]:
    """`{file name under input/config: content}` that SageMaker itself writes for `host`."""
    hosts, kind = list(job.hosts), job.instance_type
    files: dict[str, Any] = {
        contract.HYPERPARAMETERS_FILE: job.hyperparameters,
        contract.RESOURCE_CONFIG_FILE: {
            "current_host": host,
            "hosts": hosts,
            "network_interface_name": "lo",
            "current_instance_type": kind,
            "current_group_name": GROUP,
            "instance_groups": [
                {"instance_group_name": GROUP, "instance_type": kind, "hosts": hosts}
            ],
        },
        contract.INPUT_DATA_CONFIG_FILE: {
            c.name: {"TrainingInputMode": c.input_mode, "S3DistributionType": c.distribution,
                     "RecordWrapperType": c.record_wrapper}
            for c in job.channels
        },
    }
    if job.checkpoint:
        files[contract.CHECKPOINT_CONFIG_FILE] = {
            "LocalPath": job.checkpoint.local_path, "S3Uri": job.checkpoint.s3_uri}
    return files


def prepare(
    job: AdmittedJob, host: str, master_port: int, job_dir: Path,
    staged: Mapping[str, object] | None = None, own_namespace: bool = False,
) -> Path:
    """Create `<job dir>/hosts/<host>/` with SageMaker's files for `host` and ddpjob's
    platform.json; returns the root. `staged` is what the platform staged for the whole job
    (added to platform.json; its `channels` replace the URIs: a channel it leaves out is in
    place already). A host in its `own_namespace` resolves the host names itself (its
    `/etc/hosts`), as on SageMaker; others get their addresses."""
    platform = PlatformConfig(
        job_name=job.name, master_port=master_port,
        host_addresses={} if own_namespace else dict.fromkeys(job.hosts, LOOPBACK),
        channels={c.name: ChannelSource(c.uri) for c in job.channels},
        output_path=job.output_path,
        checkpoint_s3_uri=job.checkpoint.s3_uri if job.checkpoint else None,
        status_file=str(status_file(job_dir, host)),
        # SageMaker uploads that folder; on this machine the runtime does
        tensorboard_output_config=job.tensorboard,
        python_dir=str(python_dir(job_dir, host)),
        stand_ins=str(packaging.runtime_source().parent / packaging.STAND_INS),
    )
    root = job_dir / "hosts" / host
    write_config(root, {**sagemaker_files(job, host),
                        contract.PLATFORM_FILE: platform.merged(staged or {}).to_json()})
    home_dir(root).mkdir(mode=0o700, exist_ok=True)
    return root


def write_config(root: Path, files: Mapping[str, object]) -> None:
    """Write `files` (`{file name under input/config: content}`) under the host root `root`."""
    for name, content in files.items():
        fsutil.write_json(root / contract.CONFIG_DIR / name, content, indent=1)
