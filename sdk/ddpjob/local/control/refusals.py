"""What the local backend refuses before anything is written, in one place: one line each.

`LocalSession` (and the official SDK's session answered here) call `check_request`; the
boto3-shaped client then answers the service's own checks (`validation`) as SageMaker would.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ddpjob.distribution import MP_PARAMETERS
from ddpjob.errors import UserInputError

#: What the local backend cannot do with a channel: (request key, value) -> why.
_CHANNEL_REFUSED = {
    ("InputMode", "Pipe"): "Pipe input mode streams through a FIFO, which local mode lacks",
    ("InputMode", "FastFile"): "FastFile input mode mounts S3, which local mode does not",
    ("S3DataType", "ManifestFile"): "manifest files are not expanded locally",
    ("S3DataType", "AugmentedManifestFile"): "augmented manifests are not expanded locally",
    ("S3DataType", "Converse"): "Converse datasets are not read locally",
    ("CompressionType", "Gzip"): "compressed channels are not decompressed locally",
}

def channel_refusal(channel: Mapping[str, Any]) -> str | None:
    """Why the local backend refuses this channel config (one line), or None."""
    source = channel.get("DataSource", {}).get("S3DataSource", {})
    for (key, value), why in _CHANNEL_REFUSED.items():
        if channel.get(key, source.get(key)) == value:
            return (f"inputs[{channel.get('ChannelName')!r}]: {key}={value!r} cannot run "
                    f"locally ({why}); use File mode, S3Prefix and uncompressed data, or a "
                    f"SageMaker Session")
    return None


def check_request(request: Mapping[str, Any]) -> None:
    """UserInputError (one line) for what local hosts cannot do; members that have no effect
    on this machine are logged (the argument table's "local mode" column)."""
    from ddpjob.arguments import log_no_local_effect

    for channel in request.get("InputDataConfig") or []:
        why = channel_refusal(channel)
        if why:
            raise UserInputError(why)
    mode = request.get("AlgorithmSpecification", {}).get("TrainingInputMode", "File")
    if mode != "File":
        raise UserInputError(f"input_mode {mode!r} cannot run locally (local hosts read "
                             f"channels as files): use input_mode='File' or a SageMaker Session")
    if "InstanceGroups" in request.get("ResourceConfig", {}):
        raise UserInputError("instance_groups cannot run locally (local mode runs one group): "
                             "use instance_type and instance_count")
    if MP_PARAMETERS in (request.get("HyperParameters") or {}):
        raise UserInputError("distribution smdistributed.modelparallel needs SageMaker's "
                             "model-parallel container; it cannot run locally")
    log_no_local_effect(request)
