"""Fetch the user's source (`sourcedir.tar.gz` or a folder), unpack it safely, install its needs."""

from __future__ import annotations

import logging
import shutil
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

from ddpjob_runtime.shared import contract, pyenv, storage
from ddpjob_runtime.shared.errors import RuntimeContractError

log = logging.getLogger(__name__)

PIP_TIMEOUT_S = 30 * 60
_PIP_TAIL_LINES = 12


def _resolve(name: str, links: dict[str, str]) -> list[str] | None:
    """The parts of `name` inside the archive with the archive's own symlinks followed, or None
    when the path leaves the archive's root (or loops): what the path will mean once extracted."""
    parts: list[str] = []
    pending = [p for p in name.split("/") if p not in ("", ".")]
    hops = 0
    while pending:
        part = pending.pop(0)
        if part == "..":
            if not parts:
                return None
            parts.pop()
            continue
        parts.append(part)
        target = links.get("/".join(parts))
        if target is not None:
            hops += 1
            if hops > 40 or target.startswith("/"):
                return None
            parts.pop()
            pending = [p for p in target.split("/") if p not in ("", ".")] + pending
    return parts


def _check_members(members: list[tarfile.TarInfo]) -> None:
    """Refuse any member that could write outside the archive's root, following the chain of
    links the archive itself creates (`a/b/s2 -> ../..`, then `s1 -> a/b/s2/..`)."""
    links = {"/".join(p for p in m.name.split("/") if p not in ("", ".")): m.linkname
             for m in members if m.issym()}
    files = {m.name.strip("/") for m in members if m.isfile()}

    def refuse(member: tarfile.TarInfo, why: str) -> None:
        raise RuntimeContractError(f"source archive member {member.name!r} refused: {why}")

    for member in members:
        if member.name.startswith("/") or ".." in Path(member.name).parts:
            refuse(member, "absolute path or '..'")
        if not (member.isfile() or member.isdir() or member.issym() or member.islnk()):
            refuse(member, "not a regular file, folder or link (devices and fifos are not "
                           "allowed)")
        parent = member.name.rstrip("/").rpartition("/")[0]
        if _resolve(parent, links) is None:
            refuse(member, "its folder resolves outside the source directory")
        if member.issym() and _resolve(member.name, links) is None:
            refuse(member, f"link to {member.linkname!r} points outside the source directory")
        if member.islnk():
            target = _resolve(member.linkname, links)
            if target is None or "/".join(target) != member.linkname.strip("/") \
                    or member.linkname.strip("/") not in files:
                refuse(member, f"hard link to {member.linkname!r} points outside the source "
                               f"directory or to no regular file of the archive")


def safe_extract(archive: Path, dest: Path) -> None:
    """Unpack a tar(.gz) into `dest`, every member checked first (see `_check_members`)."""
    dest.mkdir(parents=True, exist_ok=True)
    try:
        with tarfile.open(archive) as tar:
            members = tar.getmembers()
            _check_members(members)
            # tarfile's own 'data' filter checks again against the folder on disk and drops
            # modes like setuid.
            tar.extractall(dest, members=members, filter="data")
    except tarfile.FilterError as exc:
        raise RuntimeContractError(f"source archive {archive}: member refused: {exc}") from None
    except (tarfile.TarError, EOFError) as exc:
        raise RuntimeContractError(
            f"source archive {archive} is not a valid tar file: {exc}"
        ) from None


def fetch_source(uri: str, code_dir: Path) -> None:
    """Bring `sagemaker_submit_directory` (tar.gz by s3://, file:// or path; or a folder) in."""
    code_dir.mkdir(parents=True, exist_ok=True)
    location = storage.parse(uri, argument=contract.SUBMIT_DIRECTORY)
    if location.is_s3:
        with tempfile.TemporaryDirectory() as tmp:
            archive = storage.download_file(uri, Path(tmp) / contract.SOURCE_ARCHIVE)
            safe_extract(archive, code_dir)
    elif location.path.is_dir():  # the official SDK's local mode hands over the folder itself
        shutil.copytree(location.path, code_dir, dirs_exist_ok=True, symlinks=False)
    elif location.path.is_file():
        safe_extract(location.path, code_dir)
    else:
        raise RuntimeContractError(f"{contract.SUBMIT_DIRECTORY} {uri!r}: no such file or folder")


def install_requirements(code_dir: Path, python_dir: Path | None = None) -> Path | None:
    """`pip install -r requirements.txt` when the source has one; pip's last lines on failure.

    In SageMaker's container the packages go into its Python (gone with the container). A local
    host names `python_dir`: they go into a Python environment of the host's own made there
    (`pyenv`), never into the user's; its site-packages folder is returned, for the workers'
    `PYTHONPATH`."""
    requirements = code_dir / "requirements.txt"
    if not requirements.is_file():
        return None
    log.info("installing %s", requirements)
    python = sys.executable if python_dir is None else str(pyenv.create(python_dir, sys.executable))
    cmd = [
        python,
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
    return None if python_dir is None else pyenv.site_packages(python_dir)[0]
