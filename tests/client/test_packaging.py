"""sourcedir.tar.gz: same content -> same bytes; official layout; junk left out."""

from __future__ import annotations

import os
import subprocess
import sys
import tarfile
import time
from pathlib import Path

import pytest
from ddpjob import packaging
from ddpjob.errors import UserInputError


def _names(archive: Path) -> list[str]:
    with tarfile.open(archive) as tar:
        return tar.getnames()


def test_same_content_same_bytes(src: Path, tmp_path: Path) -> None:
    spec = packaging.check_source("train.py", src)
    first = packaging.pack(spec, tmp_path / "a.tar.gz")
    # new mtimes, a new permission bit pattern and junk must not change the bytes
    time.sleep(0.01)
    for path in src.iterdir():
        os.utime(path, (1, 1))
    (src / "__pycache__").mkdir()
    (src / "__pycache__" / "helper.cpython-311.pyc").write_bytes(b"junk")
    (src / "stale.pyc").write_bytes(b"junk")
    second = packaging.pack(spec, tmp_path / "b.tar.gz")
    assert first == second
    assert (tmp_path / "a.tar.gz").read_bytes() == (tmp_path / "b.tar.gz").read_bytes()
    (src / "helper.py").write_text("VALUE = 2\n")
    assert packaging.pack(spec, tmp_path / "c.tar.gz") != first


def test_layout_and_normalised_members(src: Path, tmp_path: Path) -> None:
    lib = tmp_path / "mylib"
    (lib / "sub").mkdir(parents=True)
    (lib / "sub" / "m.py").write_text("x = 1\n")
    (src / "run.sh").write_text("#!/bin/sh\n")
    (src / "run.sh").chmod(0o700)
    spec = packaging.check_source("train.py", src, [lib])
    archive = tmp_path / packaging.ARCHIVE_NAME
    packaging.pack(spec, archive)
    assert _names(archive) == ["helper.py", "mylib", "mylib/sub", "mylib/sub/m.py", "run.sh",
                               "train.py"]
    with tarfile.open(archive) as tar:
        for member in tar.getmembers():
            assert (member.mtime, member.uid, member.gid, member.uname, member.gname) == \
                (0, 0, 0, "", "")
        assert tar.getmember("run.sh").mode == 0o755
        assert tar.getmember("train.py").mode == 0o644
    assert archive.read_bytes()[4:8] == b"\0\0\0\0"  # gzip header time 0


def test_a_repository_of_source_dir_is_never_packed(src: Path, tmp_path: Path) -> None:
    """`.git` (a folder, or a worktree's file; at any depth) holds the remotes, credentials
    included: left out."""
    subprocess.run(["git", "init", "-q", str(src)], check=True)
    subprocess.run(["git", "-C", str(src), "remote", "add", "origin",
                    "https://ghp_TOKEN@example.com/r.git"], check=True)
    (src / "vendored").mkdir()
    (src / "vendored" / ".git").write_text("gitdir: /elsewhere\n")
    (src / "vendored" / "v.py").write_text("")
    packaging.pack(packaging.check_source("train.py", src), tmp_path / "a.tar.gz")
    assert _names(tmp_path / "a.tar.gz") == ["helper.py", "train.py", "vendored",
                                             "vendored/v.py"]


def test_entry_point_without_source_dir(src: Path, tmp_path: Path) -> None:
    spec = packaging.check_source(str(src / "train.py"))
    assert spec.script_name == "train.py"
    archive = tmp_path / "x.tar.gz"
    packaging.pack(spec, archive)
    assert _names(archive) == ["train.py"]


def test_links_are_followed_inside_source_dir(src: Path, tmp_path: Path) -> None:
    (src / "lib").mkdir()
    (src / "lib" / "util.py").write_text("X = 1\n")
    (src / "alias.py").symlink_to("lib/util.py")
    (src / "lib2").symlink_to("lib", target_is_directory=True)
    spec = packaging.check_source("train.py", src)
    packaging.pack(spec, tmp_path / "a.tar.gz")
    with tarfile.open(tmp_path / "a.tar.gz") as tar:
        assert tar.extractfile("alias.py").read() == b"X = 1\n"  # contents, not a link
        assert tar.extractfile("lib2/util.py").read() == b"X = 1\n"


@pytest.mark.parametrize(("make", "match"), [
    (lambda src, out: (src / "passwd").symlink_to("/etc/passwd"), r"symbolic link to .*outside"),
    (lambda src, out: (src / "data").symlink_to(out, target_is_directory=True),
     r"symbolic link to .*outside"),
    (lambda src, out: (src / "gone").symlink_to(out / "missing"), r"broken symbolic link"),
    (lambda src, out: (src / "loop").symlink_to(".", target_is_directory=True),
     r"symbolic link loop"),
])
def test_links_that_escape_source_dir_are_refused(src: Path, tmp_path: Path, make,
                                                  match: str) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret.txt").write_text("s")
    make(src, outside)
    spec = packaging.check_source("train.py", src)
    with pytest.raises(UserInputError, match=match) as info:
        packaging.pack(spec, tmp_path / "a.tar.gz")
    assert "\n" not in str(info.value)


def _pack_without_root_powers(src: Path, out: Path) -> subprocess.CompletedProcess:
    """Pack `src` in a process that file permissions apply to (as root: without
    CAP_DAC_OVERRIDE and CAP_DAC_READ_SEARCH)."""
    code = ("import sys; from ddpjob import packaging; from ddpjob.errors import UserInputError\n"
            "try:\n"
            f"    packaging.pack(packaging.check_source('train.py', {str(src)!r}), {str(out)!r})\n"
            "except UserInputError as exc:\n"
            "    sys.exit(str(exc))\n")
    drop = ["setpriv", "--bounding-set", "-dac_override,-dac_read_search"]
    return subprocess.run([*(drop if os.geteuid() == 0 else []), sys.executable, "-c", code],
                          capture_output=True, text=True, timeout=60)


@pytest.mark.parametrize("what", ["file", "folder"])
def test_an_unreadable_file_or_folder_is_one_clear_line(src: Path, tmp_path: Path,
                                                        what: str) -> None:
    target = src / ("secret.py" if what == "file" else "private")
    if what == "file":
        target.write_text("x = 1\n")
    else:
        target.mkdir()
    target.chmod(0)
    try:
        done = _pack_without_root_powers(src, tmp_path / "a.tar.gz")
    finally:
        target.chmod(0o700)
    assert done.returncode == 1
    assert done.stderr == (f"{target}: this {what} cannot be read (permission denied); make "
                           f"it readable or move it out of the folder\n")
    assert not (tmp_path / "a.tar.gz").exists()


def test_large_files_are_packed_with_a_warning(src: Path, tmp_path: Path, monkeypatch,
                                               caplog: pytest.LogCaptureFixture) -> None:
    monkeypatch.setattr(packaging, "LARGE_FILE_BYTES", 1000)
    (src / "weights.bin").write_bytes(b"w" * 3_000_000)
    packaging.pack(packaging.check_source("train.py", src), tmp_path / "a.tar.gz")
    assert f"packing {src / 'weights.bin'}: 3 MB" in caplog.text
    assert "train.py" not in caplog.text


def test_include_runtime_packs_ddpjob_runtime_but_its_local_kit(src: Path, tmp_path: Path) -> None:
    spec = packaging.check_source("train.py", src)
    runtime = packaging.runtime_source()
    (runtime / "__pycache__").mkdir(exist_ok=True)  # junk an import left: never packed
    archive = tmp_path / packaging.ARCHIVE_NAME
    packaging.pack(spec, archive, include_runtime=True)
    names = _names(archive)
    assert {"train.py", "helper.py", "ddpjob_runtime/__init__.py", "ddpjob_runtime/checkpoints.py",
            "ddpjob_runtime/dataparallel/torch/distributed.py"} <= set(names)
    assert not [n for n in names if "__pycache__" in n or n.endswith(".pyc")]
    assert not [n for n in names if "smdistributed" in n]  # SageMaker's own library serves there
    expected = sorted(p.relative_to(runtime).as_posix() for p in runtime.rglob("*.py")
                      if "__pycache__" not in p.parts and "localkit" not in p.parts)
    assert [n for n in expected if n.startswith("job/")]  # the in-job runtime ships
    assert sorted(n.removeprefix("ddpjob_runtime/") for n in names
                  if n.startswith("ddpjob_runtime/") and n.endswith(".py")) == expected
    assert "ddpjob_runtime/__init__.py" not in _names(_packed(spec, tmp_path / "plain.tar.gz"))
    # Unpacked, the script's folder alone gives the runtime: `python -E -S` ignores site-packages
    # paths from the environment and ddpjob's editable install, but keeps the script's folder.
    code = tmp_path / "code"
    with tarfile.open(archive) as tar:
        tar.extractall(code, filter="data")
    (code / "probe.py").write_text(
        "import ddpjob_runtime.checkpoints, ddpjob_runtime.shared.storage, sys\n"
        "print(ddpjob_runtime.__file__)\n"
        "import importlib.util; print(importlib.util.find_spec('ddpjob'))\n")
    done = subprocess.run([sys.executable, "-E", "-S", str(code / "probe.py")], cwd=code,
                          capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == [str(code / "ddpjob_runtime" / "__init__.py"), "None"]


def _packed(spec: packaging.SourceSpec, target: Path) -> Path:
    packaging.pack(spec, target)
    return target


@pytest.mark.parametrize("name", ["ddpjob_runtime", "ddpjob_runtime.py"])
def test_a_users_own_ddpjob_runtime_is_refused_when_the_runtime_is_packed(
        src: Path, tmp_path: Path, name: str) -> None:
    clash = src / name
    if name.endswith(".py"):
        clash.write_text("x = 1\n")
    else:
        clash.mkdir()
        (clash / "__init__.py").write_text("")
    spec = packaging.check_source("train.py", src)
    with pytest.raises(UserInputError, match=rf"{name}.*named like ddpjob's runtime.*rename it"):
        packaging.pack(spec, tmp_path / "x.tar.gz", include_runtime=True)
    packaging.pack(spec, tmp_path / "y.tar.gz")  # without the runtime it is the user's business


def test_a_dependency_named_ddpjob_runtime_is_refused(src: Path, tmp_path: Path) -> None:
    dep = tmp_path / "deps" / "ddpjob_runtime"
    dep.mkdir(parents=True)
    spec = packaging.check_source("train.py", src, [dep])
    with pytest.raises(UserInputError, match="named like ddpjob's runtime"):
        packaging.pack(spec, tmp_path / "x.tar.gz", include_runtime=True)


@pytest.mark.parametrize("name", ["train.py", "bin/train.sh", "a+b-c_d.py", ".hidden.py",
                                  "my script.py", "trâin.py", "run$1.py", "x;y.py", "a=b.py",
                                  "sub/my script.py", "_x/.y/z.py", "train.py~"])
def test_the_estimator_says_when_sagemakers_container_would_refuse_the_entry_point(
        name: str, tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """The oracle is the container's own toolkit (sagemaker-training >= 5.1.4)."""
    from sagemaker_training import errors
    from sagemaker_training.process import validate_entry_point

    script = tmp_path / name
    script.parent.mkdir(parents=True, exist_ok=True)
    script.write_text("print('hi')\n")
    try:
        validate_entry_point(name)
        refused = False
    except errors.ClientError:
        refused = True
    with caplog.at_level("WARNING", logger="ddpjob.packaging"):
        spec = packaging.check_source(name, tmp_path)
    said = [r.getMessage() for r in caplog.records if "would be refused" in r.getMessage()]
    assert len(said) == int(refused), (name, said)
    assert spec.script_name == name  # ddpjob's own runtime runs it either way
