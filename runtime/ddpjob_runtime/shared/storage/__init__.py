"""One storage for the client and the runtime: `s3://` through boto3/s3transfer, local folders.

URIs (see `uris.parse`) decide the store; the endpoint comes from the standard
`AWS_ENDPOINT_URL` / `AWS_ENDPOINT_URL_S3` variables, which botocore honours itself; transfer
tuning from the `DDPJOB_S3_*` variables (`s3.transfer_config`). Every failure is one
StorageError line naming the action, the URI and the cause; a missing object or file is an
ObjectNotFoundError. Uploads may record the content's sha256 as S3 object metadata, so
`upload_dir` skips unchanged files and `content_sha256` answers without a download.
Every local path built from a listed key goes through `fsutil.contained`.
"""

from __future__ import annotations

import logging
import os
import shutil
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any, NamedTuple

from ddpjob_runtime.shared import fsutil, safefiles
from ddpjob_runtime.shared.errors import ObjectNotFoundError, StorageError, UnsafePathError
from ddpjob_runtime.shared.storage import s3
from ddpjob_runtime.shared.storage.s3 import client
from ddpjob_runtime.shared.storage.uris import (
    BUCKET_RULES,
    Location,
    as_folder,
    check_bucket_name,
    is_bucket_name,
    is_s3,
    join,
    parse,
)

__all__ = ["BUCKET_RULES", "Listing", "Location", "ObjectInfo", "as_folder", "check_bucket",
           "check_bucket_name", "client", "content_sha256", "delete", "delete_prefix",
           "download_file", "download_objects", "download_prefix", "exists", "is_bucket_name",
           "is_s3", "join", "list_objects", "list_prefix", "parse", "read_bytes", "sha256_file",
           "upload_dir", "upload_file"]

log = logging.getLogger(__name__)
sha256_file = fsutil.sha256_file


@dataclass(frozen=True)
class ObjectInfo:
    """An object (or file) found under a listed folder; `key` is relative to that folder."""

    key: str
    size: int
    etag: str | None = None


@contextmanager
def _local_errors(uri: str, action: str) -> Iterator[None]:
    try:
        yield
    except FileNotFoundError as error:
        raise ObjectNotFoundError(f"{action} {uri} failed: no such file or folder "
                                  f"({error.filename})") from error
    except PermissionError as error:
        raise StorageError(f"{action} {uri} failed: permission denied ({error.filename})") \
            from error
    except OSError as error:
        raise StorageError(f"{action} {uri} failed: {error.strerror or error}") from error


def _target(folder: Path, key: str, uri: str) -> Path:
    try:
        return fsutil.contained(folder, key, what="object key")
    except UnsafePathError as error:
        raise StorageError(f"download of {uri} failed: {error}") from None


def _local_files(folder: Path, *, strict: bool = False) -> dict[str, safefiles.Found]:
    """Every file under `folder` by relative posix key, sorted; temp files still being written
    skipped (a user's file of that shape is kept: `fsutil.being_written`). A link out
    of the folder, a linked folder, a named pipe, socket or device (`safefiles.scan`) is left
    out with a warning: a store's folder is read, never followed elsewhere nor waited on;
    `strict` (a folder of the caller's own to upload) refuses it instead (StorageError)."""
    found = safefiles.scan(folder, skip=lambda rel: fsutil.being_written(folder / rel))
    for rel, why in found.refused.items():
        if strict:
            raise StorageError(f"{folder / rel}: {why}, so it cannot be copied; remove it")
        log.warning("leaving %s out of %s: %s", rel, folder, why)
    return found.files


def _open_local(path: Path) -> IO[bytes]:
    """The regular file `path` for reading; never a link out of its folder nor a pipe."""
    return safefiles.open_file(path.parent, path.name)


def list_objects(uri: str) -> list[ObjectInfo]:
    """Every object under the folder `uri` (keys relative to it, sorted); [] when there is none.

    A missing bucket is a StorageError.
    """
    location = parse(as_folder(uri))
    if not location.is_s3:
        if not location.path.is_dir():
            return []
        with _local_errors(uri, "listing of"):
            return [ObjectInfo(key, found.size)
                    for key, found in _local_files(location.path).items()]
    prefix = location.key
    with s3.errors(uri, "listing of"):
        pages = client().get_paginator("list_objects_v2").paginate(
            Bucket=location.bucket, Prefix=prefix)
        found = [ObjectInfo(item["Key"][len(prefix):], item["Size"], item.get("ETag"))
                 for page in pages for item in page.get("Contents", [])
                 if not item["Key"].endswith("/")]  # console-made "folder" markers
    return sorted(found, key=lambda info: info.key)


def _upload_args(extra_args: Mapping[str, Any] | None, sha256: str | None) -> dict | None:
    """s3transfer's ExtraArgs: the caller's, with the content's sha256 added to its Metadata."""
    merged = dict(extra_args or {})
    if sha256:
        merged["Metadata"] = {**merged.get("Metadata", {}), s3.SHA256_METADATA: sha256}
    return merged or None


def upload_file(path: str | os.PathLike | IO[bytes], uri: str, *, sha256: str | None = None,
                progress: bool = False, extra_args: Mapping[str, Any] | None = None) -> str:
    """Upload one local file to `uri` (into it, keeping the name, when `uri` ends with '/').

    `path` may be a binary file already open (read from its start; `uri` then names the
    object). `sha256`, when given, is recorded as the object's metadata; `extra_args` are
    boto3's ExtraArgs of an S3 upload (e.g. ServerSideEncryption). Returns the object's URI.
    """
    opened = not isinstance(path, (str, os.PathLike))
    if uri.endswith("/") and not opened:
        uri = join(uri, Path(path).name)
    target = parse(uri)
    if not opened and not Path(path).is_file():
        raise ObjectNotFoundError(f"upload to {uri} failed: {path} is not a file")
    size = os.fstat(path.fileno()).st_size if opened else Path(path).stat().st_size
    if opened:
        path.seek(0)
    if not target.is_s3:
        with _local_errors(uri, "upload to"):
            fsutil.copy_file(path, target.path)
        return uri
    upload = ("upload", (path if opened else os.fspath(path), target.bucket, target.key),
              {"extra_args": _upload_args(extra_args, sha256)})
    s3.run_transfers(uri, "upload to", [upload], size if progress else None)
    return uri


def upload_dir(local_dir: str | os.PathLike, uri: str, *, skip_unchanged: bool = True,
               progress: bool = False, extra_args: Mapping[str, Any] | None = None) -> int:
    """Upload every file under `local_dir` to the folder `uri` (relative paths kept).

    With `skip_unchanged`, files already there with the same sha256 are not sent again.
    `extra_args`: boto3's ExtraArgs of each S3 upload. Returns how many files were uploaded.
    """
    folder = Path(local_dir)
    if not folder.is_dir():
        raise StorageError(f"upload to {uri} failed: {folder} is not a folder")
    target = parse(as_folder(uri))
    files = _local_files(folder, strict=True)
    if not target.is_s3:
        with _local_errors(uri, "upload to"):
            for key in files:
                with safefiles.open_file(folder, key) as handle:
                    fsutil.copy_file(handle, target.path / key)
        return len(files)
    existing = {info.key: info.size for info in list_objects(uri)} if skip_unchanged else {}
    jobs, total = [], 0
    for key, found in files.items():
        path = folder / key
        digest = sha256_file(path) if skip_unchanged else None
        if existing.get(key) == found.size and content_sha256(join(uri, key)) == digest:
            continue
        jobs.append(("upload", (str(path), target.bucket, target.key + key),
                     {"extra_args": _upload_args(extra_args, digest)}))
        total += found.size
    s3.run_transfers(uri, "upload to", jobs, total if progress else None)
    log.info("uploaded %d file(s) to %s (%d unchanged)", len(jobs), uri, len(files) - len(jobs))
    return len(jobs)


def download_file(uri: str, path: str | os.PathLike, *, progress: bool = False) -> Path:
    """Download the object `uri` to the file `path` (into it, when `path` is a folder)."""
    source, target = parse(uri), Path(path)
    if target.is_dir():
        target = target / Path(source.key or str(source.path)).name
    if not source.is_s3:
        with _local_errors(uri, "download of"), _open_local(source.path) as handle:
            fsutil.copy_file(handle, target)
        return target
    if not source.key or source.key.endswith("/"):
        raise StorageError(f"download of {uri} failed: the URI names a folder, not an object")
    target.parent.mkdir(parents=True, exist_ok=True)
    size = None
    if progress:
        with s3.errors(uri, "download of"):
            found = s3.head(source.bucket, source.key)
        size = found["ContentLength"] if found else 0
    download = ("download", (source.bucket, source.key, str(target)), {})
    try:
        s3.run_transfers(uri, "download of", [download], size)
    except ObjectNotFoundError as error:
        # HeadObject answers a bare 404 for a missing bucket too: tell the two apart.
        with s3.errors(uri, "download of"):
            if not s3.bucket_exists(source.bucket):
                raise StorageError(f"download of {uri} failed: no such bucket") from error
        raise
    return target


class Listing(NamedTuple):
    """What a URI brings down: `objects`, their keys relative to the folder URI `folder`."""

    folder: str
    objects: list[ObjectInfo]


def list_prefix(uri: str) -> Listing:
    """What `download_prefix(uri, ...)` brings, with sizes and ETags, without downloading it.

    A `uri` naming one object or file (no trailing slash) lists that one alone, relative to its
    own folder; otherwise `uri` is a folder. A missing local folder is an ObjectNotFoundError,
    an empty or missing S3 prefix an empty listing.
    """
    source = parse(uri)
    if not uri.endswith("/"):
        if not source.is_s3 and source.path.is_file():
            return Listing(as_folder(source.path.parent.as_uri()),
                           [ObjectInfo(source.path.name, source.path.stat().st_size)])
        if source.is_s3 and source.key:
            with s3.errors(uri, "download of"):
                single = s3.head(source.bucket, source.key)
            if single is not None:
                parent, _, name = source.key.rpartition("/")
                return Listing(as_folder(f"s3://{source.bucket}/{parent}"),
                               [ObjectInfo(name, single["ContentLength"], single.get("ETag"))])
    if not source.is_s3 and not source.path.is_dir():
        raise ObjectNotFoundError(f"download of {uri} failed: no such file or folder")
    return Listing(as_folder(uri), list_objects(uri))


def download_objects(folder: str, pairs: Sequence[tuple[ObjectInfo, Path]], *,
                     progress: bool = False, extra_args: Mapping[str, Any] | None = None) -> None:
    """Download each listed object of the folder URI `folder` to its path, in parallel (S3).

    `extra_args`: boto3's ExtraArgs of each S3 download (e.g. RequestPayer).
    """
    source = parse(folder)
    if not source.is_s3:
        with _local_errors(folder, "download of"):
            for info, target in pairs:
                with safefiles.open_file(source.path, info.key) as handle:
                    fsutil.copy_file(handle, target)
        return
    for _, target in pairs:
        Path(target).parent.mkdir(parents=True, exist_ok=True)
    # The listed size and ETag spare s3transfer its HeadObject per file.
    s3.run_transfers(folder, "download of", [
        ("download", (source.bucket, source.key + info.key, str(target)),
         {"extra_args": extra_args, "subscribers": [s3.known_object(info.size, info.etag)]})
        for info, target in pairs
    ], sum(info.size for info, _ in pairs) if progress else None)


def download_prefix(uri: str, local_dir: str | os.PathLike, *, keys: Sequence[str] | None = None,
                    progress: bool = False,
                    extra_args: Mapping[str, Any] | None = None) -> list[Path]:
    """Bring everything under the folder `uri` (or only `keys`, relative) into `local_dir`.

    A `uri` naming one object or file (no trailing slash) brings that file alone; otherwise
    `uri` is a folder: `run-1` never pulls in `run-10/`. Returns the local paths written.
    """
    folder = Path(local_dir)
    folder.mkdir(parents=True, exist_ok=True)
    if keys is None:
        listing = list_prefix(uri)
    else:
        listing = list_prefix(as_folder(uri))
        wanted = set(keys)
        listing = Listing(listing.folder, [i for i in listing.objects if i.key in wanted])
    pairs = [(info, _target(folder, info.key, uri)) for info in listing.objects]
    download_objects(listing.folder, pairs, progress=progress, extra_args=extra_args)
    log.info("downloaded %d objects (%d bytes) from %s", len(pairs),
             sum(info.size for info, _ in pairs), uri)
    return [target for _, target in pairs]


def read_bytes(uri: str) -> bytes:
    """The whole content of a small object (a manifest, a config file)."""
    location = parse(uri)
    if not location.is_s3:
        with _local_errors(uri, "read of"), _open_local(location.path) as handle:
            return handle.read()
    with s3.errors(uri, "read of"):
        return client().get_object(Bucket=location.bucket, Key=location.key)["Body"].read()


def exists(uri: str) -> bool:
    """True when the object (or local file) `uri` exists."""
    location = parse(uri)
    if not location.is_s3:
        return location.path.is_file()
    with s3.errors(uri, "lookup of"):
        return s3.head(location.bucket, location.key) is not None


def content_sha256(uri: str) -> str | None:
    """The sha256 of the object `uri` (recorded at upload for S3), None when unknown or absent."""
    location = parse(uri)
    if not location.is_s3:
        try:
            with _open_local(location.path) as handle:
                return sha256_file(handle)
        except OSError:
            return None
    with s3.errors(uri, "lookup of"):
        found = s3.head(location.bucket, location.key)
    return (found or {}).get("Metadata", {}).get(s3.SHA256_METADATA)


def check_bucket(uri: str) -> None:
    """Fail now (StorageError) when the bucket of an `s3://` URI cannot be used."""
    location = parse(uri)
    if location.is_s3:
        with s3.errors(uri, "access to"):
            if not s3.bucket_exists(location.bucket):
                raise StorageError(f"access to {uri} failed: no such bucket")


def delete(uri: str) -> None:
    """Delete one object or file; a missing one is not an error."""
    location = parse(uri)
    if not location.is_s3:
        location.path.unlink(missing_ok=True)
        return
    with s3.errors(uri, "delete of"):
        client().delete_object(Bucket=location.bucket, Key=location.key)


def delete_prefix(uri: str) -> int:
    """Delete everything under the folder `uri`; returns how many objects went."""
    location = parse(as_folder(uri))
    infos = list_objects(uri)
    if not location.is_s3:
        shutil.rmtree(location.path, ignore_errors=True)
        return len(infos)
    keys = [location.key + info.key for info in infos]
    for start in range(0, len(keys), 1000):  # DeleteObjects takes at most 1000 keys
        batch = [{"Key": key} for key in keys[start:start + 1000]]
        with s3.errors(uri, "delete of"):
            out = client().delete_objects(Bucket=location.bucket,
                                          Delete={"Objects": batch, "Quiet": True})
        if out.get("Errors"):
            error = out["Errors"][0]
            raise StorageError(f"delete of {uri} failed: {error['Key']}: {error['Code']}")
    return len(keys)
