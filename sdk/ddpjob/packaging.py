"""`sourcedir.tar.gz`, packed deterministically: the same files give the same bytes.

Layout as the official SDK's `tar_and_upload_dir`: the contents of `source_dir` at the archive's
root (or only the entry point, when there is no `source_dir`), and each of `dependencies` at the
root under its own name. Members are sorted; owner, group, times and permission bits are
normalised (0o755 for folders and executables, 0o644 otherwise); the gzip header has no name and
time 0. Symlinks are followed, like the official SDK, but never out of their folder. Left out,
because they are regenerated junk that would change the bytes without changing the code:
`__pycache__/`, `*.pyc`, `*.pyo`, `.ipynb_checkpoints/` and `.DS_Store`; and `.git`, which
holds a repository's remotes (credentials included, e.g. a token in an `https://` URL), never
code the job runs. A file over 100 MB is packed with a warning naming it.

With `include_runtime`, the pure-Python `ddpjob_runtime` package is packed at the root too, beside
the user's files: a job on SageMaker's own PyTorch container (which holds torch and SageMaker's
training toolkits, not ddpjob) imports `ddpjob_runtime...` from its code folder, as on our backend.
All of it but `ddpjob_runtime.localkit`, the template of local jobs' hosts, which never runs there.
"""

from __future__ import annotations

import gzip
import importlib.util
import logging
import os
import re
import stat
import tarfile
from dataclasses import dataclass
from pathlib import Path

from ddpjob_runtime.shared import contract, fsutil

from ddpjob.errors import UserInputError

logger = logging.getLogger(__name__)

ARCHIVE_NAME = contract.SOURCE_ARCHIVE
LARGE_FILE_BYTES = 100 * 1000 * 1000  # users forget datasets and checkpoints in source_dir
RUNTIME_PACKAGE = "ddpjob_runtime"
LOCAL_ONLY = f"{RUNTIME_PACKAGE}/localkit"  # the local hosts' template: never shipped
#: Stand-ins for libraries only SageMaker's containers have (`smdistributed`), local hosts only
STAND_INS = f"{LOCAL_ONLY}/standins"
EXCLUDED_DIRS = frozenset({"__pycache__", ".ipynb_checkpoints"})
#: A repository's own data: its remotes (often with credentials) and history, never what a job
#: runs; a folder, or a file in a worktree or submodule.
REPOSITORY = ".git"
EXCLUDED_SUFFIXES = (".pyc", ".pyo")
EXCLUDED_FILES = frozenset({".DS_Store"})


#: The entry points SageMaker's PyTorch containers start (sagemaker-training >= 5.1.4,
#: `process.validate_entry_point`): plain relative names inside the code folder.
_CONTAINER_ENTRY_POINT = re.compile(r"[A-Za-z0-9._][A-Za-z0-9._+-]*(/[A-Za-z0-9._+-]+)*")


def _say_if_containers_refuse(program: str) -> None:
    """One warning when SageMaker's PyTorch container would refuse `program` (the script it is
    told to run): ddpjob's runtime runs it, that container's toolkit would not."""
    segments = program.split("/")
    if _CONTAINER_ENTRY_POINT.fullmatch(program) and not {".", ".."} & set(segments):
        return
    logger.warning("entry_point %r would be refused by SageMaker's PyTorch container "
                   "(sagemaker-training >= 5.1.4 runs names of letters, digits, '.', '_', '+', "
                   "'-' and '/' only, not starting with '-' or '/', without '.' or '..' "
                   "parts): rename the script to run it there", program)


@dataclass(frozen=True)
class SourceSpec:
    """Checked code arguments: what to pack and the `sagemaker_program` it runs."""

    entry_point: str
    script_name: str
    source_dir: Path | None
    dependencies: tuple[Path, ...]
    #: `source_dir` given as an `s3://…/sourcedir.tar.gz` URI: used as is, nothing is packed.
    source_uri: str | None = None


def check_source(entry_point: object, source_dir: object = None,
                 dependencies: object = None) -> SourceSpec:
    """Check `entry_point`, `source_dir` and `dependencies` (UserInputError naming the argument)."""
    if not isinstance(entry_point, (str, os.PathLike)) or not os.fspath(entry_point):
        raise UserInputError(f"entry_point must be the path of a Python script, got "
                             f"{entry_point!r}")
    entry = os.fspath(entry_point)
    if (Path(entry).name if source_dir is None else entry).startswith("-"):  # what is run
        raise UserInputError(f"entry_point {entry!r}: a name starting with '-' would be read as "
                             f"an option by python and torchrun; rename the script")
    deps = _check_dependencies(dependencies)
    if isinstance(source_dir, str) and source_dir.startswith("s3://"):
        if not source_dir.endswith(".tar.gz"):
            raise UserInputError(f"source_dir {source_dir!r}: an S3 source_dir must name a "
                                 f".tar.gz archive (s3://bucket/key/sourcedir.tar.gz)")
        if deps:
            raise UserInputError("dependencies cannot be packed into an S3 source_dir; "
                                 "put them inside the archive")
        return SourceSpec(entry, entry, None, (), source_uri=source_dir)
    if source_dir is None:
        path = Path(entry).expanduser()
        if not path.is_file():
            raise UserInputError(f"entry_point {entry!r}: no such file")
        _say_if_containers_refuse(path.name)
        return SourceSpec(entry, path.name, None, deps)
    if not isinstance(source_dir, (str, os.PathLike)):
        raise UserInputError(f"source_dir must be a folder path or an s3:// URI of a .tar.gz, "
                             f"got {source_dir!r}")
    folder = Path(source_dir).expanduser()
    if not folder.is_dir():
        raise UserInputError(f"source_dir {os.fspath(source_dir)!r}: no such folder")
    if Path(entry).is_absolute() or ".." in Path(entry).parts:
        raise UserInputError(f"entry_point {entry!r} must be a path relative to source_dir "
                             f"{os.fspath(source_dir)!r}")
    if not (folder / entry).is_file():
        raise UserInputError(f"entry_point {entry!r}: no such file in source_dir "
                             f"{os.fspath(source_dir)!r}")
    _say_if_containers_refuse(Path(entry).as_posix())
    return SourceSpec(entry, Path(entry).as_posix(), folder.absolute(), deps)


def _check_dependencies(dependencies: object) -> tuple[Path, ...]:
    if dependencies is None:
        return ()
    if isinstance(dependencies, (str, os.PathLike)) or not isinstance(dependencies, (list, tuple)):
        raise UserInputError(f"dependencies must be a list of paths, got {dependencies!r}")
    paths, names = [], set()
    for item in dependencies:
        if not isinstance(item, (str, os.PathLike)) or not Path(item).expanduser().exists():
            raise UserInputError(f"dependencies: {item!r} is not an existing file or folder")
        path = Path(item).expanduser().absolute()
        if path.name in names:
            raise UserInputError(f"dependencies: two entries are named {path.name!r}; each is "
                                 f"packed at the archive's root under its own name")
        names.add(path.name)
        paths.append(path)
    return tuple(paths)


def _excluded(name: str, is_dir: bool) -> bool:
    if name == REPOSITORY:
        return True
    if is_dir:
        return name in EXCLUDED_DIRS
    return name in EXCLUDED_FILES or name.endswith(EXCLUDED_SUFFIXES)


def _members(path: Path, arcname: str, root: Path,
             seen: frozenset[Path] = frozenset()) -> list[tuple[str, Path]]:
    """`(arcname, path)` of `path` and, for a folder, everything under it, sorted.

    Links are followed, like the official SDK, but only while they stay inside `root`: a link
    that leaves it, dangles, or loops back into its own folder is refused with UserInputError.
    """
    real = path.resolve()
    if path.is_symlink():
        if not path.exists():
            raise UserInputError(f"{path}: broken symbolic link (to {os.readlink(path)!r}); "
                                 f"remove it or make it point inside {root}")
        if not real.is_relative_to(root.resolve()):
            raise UserInputError(f"{path}: symbolic link to {real}, outside {root}; ddpjob "
                                 f"follows links like the official SDK but packs nothing from "
                                 f"outside the folder: copy it in instead")
    if path.is_file():
        _check_readable(path, os.R_OK)
        return [(arcname, path)]
    if not path.is_dir():
        raise UserInputError(f"{path}: a {_kind(path)}, not a file or folder, cannot be packed; "
                             f"remove it or move it out of the folder")
    if real in seen:
        raise UserInputError(f"{path}: symbolic link loop (back to {real}); remove the link")
    _check_readable(path, os.R_OK | os.X_OK)
    found = [(arcname, path)] if arcname else []
    for child in sorted(path.iterdir(), key=lambda p: p.name):
        if _excluded(child.name, child.is_dir()):
            continue
        child_arc = f"{arcname}/{child.name}" if arcname else child.name
        found.extend(_members(child, child_arc, root, seen | {real}))
    return found


def _kind(path: Path) -> str:
    """What a path that is neither a file nor a folder is, in words."""
    mode = path.stat().st_mode
    kinds = ((stat.S_ISFIFO, "named pipe (FIFO)"), (stat.S_ISSOCK, "socket"),
             (stat.S_ISCHR, "character device"), (stat.S_ISBLK, "block device"))
    return next((name for test, name in kinds if test(mode)), "special file")


def _check_readable(path: Path, mode: int) -> None:
    if not os.access(path, mode):
        what = "folder" if mode & os.X_OK else "file"
        raise UserInputError(f"{path}: this {what} cannot be read (permission denied); make it "
                             f"readable or move it out of the folder")


def runtime_source() -> Path:
    """The folder of the installed `ddpjob_runtime` package (found without importing it)."""
    spec = importlib.util.find_spec(RUNTIME_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise RuntimeError(f"the {RUNTIME_PACKAGE} package is not installed beside ddpjob")
    return Path(next(iter(spec.submodule_search_locations)))


def check_runtime_name_free(spec: SourceSpec) -> None:
    """UserInputError when the user's code has its own top-level `ddpjob_runtime` (folder or
    module): on the container one would shadow the other."""
    taken = {RUNTIME_PACKAGE, f"{RUNTIME_PACKAGE}.py"}
    roots = [p for p in spec.source_dir.iterdir() if p.name in taken] if spec.source_dir else []
    clash = next(iter(roots + [d for d in spec.dependencies if d.name in taken]), None)
    if clash is not None:
        raise UserInputError(
            f"source_dir/dependencies: {os.fspath(clash)!r} is named like ddpjob's runtime, "
            f"which is packed beside your code for SageMaker's PyTorch container; rename it")


def archive_members(spec: SourceSpec, include_runtime: bool = False) -> list[tuple[str, Path]]:
    """What `pack` puts into the archive, in order: `(name in the archive, local path)`."""
    if spec.source_dir is not None:
        members = _members(spec.source_dir, "", spec.source_dir)
    else:
        path = Path(spec.entry_point).expanduser()
        members = [(path.name, path)]
    for dependency in spec.dependencies:
        members.extend(_members(dependency, dependency.name, dependency))
    if include_runtime:
        check_runtime_name_free(spec)
        members.extend(member for member in _members(runtime_source(), RUNTIME_PACKAGE,
                                                      runtime_source())
                       if member[0] != LOCAL_ONLY and not member[0].startswith(LOCAL_ONLY + "/"))
    names = [name for name, _ in members]
    duplicate = next((n for n in names if names.count(n) > 1), None)
    if duplicate:
        raise UserInputError(f"dependencies: {duplicate!r} is also in source_dir; rename one")
    return sorted(members, key=lambda member: member[0])


def _tarinfo(name: str, path: Path) -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    mode = path.stat().st_mode  # follows symlinks, like the official SDK (dereference=True)
    executable = stat.S_ISDIR(mode) or mode & stat.S_IXUSR
    info.mode = 0o755 if executable else 0o644
    info.type = tarfile.DIRTYPE if stat.S_ISDIR(mode) else tarfile.REGTYPE
    info.size = 0 if stat.S_ISDIR(mode) else path.stat().st_size
    info.mtime, info.uid, info.gid, info.uname, info.gname = 0, 0, 0, "", ""
    return info


def pack(spec: SourceSpec, target: str | os.PathLike, include_runtime: bool = False) -> str:
    """Write the deterministic `sourcedir.tar.gz` of `spec` to `target`; return its sha256.

    `include_runtime`: also pack `ddpjob_runtime` at the archive's root (for SageMaker's own
    PyTorch container, which does not have ddpjob installed)."""
    members = archive_members(spec, include_runtime)  # every refusal before a byte is written
    with open(target, "wb") as raw, \
            gzip.GzipFile(filename="", mode="wb", fileobj=raw, mtime=0, compresslevel=6) as gz, \
            tarfile.open(fileobj=gz, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for name, path in members:
            info = _tarinfo(name, path)
            if info.isdir():
                tar.addfile(info)
            else:
                if info.size > LARGE_FILE_BYTES:
                    logger.warning("packing %s: %.0f MB (is it a dataset or a checkpoint? pass "
                                   "data as inputs instead)", path, info.size / 1e6)
                with open(path, "rb") as handle:
                    tar.addfile(info, handle)
    return fsutil.sha256_file(target)
