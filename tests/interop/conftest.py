"""Fixtures for interop tests: the official SageMaker Python SDK v2 against moto and our backend.

The official SDK talks to the moto server (`aws_env`: AWS_ENDPOINT_URL, fake credentials), with
telemetry switched off through its own config, and any attempt to send telemetry anyway fails
the test: nothing may leave this machine.
"""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from ddpjob.local.session import LocalSession

from tests.conftest import GROUP_TEARDOWN, REGION
from tests.local.conftest import local_session_at

HERE = Path(__file__).parent
TRAIN_SCRIPT = HERE / "train_ddp.py"
# Our image, as a user would name it; local mode and moto never pull it.
IMAGE_URI = "123456789012.dkr.ecr.us-east-1.amazonaws.com/ddpjob:latest"
ROLE = "arn:aws:iam::123456789012:role/SageMakerRole"
# The SDK's defaults config, given explicitly so that no config file of this machine (or an S3
# config location) is read, and telemetry (an HTTPS GET to an AWS bucket) is off.
SDK_CONFIG: dict[str, Any] = {
    "SchemaVersion": "1.0",
    "SageMaker": {"PythonSDK": {"Modules": {"TelemetryOptOut": True}}},
}


@pytest.fixture
def sdk(aws_env: str, sdk_offline: Any) -> Any:
    """The `sagemaker` package, quiet, pointed at moto; fails the test if it sent telemetry."""
    return sdk_offline


@pytest.fixture
def sdk_offline(monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    """The `sagemaker` package, quiet; fails the test if it sent telemetry."""
    monkeypatch.setenv("SAGEMAKER_SUPPRESS_V2_WARNING", "1")
    for name in ("SAGEMAKER_ADMIN_CONFIG_OVERRIDE", "SAGEMAKER_USER_CONFIG_OVERRIDE"):
        monkeypatch.delenv(name, raising=False)
    import sagemaker
    from sagemaker.telemetry import telemetry_logging

    sent: list[tuple] = []
    monkeypatch.setattr(
        telemetry_logging, "_send_telemetry_request", lambda *a, **k: sent.append(a)
    )
    yield sagemaker
    assert not sent, f"the official SDK tried to send telemetry: {sent}"


@pytest.fixture
def local_session(tmp_path: Path) -> Iterator[LocalSession]:
    """Our LocalSession in a fresh home; kills (and fails on) processes a test left behind."""
    with local_session_at(tmp_path / "ddpjob-home") as local:
        yield local


@pytest.fixture
def source_dir(tmp_path: Path) -> Path:
    """The user's `source_dir`: the DDP training script and the helper module that ends its
    process group, as the SDK will pack them."""
    folder = tmp_path / "src"
    folder.mkdir()
    (folder / TRAIN_SCRIPT.name).write_text(TRAIN_SCRIPT.read_text())
    shutil.copy(GROUP_TEARDOWN, folder)
    return folder


class OffMachineRequest(AssertionError):
    """The official SDK tried to reach something other than the moto server."""


def boto_session(endpoint: str) -> Any:
    """A boto3 session for the SDK: AWS_ENDPOINT_URL (from `aws_env`) sends its clients to moto,
    and a request any client of it sends elsewhere fails at once instead of leaving the machine
    (the SDK gives some clients an explicit AWS endpoint, e.g. STS for the default bucket)."""
    import boto3

    session = boto3.Session(region_name=REGION)

    def only_moto(request: Any, **_: Any) -> None:
        if not request.url.startswith(endpoint):
            raise OffMachineRequest(f"the official SDK sent a request to {request.url}")

    session.events.register("before-send", only_moto)
    return session
