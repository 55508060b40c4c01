"""A local host's workers get the stand-in folder last on their path only when this Python
cannot import what it stands in for (`ddpjob_runtime.platform.stand_ins`)."""

from __future__ import annotations

import os
from pathlib import Path

from ddpjob import packaging
from ddpjob_runtime.platform.stand_ins import packages, worker_path


def _folder(tmp_path: Path, package: str) -> str:
    (tmp_path / package).mkdir()
    (tmp_path / package / "__init__.py").write_text("")
    (tmp_path / "notes").mkdir()  # not a package: nothing it stands in for
    return str(tmp_path)


def test_a_library_this_python_lacks_gets_its_stand_in_last_on_the_path(tmp_path: Path) -> None:
    folder = _folder(tmp_path, "no_such_library_here")
    assert worker_path(folder, None) == folder
    assert worker_path(folder, "/code/site") == os.pathsep.join(["/code/site", folder])


def test_an_installed_library_is_never_shadowed(tmp_path: Path) -> None:
    folder = _folder(tmp_path, "json")  # installed: a stand-in before site-packages would win
    assert worker_path(folder, "/code/site") == "/code/site"
    assert worker_path(folder, None) is None


def test_no_folder_named_by_the_platform_leaves_the_path_as_it_is() -> None:
    assert worker_path(None, "/code/site") == "/code/site"
    assert worker_path("", None) is None


def test_the_local_kit_stands_in_for_smdistributed_only() -> None:
    assert packages(packaging.runtime_source().parent / packaging.STAND_INS) == ["smdistributed"]
