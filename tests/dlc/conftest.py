"""The DLC-like Python of `test_dlc_jobs`, for every test module of this folder."""

from tests.dlc.test_dlc_jobs import dlc_python  # noqa: F401 - a fixture
