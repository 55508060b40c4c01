"""Installing ddpjob beside the official SDK v3, with or without its `tune` extra, changes
nothing of the SDK's.

The venv of `conftest.py` recorded `pip freeze` and `pip check` before and after
`pip install -e <this checkout>`, and after `pip install -e <this checkout>[tune]`; a hard pin
on the SDK (as `sagemaker<3` once was) makes pip replace v3 with v2 and break sagemaker-train,
sagemaker-serve and sagemaker-mlops.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.sdk3.venv import (
    AFTER,
    BEFORE,
    CHECK_AFTER,
    CHECK_BEFORE,
    TUNE_AFTER,
    TUNE_CHECK_AFTER,
)

INSTALLS = pytest.mark.parametrize(("freeze", "check"), [
    (AFTER, CHECK_AFTER), (TUNE_AFTER, TUNE_CHECK_AFTER)], ids=["ddpjob", "ddpjob[tune]"])


def _frozen(path: Path) -> dict[str, str]:
    """`pip freeze` lines as {normalized name: version or requirement}."""
    packages = {}
    for line in path.read_text().splitlines():
        name, _, version = line.partition("==")
        if line and not line.startswith("#"):
            packages[re.sub(r"[-_.]+", "-", name).lower()] = version
    return packages


@INSTALLS
def test_sagemaker_packages_are_unchanged(sdk3_python: Path, freeze: str, check: str) -> None:
    venv = sdk3_python.parents[1]
    before, after = _frozen(venv / BEFORE), _frozen(venv / freeze)
    sdk = {name: version for name, version in before.items() if name.startswith("sagemaker")}
    assert sdk.get("sagemaker", "").startswith("3.") and "sagemaker-core" in sdk
    assert {name: after.get(name) for name in sdk} == sdk
    assert not {name for name in after if name.startswith("sagemaker")} - set(sdk)


@INSTALLS
def test_pip_check_reports_nothing_new(sdk3_python: Path, freeze: str, check: str) -> None:
    venv = sdk3_python.parents[1]
    before = set((venv / CHECK_BEFORE).read_text().splitlines())
    assert [line for line in (venv / check).read_text().splitlines() if line not in before] == []
    if freeze == TUNE_AFTER:
        assert "optuna" in _frozen(venv / freeze)
