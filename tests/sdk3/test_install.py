"""Installing ddpjob beside the official SDK v3 changes nothing of the SDK's.

The venv of `conftest.py` recorded `pip freeze` and `pip check` before and after
`pip install -e <this checkout>`; a hard pin on the SDK (as `sagemaker<3` once was) makes pip
replace v3 with v2 and break sagemaker-train, sagemaker-serve and sagemaker-mlops.
"""

from __future__ import annotations

import re
from pathlib import Path

from tests.sdk3.venv import AFTER, BEFORE, CHECK_AFTER, CHECK_BEFORE


def _frozen(path: Path) -> dict[str, str]:
    """`pip freeze` lines as {normalized name: version or requirement}."""
    packages = {}
    for line in path.read_text().splitlines():
        name, _, version = line.partition("==")
        if line and not line.startswith("#"):
            packages[re.sub(r"[-_.]+", "-", name).lower()] = version
    return packages


def test_sagemaker_packages_are_unchanged(sdk3_python: Path) -> None:
    venv = sdk3_python.parents[1]
    before, after = _frozen(venv / BEFORE), _frozen(venv / AFTER)
    sdk = {name: version for name, version in before.items() if name.startswith("sagemaker")}
    assert sdk.get("sagemaker", "").startswith("3.") and "sagemaker-core" in sdk
    assert {name: after.get(name) for name in sdk} == sdk
    assert not {name for name in after if name.startswith("sagemaker")} - set(sdk)


def test_pip_check_reports_nothing_new_about_sagemaker(sdk3_python: Path) -> None:
    venv = sdk3_python.parents[1]
    before = set((venv / CHECK_BEFORE).read_text().splitlines())
    new = [line for line in (venv / CHECK_AFTER).read_text().splitlines()
           if line not in before and "sagemaker" in line.lower()]
    assert new == []
