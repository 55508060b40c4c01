"""`fit(inputs=...)` -> the request's InputDataConfig channels, and the local data to upload first.

Accepted, as in the official SDK: a URI (channel `training`), or a dict channel -> URI. A value
may also be a ready channel config (`{"DataSource": {"S3DataSource": {...}}}`) or an object with
such a `.config` (the official SDK's `TrainingInput`). URIs: `s3://…`; `file://…` and plain
paths name local files or folders: passed as `file://` URIs in local mode, uploaded to
`<data prefix>/<channel>/` (S3) before a SageMaker job is created.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ddpjob_runtime import storage

from ddpjob.errors import UserInputError

MAX_CHANNELS = 20
CHANNEL_NAME = re.compile(r"^[A-Za-z0-9.\-_]{1,64}$")


@dataclass(frozen=True)
class Channel:
    """One input channel: its request config, and the local data to upload first (if any)."""

    name: str
    config: dict[str, Any] = field(compare=False)
    upload_from: Path | None = None


def s3_prefix_channel(name: str, uri: str) -> dict[str, Any]:
    """A channel reading every object under `uri`, on every host (the official SDK's default)."""
    return {
        "DataSource": {
            "S3DataSource": {
                "S3DataType": "S3Prefix",
                "S3Uri": uri,
                "S3DataDistributionType": "FullyReplicated",
            }
        },
        "ChannelName": name,
    }


def _channel(name: str, value: Any, local: bool,
             data_prefix: Callable[[], str] | None) -> Channel:
    config = getattr(value, "config", value)  # the official SDK's TrainingInput
    if isinstance(config, Mapping):
        if "DataSource" not in config:
            raise UserInputError(f"inputs[{name!r}]: a channel config needs a 'DataSource'")
        return Channel(name, {**config, "ChannelName": name})
    if isinstance(value, os.PathLike):
        value = os.fspath(value)
    if not isinstance(value, str):
        raise UserInputError(f"inputs[{name!r}] must be a URI (s3://… or file://…) or a local "
                             f"path, got {type(value).__name__}")
    location = storage.parse(value, argument=f"inputs[{name!r}]")
    if location.scheme == "s3":
        if not location.key and not value.endswith("/"):
            value += "/"
        return Channel(name, s3_prefix_channel(name, value))
    if not location.path.exists():
        raise UserInputError(f"inputs[{name!r}] {value!r}: no such file or folder")
    if local:
        return Channel(name, s3_prefix_channel(name, location.uri))
    if data_prefix is None:  # pragma: no cover - the estimator always passes one
        raise UserInputError(f"inputs[{name!r}]: local data needs a place to upload it")
    uri = storage.as_folder(storage.join(data_prefix(), name))
    return Channel(name, s3_prefix_channel(name, uri), upload_from=location.path)


def channels(inputs: Any, *, local: bool,
             data_prefix: Callable[[], str] | None = None) -> list[Channel]:
    """The channels of `inputs` (UserInputError naming the bad one); [] for None.

    `data_prefix()` is where local data of a SageMaker job goes (called only when needed).
    """
    if inputs is None:
        return []
    if isinstance(inputs, (str, os.PathLike)) or hasattr(inputs, "config"):
        inputs = {"training": inputs}
    if not isinstance(inputs, Mapping):
        raise UserInputError(f"inputs must be a URI, a local path or a dict of channel -> URI, "
                             f"got {type(inputs).__name__}")
    if len(inputs) > MAX_CHANNELS:
        raise UserInputError(f"inputs: {len(inputs)} channels given; SageMaker allows at most "
                             f"{MAX_CHANNELS}")
    result = []
    for name, value in inputs.items():
        if not isinstance(name, str) or not CHANNEL_NAME.match(name) or name in (".", ".."):
            raise UserInputError(f"inputs: channel name {name!r} is not allowed; use 1-64 "
                                 f"letters, digits, '.', '-' or '_' (not '.' or '..')")
        result.append(_channel(name, value, local, data_prefix))
    return result
