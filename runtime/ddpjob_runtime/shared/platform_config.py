"""`input/config/platform.json`: what the local backend hands each host's runtime, one typed object.

The backend writes it (`PlatformConfig.to_json`), the host reads it (`from_json`, which validates
it: the file comes from outside the runtime). Every key is optional and named in `contract`; no
file is `PlatformConfig()`, "SageMaker did the platform's work" (see docs/contract.md).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from ddpjob_runtime.shared import contract as c
from ddpjob_runtime.shared.errors import RuntimeContractError

_TEXT_KEYS = (c.PLATFORM_JOB_NAME, c.PLATFORM_OUTPUT_PATH, c.PLATFORM_CHECKPOINT_URI,
              c.PLATFORM_STAGED_CHECKPOINT, c.PLATFORM_SUBMIT_DIRECTORY, c.PLATFORM_STATUS_FILE,
              c.PLATFORM_PYTHON_DIR, c.PLATFORM_STAND_INS)
KEYS = frozenset((*_TEXT_KEYS, c.PLATFORM_MASTER_PORT, c.PLATFORM_HOST_ADDRESSES,
                  c.PLATFORM_CHANNELS, c.PLATFORM_TENSORBOARD))


@dataclass(frozen=True)
class ChannelSource:
    """Where a channel's files come from: a URI the runtime downloads, or (`staged`) a folder
    the platform staged once for the whole job, which the runtime hard-links."""

    location: str
    staged: bool = False

    def to_json(self) -> str | dict[str, str]:
        return {c.PLATFORM_STAGED: self.location} if self.staged else self.location


@dataclass(frozen=True)
class PlatformConfig:
    """The platform's duties this host's runtime takes over (field names are `contract`'s keys)."""

    job_name: str | None = None
    master_port: int | None = None
    host_addresses: Mapping[str, str] = field(default_factory=dict)
    channels: Mapping[str, ChannelSource] = field(default_factory=dict)
    output_path: str | None = None
    checkpoint_s3_uri: str | None = None
    staged_checkpoint: str | None = None
    submit_directory: str | None = None
    status_file: str | None = None
    tensorboard_output_config: Mapping[str, str] | None = None
    python_dir: str | None = None  # a local host's own Python environment, for what it installs
    stand_ins: str | None = None  # a folder the workers get last on their path if needed

    def to_json(self) -> dict[str, Any]:
        """platform.json's object; unset keys left out."""
        data = {key: getattr(self, key) for key in _TEXT_KEYS}
        data.update({
            c.PLATFORM_MASTER_PORT: self.master_port,
            c.PLATFORM_HOST_ADDRESSES: dict(self.host_addresses),
            c.PLATFORM_CHANNELS: {n: s.to_json() for n, s in self.channels.items()},
            c.PLATFORM_TENSORBOARD: self.tensorboard_output_config and dict(
                self.tensorboard_output_config),
        })
        return {key: value for key, value in data.items() if value is not None and value != {}}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> PlatformConfig:
        """The config of platform.json's object; RuntimeContractError naming a bad key."""
        if unknown := sorted(set(data) - KEYS):
            raise _error(f"unknown keys {unknown} (known: {', '.join(sorted(KEYS))})")
        port = data.get(c.PLATFORM_MASTER_PORT)
        if port is not None and (type(port) is not int or not 0 < port < 65536):
            raise _error(f"{c.PLATFORM_MASTER_PORT!r} must be a TCP port, got {port!r}")
        tensorboard = data.get(c.PLATFORM_TENSORBOARD)
        return cls(
            **{key: _text(key, data.get(key)) for key in _TEXT_KEYS},
            master_port=port,
            host_addresses=_names(c.PLATFORM_HOST_ADDRESSES, data.get(c.PLATFORM_HOST_ADDRESSES)),
            channels={name: _channel(name, spec) for name, spec in
                      _mapping(c.PLATFORM_CHANNELS, data.get(c.PLATFORM_CHANNELS)).items()},
            tensorboard_output_config=None if tensorboard is None
            else _names(c.PLATFORM_TENSORBOARD, tensorboard))

    def merged(self, data: Mapping[str, Any]) -> PlatformConfig:
        """This config with `data`'s keys (platform.json's shape) replacing its own, validated."""
        return PlatformConfig.from_json({**self.to_json(), **data})


def _error(problem: str) -> RuntimeContractError:
    return RuntimeContractError(f"{c.PLATFORM_FILE}: {problem}")


def _text(key: str, value: object) -> str | None:
    if value is not None and not isinstance(value, str):
        raise _error(f"{key!r} must be a string, got {value!r}")
    return value


def _mapping(key: str, value: object) -> Mapping[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise _error(f"{key!r} must be a JSON object, got {value!r}")
    return value


def _names(key: str, value: object) -> dict[str, str]:
    names = _mapping(key, value)
    if not all(isinstance(v, str) for v in names.values()):
        raise _error(f"{key!r} must map names to strings, got {value!r}")
    return dict(names)


def _channel(name: str, spec: object) -> ChannelSource:
    if isinstance(spec, str):
        return ChannelSource(spec)
    folder = spec.get(c.PLATFORM_STAGED) if isinstance(spec, dict) else None
    if not isinstance(folder, str):
        raise _error(f"channel {name!r} must be a URI or {{\"staged\": \"/abs/folder\"}}, "
                     f"got {spec!r}")
    return ChannelSource(folder, staged=True)
