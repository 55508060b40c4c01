"""The official SDK's own transfers through `LocalSession().official_session()` on keys S3
allows and a file system or a URL would mangle: every file up, every file back."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ddpjob.local.session import LocalSession

BUCKET = "sagemaker-local"
FILES = 1050  # more than a listing page (1,000 keys)


def test_upload_data_and_download_data_move_1050_files_whose_names_hold_spaces(
    sdk_offline: Any, aws_env: str, local_session: LocalSession, tmp_path: Path
) -> None:
    """1,050 names with spaces (and a `+`, a `%`), under a prefix with a space: all uploaded,
    listed over two pages and downloaded, each with its bytes."""
    session = local_session.official_session()
    data = tmp_path / "up"
    (data / "sub dir").mkdir(parents=True)
    names = [f"file {index:04d}.txt" for index in range(FILES - 2)]
    names += ["sub dir/a+b c.txt", "sub dir/100% done.txt"]
    for name in names:
        (data / name).write_text(name)
    assert session.upload_data(str(data), key_prefix="with space") == (
        f"s3://{BUCKET}/with space")

    got = session.download_data(str(tmp_path / "down"), BUCKET, key_prefix="with space/")
    assert sorted(Path(path).relative_to(tmp_path / "down").as_posix() for path in got) == (
        sorted(names))
    assert all((tmp_path / "down" / name).read_text() == name for name in names)
