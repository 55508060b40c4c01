"""Fetch the user's source (`sourcedir.tar.gz` or a folder), unpack it safely, install its needs."""

from __future__ import annotations

import logging
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path
from urllib.parse import unquote, urlparse

from ddpjob_runtime.errors import RuntimeContractError

log = logging.getLogger(__name__)

PIP_TIMEOUT_S = 30 * 60
_PIP_TAIL_LINES = 12


def _local_path(uri: str) -> Path:
    parsed = urlparse(uri)
    if parsed.scheme == "file":
        return Path(unquote(parsed.path))
    return Path(uri)


def _check_member(member: tarfile.TarInfo, dest: Path) -> None:
    """Refuse what could write outside `dest` or create something other than files and folders."""
    name = member.name
    target = os.path.realpath(dest / name)
    root = os.path.realpath(dest)

    def refuse(why: str) -> None:
        raise RuntimeContractError(f"source archive member {name!r} refused: {why}")

    if name.startswith("/") or os.path.isabs(name):
        refuse("absolute path")
    if ".." in Path(name).parts:
        refuse("path contains '..'")
    if os.path.commonpath([root, target]) != root:
        refuse("resolves outside the source directory")
    if member.issym() or member.islnk():
        link = member.linkname
        # A symlink is relative to its own folder; a hardlink to the archive's root.
        base = os.path.dirname(target) if member.issym() else root
        if (
            os.path.isabs(link)
            or os.path.commonpath([root, os.path.realpath(os.path.join(base, link))]) != root
        ):
            refuse(f"link to {link!r} points outside the source directory")
    elif not (member.isfile() or member.isdir()):
        refuse("not a regular file, folder or link (devices and fifos are not allowed)")


def safe_extract(archive: Path, dest: Path) -> None:
    """Unpack a tar(.gz) into `dest`, checking every member first (see `_check_member`)."""
    dest.mkdir(parents=True, exist_ok=True)
    try:
        with tarfile.open(archive) as tar:
            members = tar.getmembers()
            for member in members:
                _check_member(member, dest)
            # Every member was vetted above; the 'tar' filter additionally drops modes like setuid.
            tar.extractall(dest, members=members, filter="tar")
    except (tarfile.TarError, EOFError) as exc:
        raise RuntimeContractError(
            f"source archive {archive} is not a valid tar file: {exc}"
        ) from None


def fetch_source(uri: str, code_dir: Path) -> None:
    """Bring `sagemaker_submit_directory` (tar.gz by s3://, file:// or path; or a folder) in."""
    code_dir.mkdir(parents=True, exist_ok=True)
    if urlparse(uri).scheme == "s3":
        from ddpjob_runtime import storage  # boto3 only when needed

        with tempfile.TemporaryDirectory() as tmp:
            archive = Path(tmp) / "sourcedir.tar.gz"
            storage.download_file(uri, archive)
            safe_extract(archive, code_dir)
        return
    path = _local_path(uri)
    if path.is_dir():  # the official SDK's local mode hands over the folder itself
        shutil.copytree(path, code_dir, dirs_exist_ok=True, symlinks=False)
    elif path.is_file():
        safe_extract(path, code_dir)
    else:
        raise RuntimeContractError(f"sagemaker_submit_directory {uri!r}: no such file or folder")


def install_requirements(code_dir: Path) -> None:
    """`pip install -r requirements.txt` when the source has one; pip's last lines on failure."""
    requirements = code_dir / "requirements.txt"
    if not requirements.is_file():
        return
    log.info("installing %s", requirements)
    cmd = [
        sys.executable,
        "-m",
        "pip",
        "install",
        "--disable-pip-version-check",
        "-r",
        str(requirements),
    ]
    try:
        done = subprocess.run(
            cmd, cwd=code_dir, capture_output=True, text=True, timeout=PIP_TIMEOUT_S
        )
    except subprocess.TimeoutExpired:
        raise RuntimeContractError(
            f"pip install -r requirements.txt did not finish within {PIP_TIMEOUT_S} s"
        ) from None
    sys.stdout.write(done.stdout)
    sys.stderr.write(done.stderr)
    if done.returncode != 0:
        lines = (done.stderr.strip() or done.stdout.strip()).splitlines()  # pip's errors
        tail = "\n".join(lines[-_PIP_TAIL_LINES:])
        raise RuntimeContractError(
            f"pip install -r requirements.txt failed (exit code {done.returncode}):\n{tail}"
        )
