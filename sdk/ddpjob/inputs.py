"""`fit(inputs=...)` -> the request's InputDataConfig channels, and the local data to upload first.

Accepted, as in the official SDK: a URI (channel `training`), or a dict channel -> URI. A value
may also be a `TrainingInput` (ddpjob's or the official SDK's: an object with a `.config`) or a
ready channel config (`{"DataSource": {"S3DataSource": {...}}}`). URIs: `s3://…`; `file://…` and
plain paths name local files or folders: read in place by backends that can (local jobs), else
uploaded to the session's input location for the channel before the job is created.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Protocol

from ddpjob_runtime.shared import storage

from ddpjob.errors import UserInputError


class HasConfig(Protocol):
    """A TrainingInput, ddpjob's or the official SDK's: a channel config without its name."""

    config: dict[str, Any]


#: One channel's data: a URI or path, a TrainingInput, or a channel config.
Source = str | os.PathLike | HasConfig | Mapping[str, Any]
#: What `fit(inputs=...)` takes: one channel's data ("training"), or channel name -> data.
Inputs = Source | Mapping[str, Source] | None

MAX_CHANNELS = 20
CHANNEL_NAME = re.compile(r"^[A-Za-z0-9.\-_]{1,64}$")


@dataclass(frozen=True)
class Input:
    """One channel of `fit(inputs=...)`, checked: where its data is (parsed once) and the
    channel config given with it (a TrainingInput's), if any."""

    name: str
    location: storage.Location
    template: Mapping[str, Any] | None = None


@dataclass(frozen=True)
class Channel:
    """One input channel: its request config, and the local data to upload first (if any)."""

    name: str
    config: dict[str, Any] = field(compare=False)
    upload_from: Path | None = None


def s3_prefix_channel(name: str, uri: str) -> dict[str, Any]:
    """A channel reading every object under `uri`, on every host (the official SDK's default)."""
    source = {"S3DataType": "S3Prefix", "S3Uri": uri, "S3DataDistributionType": "FullyReplicated"}
    return {"DataSource": {"S3DataSource": source}, "ChannelName": name}


def _template_and_uri(name: str, value: Any) -> tuple[Mapping[str, Any] | None, Any]:
    """The channel config given (a TrainingInput's or a dict), and the data's URI or path."""
    config = getattr(value, "config", value)  # ddpjob's or the official SDK's TrainingInput
    if not isinstance(config, Mapping):
        return None, value
    source = config.get("DataSource", {}).get("S3DataSource")
    if not isinstance(source, Mapping) or not source.get("S3Uri"):
        raise UserInputError(f"inputs[{name!r}]: a channel config needs "
                             f"DataSource.S3DataSource.S3Uri")
    return dict(config), source["S3Uri"]


def _with_uri(template: Mapping[str, Any] | None, name: str, uri: str) -> dict[str, Any]:
    if template is None:
        return s3_prefix_channel(name, uri)
    source = {**template["DataSource"]["S3DataSource"], "S3Uri": uri}
    return {**template, "DataSource": {**template["DataSource"], "S3DataSource": source},
            "ChannelName": name}


def _input(name: str, value: Any) -> Input:
    template, value = _template_and_uri(name, value)
    if isinstance(value, os.PathLike):
        value = os.fspath(value)
    if not isinstance(value, str):
        raise UserInputError(f"inputs[{name!r}] must be a URI (s3://… or file://…), a local "
                             f"path or a TrainingInput, got {type(value).__name__}")
    location = storage.parse(value, argument=f"inputs[{name!r}]")
    if location.scheme == "s3" and not location.key and not value.endswith("/"):
        location = replace(location, uri=value + "/")
    elif location.path is not None and not location.path.exists():
        raise UserInputError(f"inputs[{name!r}] {value!r}: no such file or folder")
    return Input(name, location, template)


def parse(inputs: Inputs) -> tuple[Input, ...]:
    """The checked channels of `inputs` (UserInputError naming the bad one); () for None."""
    if inputs is None:
        return ()
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
        result.append(_input(name, value))
    return tuple(result)


def channels(inputs: Iterable[Input],
             input_location: Callable[[str], str | None]) -> list[Channel]:
    """The request's channels of `inputs`; `input_location(channel)` is where local data of
    that channel is uploaded, or None when the backend reads it in place (asked only for local
    data)."""
    result = []
    for item in inputs:  # S3 data, and local data this backend reads in place, stay where they are
        target = None if item.location.is_s3 else input_location(item.name)
        uri = item.location.uri if target is None else storage.as_folder(target)
        result.append(Channel(item.name, _with_uri(item.template, item.name, uri),
                              upload_from=None if target is None else item.location.path))
    return result
