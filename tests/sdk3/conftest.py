"""The v3 tests run their code in a second environment that holds the official SageMaker SDK v3
beside ddpjob (the main test environment runs v2, `ddpjob[dev]`): `venv.py` beside this file
builds it from pinned versions.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.sdk3.venv import sdk3_venv

#: A test that finds no venv builds it (about 2-4 minutes on 2 cores, some hundred MB from the
#: package registry; `.ci/run` builds it before the tests): its time limit allows for that.
BUILD_TIMEOUT_S = 1500


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Tests that use the v3 venv get the time to build it (see BUILD_TIMEOUT_S)."""
    for item in items:
        if "sdk3_python" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.timeout(BUILD_TIMEOUT_S))


@pytest.fixture(scope="session")
def sdk3_python() -> Path:
    """The Python of an environment with the official SDK v3, torch and this ddpjob."""
    return sdk3_venv() / "bin" / "python"
