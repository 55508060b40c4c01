"""What SageMaker itself does around a training container, done on this machine for a host that
runs the image's own program (SageMaker's PyTorch toolkit, or a request's container command such
as ModelTrainer's drivers), which does none of it.

Before the program starts: the config files under `input/config` (host names `algo-N` where the
host has its own namespace and `/etc/hosts`, else loopback addresses, which the toolkit resolves
and torchrun connects to), every channel staged into `input/data/<channel>`, and everything
under `CheckpointConfig.S3Uri` brought down into the checkpoint folder. While it runs: every
host's new or changed files of its checkpoint folder uploaded to `S3Uri`, stamped with the job and
host so that different bytes from two hosts under one name are warned about
(`ddpjob_runtime.platform.folder_sync`, the runtime's own sync), and from the first host those of
the TensorBoard folder to `TensorBoardOutputConfig.S3OutputPath`. After it ends: a last round of
both and, from the first host, `model/` and `output/data/` as `model.tar.gz` / `output.tar.gz`
under `<S3OutputPath>/<job>/output/`.
"""

from __future__ import annotations

import json
from pathlib import Path

from ddpjob_runtime.platform import channels, results
from ddpjob_runtime.platform.environment import checkpoint_local_dir
from ddpjob_runtime.platform.folder_sync import FolderSync
from ddpjob_runtime.platform.mirrors import tensorboard_sync as tensorboard_sync_of
from ddpjob_runtime.shared import contract, storage
from ddpjob_runtime.shared.hyperparameters import decode
from ddpjob_runtime.shared.platform_config import ChannelSource
from ddpjob_runtime.shared.upload_stamps import Writer

from ddpjob.local.base.admitted import AdmittedJob
from ddpjob.local.isolation import hostroot


def config_files(job: AdmittedJob, host: str, own_namespace: bool) -> dict[str, object]:
    """`{file under input/config: content}` as SageMaker writes them for `host`, a file:// code
    URI made a path (the toolkit reads paths). Host names are `algo-N` in the host's own
    namespace (its `/etc/hosts` resolves them), else their loopback addresses."""
    files = hostroot.sagemaker_files(job, host)  # no platform.json: no ddpjob runtime
    if not own_namespace:
        addresses = hostroot.loopback_addresses(job.hosts)
        resources = files[contract.RESOURCE_CONFIG_FILE]
        resources["current_host"] = addresses[host]
        resources["hosts"] = list(addresses.values())
        resources["instance_groups"][0]["hosts"] = list(addresses.values())
    hyperparameters = dict(files[contract.HYPERPARAMETERS_FILE])
    if contract.SUBMIT_DIRECTORY in hyperparameters:  # JSON (v2), or raw (v3's tuner sends it so)
        uri = decode(hyperparameters)[contract.SUBMIT_DIRECTORY]
        location = storage.parse(uri, argument=contract.SUBMIT_DIRECTORY)
        if not location.is_s3:
            hyperparameters[contract.SUBMIT_DIRECTORY] = json.dumps(str(location.path))
    files[contract.HYPERPARAMETERS_FILE] = hyperparameters
    return files


def stage_channels(job: AdmittedJob, root: Path) -> None:
    """Every channel's S3Prefix into `input/data/<channel>`, as the runtime stages a channel."""
    channels.stage({c.name: ChannelSource(c.uri) for c in job.channels},
                   lambda name: root / contract.DATA_DIR / name)


def checkpoint_sync(job: AdmittedJob, host: str, root: Path) -> FolderSync:
    """SageMaker's checkpoint sync between the checkpoint folder of `host` (every host has
    one) and CheckpointConfig.S3Uri: all of S3Uri down before the job, the host's new or
    changed files up while and after it runs."""
    local = checkpoint_local_dir(root, {"LocalPath": job.checkpoint.local_path}
                                 if job.checkpoint else {})
    return FolderSync(local, job.checkpoint.s3_uri if job.checkpoint else None,
                      writer=Writer(job.name, host))


def tensorboard_sync(job: AdmittedJob, host: str, root: Path) -> FolderSync:
    """The upload of TensorBoardOutputConfig's folder, from the first host (a no-op elsewhere
    and without the config)."""
    return tensorboard_sync_of(root, job.tensorboard if host == job.hosts[0] else None)


def upload_results(job: AdmittedJob, host: str, root: Path) -> None:
    """From the first host: `model/` and `output/data/` as tar.gz under the job's output path."""
    if host != job.hosts[0]:
        return
    prefix = storage.join(job.output_path, job.name, "output")
    results.upload_results(root / contract.MODEL_DIR, root / contract.OUTPUT_DIR / "data", prefix)
