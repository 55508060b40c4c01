"""Read the job root (`/opt/ml`-shaped) into one frozen snapshot: the container contract's input.

Only reading and validating lives here; `sm_variables` renders the snapshot into `SM_*`.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ddpjob_runtime.errors import RuntimeContractError

DEFAULT_ROOT = "/opt/ml"
ROOT_ENV = "SAGEMAKER_BASE_DIR"
# The hyperparameter prefixes the runtime owns; they never reach the user's script.
RESERVED_PREFIXES = ("sagemaker_", "ddpjob_")


def job_root() -> Path:
    """The job root: `$SAGEMAKER_BASE_DIR`, else `/opt/ml`."""
    return Path(os.environ.get(ROOT_ENV) or DEFAULT_ROOT)


def decode_hyperparameters(raw: dict[str, Any]) -> dict[str, Any]:
    """JSON-decode every value (as the official SDK encodes them), falling back to the raw value."""
    decoded = {}
    for name, value in raw.items():
        try:
            decoded[name] = json.loads(value)
        except (TypeError, ValueError):
            decoded[name] = value
    return decoded


def is_reserved(name: str) -> bool:
    """Whether a hyperparameter belongs to the runtime rather than to the user's script."""
    return name.startswith(RESERVED_PREFIXES)


@dataclass(frozen=True)
class TrainingEnvironment:
    """What the platform wrote under the job root, validated. Paths are absolute."""

    root: Path
    hyperparameters: dict[str, Any]
    resource_config: dict[str, Any]
    input_data_config: dict[str, Any]
    checkpoint_config: dict[str, Any] = field(default_factory=dict)
    platform: dict[str, Any] = field(default_factory=dict)

    @property
    def current_host(self) -> str:
        return self.resource_config["current_host"]

    @property
    def hosts(self) -> list[str]:
        return list(self.resource_config["hosts"])

    @property
    def host_index(self) -> int:
        return self.hosts.index(self.current_host)

    @property
    def is_master(self) -> bool:
        return self.host_index == 0

    @property
    def user_hyperparameters(self) -> dict[str, Any]:
        return {k: v for k, v in self.hyperparameters.items() if not is_reserved(k)}

    @property
    def reserved_hyperparameters(self) -> dict[str, Any]:
        return {k: v for k, v in self.hyperparameters.items() if is_reserved(k)}

    @property
    def entry_point(self) -> str:
        """`sagemaker_program`: the script, module or shell script to run."""
        program = self.hyperparameters.get("sagemaker_program")
        if not isinstance(program, str) or not program:
            raise RuntimeContractError(
                "hyperparameters.json: 'sagemaker_program' (the entry point) is missing or empty"
            )
        return program

    @property
    def submit_directory(self) -> str | None:
        value = self.hyperparameters.get("sagemaker_submit_directory")
        return str(value) if value else None

    @property
    def job_name(self) -> str:
        return str(
            self.platform.get("job_name") or self.hyperparameters.get("sagemaker_job_name") or ""
        )

    # Folders of the contract.
    @property
    def code_dir(self) -> Path:
        return self.root / "code"

    @property
    def model_dir(self) -> Path:
        return self.root / "model"

    @property
    def input_dir(self) -> Path:
        return self.root / "input"

    @property
    def input_config_dir(self) -> Path:
        return self.root / "input" / "config"

    @property
    def output_dir(self) -> Path:
        return self.root / "output"

    @property
    def output_data_dir(self) -> Path:
        return self.root / "output" / "data"

    @property
    def output_intermediate_dir(self) -> Path:
        return self.root / "output" / "intermediate"

    def channel_dir(self, channel: str) -> Path:
        return self.root / "input" / "data" / channel

    @property
    def checkpoint_dir(self) -> Path:
        """checkpointconfig.json's LocalPath (an `/opt/ml/...` path is mapped under the root)."""
        return checkpoint_local_dir(self.root, self.checkpoint_config)


def checkpoint_local_dir(root: Path, checkpoint_config: dict[str, Any]) -> Path:
    """The checkpoint folder SageMaker syncs: `LocalPath` (default `/opt/ml/checkpoints`), an
    `/opt/ml/...` path mapped under `root` when the root is elsewhere (a local host)."""
    local = checkpoint_config.get("LocalPath")
    if not local:
        return root / "checkpoints"
    path = Path(local)
    if path.is_relative_to(DEFAULT_ROOT) and root != Path(DEFAULT_ROOT):
        return root / path.relative_to(DEFAULT_ROOT)
    return path


def read_config(root: Path, name: str, required: bool = False) -> dict[str, Any]:
    """The JSON object `input/config/<name>` under `root`; {} when it is optional and missing."""
    path = root / "input" / "config" / name
    value = _read_json(path, required)
    return {} if value is None else _object(path, value)


def _read_json(path: Path, required: bool) -> Any:
    try:
        text = path.read_text()
    except FileNotFoundError:
        if required:
            raise RuntimeContractError(f"{path}: required file is missing") from None
        return None
    except OSError as exc:
        raise RuntimeContractError(f"{path}: cannot be read ({exc.strerror})") from None
    try:
        return json.loads(text)
    except ValueError as exc:
        raise RuntimeContractError(f"{path}: not valid JSON ({exc})") from None


def _object(path: Path, value: Any) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise RuntimeContractError(f"{path}: expected a JSON object, got {type(value).__name__}")
    return value


def _check_resource_config(path: Path, config: dict[str, Any]) -> None:
    hosts = config.get("hosts")
    if not isinstance(hosts, list) or not hosts or not all(isinstance(h, str) for h in hosts):
        raise RuntimeContractError(f"{path}: 'hosts' must be a non-empty list of host names")
    current = config.get("current_host")
    if not isinstance(current, str) or current not in hosts:
        raise RuntimeContractError(
            f"{path}: 'current_host' must be one of 'hosts' {hosts}, got {current!r}"
        )


def read_environment(root: Path | None = None) -> TrainingEnvironment:
    """Read and validate the config files under `root` (default: `job_root()`).

    Raises `RuntimeContractError` naming the file and the problem.
    """
    root = (root or job_root()).absolute()

    def read(name: str, required: bool) -> dict[str, Any]:
        return read_config(root, name, required)

    resource_config = read("resourceconfig.json", required=True)
    _check_resource_config(root / "input" / "config" / "resourceconfig.json", resource_config)
    return TrainingEnvironment(
        root=root,
        hyperparameters=decode_hyperparameters(read("hyperparameters.json", required=True)),
        resource_config=resource_config,
        input_data_config=read("inputdataconfig.json", required=False),
        checkpoint_config=read("checkpointconfig.json", required=False),
        platform=read("platform.json", required=False),
    )
