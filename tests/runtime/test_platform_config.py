"""platform.json's typed config: what the backend writes is what the host reads; bad input named."""

from __future__ import annotations

from dataclasses import fields

import pytest
from ddpjob_runtime.shared import contract
from ddpjob_runtime.shared.errors import RuntimeContractError
from ddpjob_runtime.shared.platform_config import KEYS, ChannelSource, PlatformConfig

FULL = {
    "job_name": "j", "master_port": 29517, "host_addresses": {"algo-1": "127.0.0.1"},
    "channels": {"train": {"staged": "/jobs/j/channels/train"}, "test": "s3://b/test/"},
    "output_path": "file:///out", "checkpoint_s3_uri": "s3://b/ckpt",
    "staged_checkpoint": "/jobs/j/checkpoint", "submit_directory": "/jobs/j/source.tar.gz",
    "status_file": "/jobs/j/hosts/algo-1.status",
    "tensorboard_output_config": {"S3OutputPath": "s3://b/tb", "LocalPath": "/opt/ml/tb"},
}


def test_every_key_is_a_contract_name_and_a_field() -> None:
    names = {v for k, v in vars(contract).items() if k.startswith("PLATFORM_") and k not in (
        "PLATFORM_FILE", "PLATFORM_STAGED")}
    assert KEYS == names == {f.name for f in fields(PlatformConfig)}


def test_round_trip_keeps_every_key() -> None:
    config = PlatformConfig.from_json(FULL)
    assert config.channels == {"train": ChannelSource("/jobs/j/channels/train", staged=True),
                               "test": ChannelSource("s3://b/test/")}
    assert config.to_json() == FULL
    assert PlatformConfig.from_json({}) == PlatformConfig() and PlatformConfig().to_json() == {}


def test_merged_replaces_keys() -> None:
    config = PlatformConfig(job_name="j", channels={"a": ChannelSource("s3://b/a")})
    merged = config.merged({"channels": {}, "staged_checkpoint": "/c"})
    assert merged == PlatformConfig(job_name="j", staged_checkpoint="/c")


@pytest.mark.parametrize(("data", "problem"), [
    ({"master_port": 0}, "'master_port' must be a TCP port"),
    ({"master_port": "29517"}, "'master_port' must be a TCP port"),
    ({"master_port": True}, "'master_port' must be a TCP port"),
    ({"job_name": 3}, "'job_name' must be a string"),
    ({"host_addresses": ["algo-1"]}, "'host_addresses' must be a JSON object"),
    ({"host_addresses": {"algo-1": 1}}, "'host_addresses' must map names to strings"),
    ({"channels": {"train": {"folder": "/x"}}}, "channel 'train' must be a URI or"),
    ({"channels": {"train": 3}}, "channel 'train' must be a URI or"),
    ({"tensorboard_output_config": "s3://b/tb"}, "'tensorboard_output_config' must be a JSON"),
    ({"master_prot": 1}, r"unknown keys \['master_prot'\]"),
])
def test_bad_values_are_named(data: dict[str, object], problem: str) -> None:
    with pytest.raises(RuntimeContractError, match=rf"^platform.json: {problem}"):
        PlatformConfig.from_json(data)
