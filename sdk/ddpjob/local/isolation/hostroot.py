"""Render one simulated host's `/opt/ml`-shaped root from a CreateTrainingJob request.

The files are what SageMaker writes into a training container, plus `platform.json`, which
hands the runtime the platform's duties on this machine (see docs/contract.md).
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ddpjob_runtime.shared import contract, fsutil
from ddpjob_runtime.shared.platform_config import ChannelSource, PlatformConfig

from ddpjob import packaging

LOOPBACK = "127.0.0.1"
GROUP = "homogeneousCluster"


def host_names(request: dict[str, Any]) -> list[str]:
    """`algo-1` … `algo-N`, as SageMaker names a job's hosts."""
    return [f"algo-{i + 1}" for i in range(request["ResourceConfig"].get("InstanceCount", 1))]


def loopback_addresses(request: dict[str, Any]) -> dict[str, str]:
    """`{algo-N: 127.0.0.N}`: one loopback address per host, for names that must resolve (a
    host's own `/etc/hosts`, or SageMaker's container toolkit given addresses as names)."""
    hosts = host_names(request)
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


def sagemaker_files(request: dict[str, Any], host: str) -> dict[str, Any]:
    """`{file name under input/config: content}` that SageMaker itself writes for `host`."""
    hosts = host_names(request)
    kind = request["ResourceConfig"]["InstanceType"]
    channels = request.get("InputDataConfig") or []
    files: dict[str, Any] = {
        contract.HYPERPARAMETERS_FILE: request.get("HyperParameters") or {},
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
            c["ChannelName"]: {
                "TrainingInputMode": c.get("InputMode")
                or request.get("AlgorithmSpecification", {}).get("TrainingInputMode", "File"),
                "S3DistributionType": c["DataSource"]["S3DataSource"].get(
                    "S3DataDistributionType", "FullyReplicated"
                ),
                "RecordWrapperType": c.get("RecordWrapperType", "None"),
            }
            for c in channels
        },
    }
    checkpoint = request.get("CheckpointConfig")
    if checkpoint:
        files[contract.CHECKPOINT_CONFIG_FILE] = {
            "LocalPath": checkpoint.get("LocalPath") or "/opt/ml/checkpoints",
            "S3Uri": checkpoint["S3Uri"],
        }
    return files


def prepare(
    request: dict[str, Any], host: str, master_port: int, job_dir: Path,
    staged: Mapping[str, object] | None = None, own_namespace: bool = False,
) -> Path:
    """Create `<job dir>/hosts/<host>/` with SageMaker's files for `host` and ddpjob's
    platform.json; returns the root. `staged` is what the platform staged for the whole job
    (added to platform.json; its `channels` replace the URIs: a channel it leaves out is in
    place already). A host in its `own_namespace` resolves the host names itself (its
    `/etc/hosts`), as on SageMaker; others get their addresses."""
    platform = PlatformConfig(
        job_name=request["TrainingJobName"], master_port=master_port,
        host_addresses={} if own_namespace else dict.fromkeys(host_names(request), LOOPBACK),
        channels={c["ChannelName"]: ChannelSource(c["DataSource"]["S3DataSource"]["S3Uri"])
                  for c in request.get("InputDataConfig") or []},
        output_path=request["OutputDataConfig"]["S3OutputPath"],
        checkpoint_s3_uri=(request.get("CheckpointConfig") or {}).get("S3Uri"),
        status_file=str(status_file(job_dir, host)),
        # SageMaker uploads that folder; on this machine the runtime does
        tensorboard_output_config=request.get("TensorBoardOutputConfig") or None,
        python_dir=str(python_dir(job_dir, host)),
        stand_ins=str(packaging.runtime_source().parent / packaging.STAND_INS),
    )
    root = job_dir / "hosts" / host
    write_config(root, {**sagemaker_files(request, host),
                        contract.PLATFORM_FILE: platform.merged(staged or {}).to_json()})
    return root


def write_config(root: Path, files: Mapping[str, object]) -> None:
    """Write `files` (`{file name under input/config: content}`) under the host root `root`."""
    for name, content in files.items():
        fsutil.write_json(root / contract.CONFIG_DIR / name, content, indent=1)
