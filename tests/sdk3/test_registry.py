"""In a venv with the official SDK v3, ddpjob reads v3's registry, without importing v3.

The scripts are those the main venv runs against v2 (tests/client), run here with v3's Python.
"""

from __future__ import annotations

from pathlib import Path

from ddpjob import official_sdk

from tests.client.scripts import ORACLE, PROBE, run_script


def test_every_pytorch_and_hugging_face_image_is_v3s(sdk3_python: Path) -> None:
    result = run_script(sdk3_python, ORACLE)
    assert result["major"] == 3 and result["version"].startswith("3.")
    assert result["mismatches"] == [] and result["mismatch_count"] == 0
    assert result["compared"] > 1000 and result["distinct"] > 500


def test_default_version_and_image_come_from_v3s_registry(sdk3_python: Path) -> None:
    result = run_script(sdk3_python, PROBE)
    assert result["major"] == 3
    assert Path(result["registry"]).parts[-3:] == ("sagemaker", "core", "image_uri_config")
    version, py_version = result["default"]
    assert result["image"] == ("763104351884.dkr.ecr.us-east-1.amazonaws.com/pytorch-training:"
                               f"{version}-gpu-{py_version}")
    assert result["loaded"] == []  # not sagemaker.core, nor anything of the SDK
    v2 = official_sdk.installed()  # the main venv's
    if v2 is not None and v2.major == 2:
        assert version not in v2.config("pytorch")["training"]["versions"], \
            f"v3's default {version} is in v2's registry too: not telling the two apart"
