"""Read the job root (`/opt/ml`-shaped) into one frozen snapshot: the container contract's input.

Only reading and validating lives here; `sm_variables` renders the snapshot into `SM_*`.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ddpjob_runtime.shared import contract, fsutil
from ddpjob_runtime.shared.contract import DEFAULT_ROOT
from ddpjob_runtime.shared.errors import RuntimeContractError, UnsafePathError
from ddpjob_runtime.shared.hyperparameters import decode, is_reserved, name_problem
from ddpjob_runtime.shared.platform_config import PlatformConfig


def job_root() -> Path:
    """The job root: `$SAGEMAKER_BASE_DIR`, else `/opt/ml`."""
    return Path(os.environ.get(contract.ENV_ROOT) or DEFAULT_ROOT)


def decode_hyperparameters(raw: Mapping[str, str]) -> dict[str, object]:
    """JSON-decode every value; RuntimeContractError for a name no env variable can carry."""
    for name in raw:
        if problem := name_problem(name):
            raise RuntimeContractError(f"{contract.HYPERPARAMETERS_FILE}: hyperparameter "
                                       f"{name!r} refused: {problem}")
    return decode(raw)


class _Below:
    """A read-only attribute: the folder `parts` below the environment's root."""

    def __init__(self, *parts: str) -> None:
        self.parts = parts

    def __get__(self, env: TrainingEnvironment, owner: type) -> Path:
        return env.root.joinpath(*self.parts)


@dataclass(frozen=True)
class TrainingEnvironment:
    """What the platform wrote under the job root, validated. Paths are absolute."""

    root: Path
    hyperparameters: dict[str, object]
    resource_config: dict[str, Any]
    input_data_config: dict[str, Any]
    checkpoint_config: dict[str, Any] = field(default_factory=dict)
    platform: PlatformConfig = field(default_factory=PlatformConfig)

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
    def user_hyperparameters(self) -> dict[str, object]:
        return {k: v for k, v in self.hyperparameters.items() if not is_reserved(k)}

    @property
    def reserved_hyperparameters(self) -> dict[str, object]:
        return {k: v for k, v in self.hyperparameters.items() if is_reserved(k)}

    @property
    def entry_point(self) -> str:
        """`sagemaker_program`: the script, module or shell script to run."""
        program = self.hyperparameters.get(contract.PROGRAM)
        if not isinstance(program, str) or not program:
            raise RuntimeContractError(
                "hyperparameters.json: 'sagemaker_program' (the entry point) is missing or empty"
            )
        return program

    @property
    def submit_directory(self) -> str | None:
        value = self.hyperparameters.get(contract.SUBMIT_DIRECTORY)
        return str(value) if value else None

    @property
    def job_name(self) -> str:
        return str(
            self.platform.job_name or self.hyperparameters.get(contract.JOB_NAME) or ""
        )

    # Folders of the contract.
    code_dir = _Below(contract.CODE_DIR)
    model_dir = _Below(contract.MODEL_DIR)
    input_dir = _Below(contract.INPUT_DIR)
    input_config_dir = _Below(contract.CONFIG_DIR)
    output_dir = _Below(contract.OUTPUT_DIR)
    output_data_dir = _Below(contract.OUTPUT_DIR, "data")
    output_intermediate_dir = _Below(contract.OUTPUT_DIR, "intermediate")

    def channel_dir(self, channel: str) -> Path:
        """The channel's folder; a name that is not a plain folder name is refused."""
        try:
            return fsutil.contained(self.root / contract.DATA_DIR, channel, what="channel name")
        except UnsafePathError as exc:
            raise RuntimeContractError(str(exc)) from None

    @property
    def checkpoint_dir(self) -> Path:
        return checkpoint_local_dir(self.root, self.checkpoint_config)


def checkpoint_local_dir(root: Path, checkpoint_config: Mapping[str, object]) -> Path:
    """The checkpoint folder SageMaker syncs: `LocalPath` (default `/opt/ml/checkpoints`), an
    `/opt/ml/...` path mapped under `root` when the root is elsewhere (a local host)."""
    local = checkpoint_config.get("LocalPath")
    return (mapped_path(root, local, "CheckpointConfig.LocalPath") if local
            else root / contract.CHECKPOINTS_DIR)


def mapped_path(root: Path, local: object, what: str = "LocalPath") -> Path:
    """A container path of the request: an `/opt/ml/...` path is mapped under `root` when the
    root is elsewhere (a local host); on SageMaker's own container (root `/opt/ml`) any path is
    taken as it is. UnsafePathError (see `fsutil.container_path`) for one that would leave the job.
    A local host whose namespace shows its folder as `/opt/ml` is no container of its own (the
    machine's files are visible there): its `platform.json` says so, and `/opt/ml` bounds it."""
    local_platform = (root / contract.CONFIG_DIR / contract.PLATFORM_FILE).exists()
    anywhere = root == Path(DEFAULT_ROOT) and not local_platform
    path = fsutil.container_path(local, what, anywhere=anywhere)
    return path if anywhere else root / path.relative_to(DEFAULT_ROOT)


def read_config(root: Path, name: str, required: bool = False) -> dict[str, Any]:
    """The JSON object `input/config/<name>` under `root`; {} when it is optional and missing."""
    path = root / contract.CONFIG_DIR / name
    try:
        text = path.read_text()
    except FileNotFoundError:
        if required:
            raise RuntimeContractError(f"{path}: required file is missing") from None
        return {}
    except OSError as exc:
        raise RuntimeContractError(f"{path}: cannot be read ({exc.strerror})") from None
    try:
        value = json.loads(text)
    except ValueError as exc:
        raise RuntimeContractError(f"{path}: not valid JSON ({exc})") from None
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
    resource_config = read_config(root, contract.RESOURCE_CONFIG_FILE, required=True)
    _check_resource_config(
        root / contract.CONFIG_DIR / contract.RESOURCE_CONFIG_FILE, resource_config)
    env = TrainingEnvironment(
        root=root,
        hyperparameters=decode_hyperparameters(
            read_config(root, contract.HYPERPARAMETERS_FILE, required=True)),
        resource_config=resource_config,
        input_data_config=read_config(root, contract.INPUT_DATA_CONFIG_FILE),
        checkpoint_config=read_config(root, contract.CHECKPOINT_CONFIG_FILE),
        platform=PlatformConfig.from_json(read_config(root, contract.PLATFORM_FILE)),
    )
    tensorboard = env.platform.tensorboard_output_config or {}
    try:  # the folders the platform syncs stay inside the job
        _ = env.checkpoint_dir
        if tensorboard.get("LocalPath"):
            mapped_path(root, tensorboard["LocalPath"], "TensorBoardOutputConfig.LocalPath")
    except UnsafePathError as exc:
        raise RuntimeContractError(str(exc)) from None
    return env
