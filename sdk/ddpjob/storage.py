"""Client storage: `s3://` through boto3 + s3transfer, `file://` and plain paths as local folders.

The endpoint comes from the standard `AWS_ENDPOINT_URL` / `AWS_ENDPOINT_URL_S3` variables, which
botocore honours itself. Transfers run through s3transfer's TransferManager (multipart, parallel
parts and files) with botocore's retries; nothing here retries by hand. Every failure is one
StorageError naming the URI and the cause. Uploads record the content's sha256 (S3 object
metadata), so `upload_dir(..., skip_same=True)` and `content_sha256` can skip unchanged files.

Independent from the runtime's storage module on purpose: the two share nothing but URIs.
"""

from __future__ import annotations

import hashlib
import logging
import os
import re
import shutil
import tempfile
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlparse

from ddpjob.errors import ObjectNotFoundError, StorageError, UserInputError

logger = logging.getLogger(__name__)

MB = 1024 * 1024
# Parts of 16 MB, 16 in flight: a 1 GB object is 64 parts; small files go 16 at a time.
MULTIPART_THRESHOLD = 16 * MB
MULTIPART_CHUNKSIZE = 16 * MB
MAX_CONCURRENCY = 16
PROGRESS_MIN_BYTES = 32 * MB  # no progress bar for transfers that end in a blink
_RETRIES = {"mode": "standard", "max_attempts": 10}
_BUCKET = re.compile(r"^[a-z0-9][a-z0-9.\-]{1,61}[a-z0-9]$")
SHA256_METADATA = "sha256"


@dataclass(frozen=True)
class Location:
    """A parsed URI: `scheme` "s3" (bucket, key) or "file" (path)."""

    uri: str
    scheme: str
    bucket: str = ""
    key: str = ""
    path: Path | None = None


@dataclass(frozen=True)
class ObjectInfo:
    """An object (or file) found under a listed folder; `key` is relative to that folder."""

    key: str
    size: int


def is_bucket_name(name: str) -> bool:
    """Whether `name` is a valid S3 bucket name (3-63 lowercase letters, digits, dots, hyphens)."""
    return bool(_BUCKET.match(name)) and ".." not in name


def parse(uri: Any, argument: str = "uri") -> Location:
    """Parse `s3://bucket/key`, `file:///abs/path` or a plain path; UserInputError otherwise."""
    if isinstance(uri, os.PathLike):
        uri = os.fspath(uri)
    if not isinstance(uri, str) or not uri:
        raise UserInputError(f"{argument} must be a URI (s3://bucket/key or file:///path) or a "
                             f"path, got {uri!r}")
    if uri.startswith("s3://"):
        bucket, _, key = uri[len("s3://"):].partition("/")
        if not is_bucket_name(bucket):
            raise UserInputError(
                f"{argument} {uri!r}: {bucket!r} is not an S3 bucket name (3-63 lowercase "
                f"letters, digits, dots and hyphens); use s3://<bucket>/<key>"
            )
        return Location(uri=uri, scheme="s3", bucket=bucket, key=key)
    if uri.startswith("file://"):
        parsed = urlparse(uri)
        if parsed.netloc not in ("", "localhost") or not parsed.path.startswith("/"):
            raise UserInputError(
                f"{argument} {uri!r}: a file URI needs an absolute path, e.g. file:///data/train"
            )
        return Location(uri=uri, scheme="file", path=Path(unquote(parsed.path)))
    if re.match(r"^[a-zA-Z][a-zA-Z0-9+.\-]*://", uri):
        raise UserInputError(
            f"{argument} {uri!r}: unsupported scheme; use s3://bucket/key, file:///path or a "
            f"local path"
        )
    path = Path(uri).expanduser().absolute()
    return Location(uri=path.as_uri(), scheme="file", path=path)


def is_s3(uri: str) -> bool:
    """True for `s3://` URIs."""
    return isinstance(uri, str) and uri.startswith("s3://")


def file_uri(path: str | os.PathLike) -> str:
    """`file:///abs/path` of a local path."""
    return Path(path).expanduser().absolute().as_uri()


def join(uri: str, *parts: str) -> str:
    """`uri` and `parts` joined with single slashes (`s3://b/out/` + `job` -> `s3://b/out/job`)."""
    result = uri.rstrip("/")
    for part in parts:
        result = f"{result}/{part.strip('/')}"
    return result


def as_folder(uri: str) -> str:
    """`uri` with exactly one trailing slash, so that `run-1` never matches `run-10`."""
    return uri.rstrip("/") + "/"


# ---------------------------------------------------------------- S3 plumbing


_clients: dict[tuple, Any] = {}


def s3_client() -> Any:
    """A boto3 S3 client with botocore's standard retries, shared while the environment is same."""
    import boto3
    from botocore.config import Config

    names = ("AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_S3", "AWS_ACCESS_KEY_ID", "AWS_PROFILE",
             "AWS_DEFAULT_REGION", "AWS_REGION")
    key = tuple(os.environ.get(name) for name in names)
    if key not in _clients:
        config = Config(retries=_RETRIES, max_pool_connections=MAX_CONCURRENCY + 4)
        _clients[key] = boto3.session.Session().client("s3", config=config)
    return _clients[key]


def _transfer_config() -> Any:
    from boto3.s3.transfer import TransferConfig

    return TransferConfig(multipart_threshold=MULTIPART_THRESHOLD,
                          multipart_chunksize=MULTIPART_CHUNKSIZE,
                          max_concurrency=MAX_CONCURRENCY, use_threads=True)


def _cause(error: BaseException) -> str:
    """What went wrong, in words, for a botocore/s3transfer exception."""
    from botocore.exceptions import (
        ClientError,
        EndpointConnectionError,
        NoCredentialsError,
        PartialCredentialsError,
    )

    if isinstance(error, (NoCredentialsError, PartialCredentialsError)):
        return ("no AWS credentials (run `aws configure`, or set AWS_PROFILE or "
                "AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY)")
    if isinstance(error, EndpointConnectionError):
        return f"cannot reach the S3 endpoint ({error})"
    if isinstance(error, ClientError):
        err = error.response.get("Error", {})
        code = str(err.get("Code", ""))
        if code == "NoSuchBucket":
            return "no such bucket"
        if code in ("AccessDenied", "403", "Forbidden", "AllAccessDisabled"):
            return "access denied (check the bucket policy and your IAM permissions)"
        if code in ("InvalidAccessKeyId", "SignatureDoesNotMatch", "ExpiredToken"):
            return f"AWS credentials rejected ({code})"
        if code in ("NoSuchKey", "404", "NotFound"):
            return "no such object"
        return f"{code}: {' '.join(str(err.get('Message', '')).split())}"
    return f"{type(error).__name__}: {' '.join(str(error).split())}"


@contextmanager
def _s3_errors(uri: str, action: str) -> Iterator[None]:
    from botocore.exceptions import BotoCoreError, ClientError

    try:
        yield
    except (ClientError, BotoCoreError) as error:
        cause = _cause(error)
        kind = ObjectNotFoundError if cause == "no such object" else StorageError
        raise kind(f"{action} {uri} failed: {cause}") from error


def _progress(total: int, description: str) -> Any:
    from tqdm.auto import tqdm

    return tqdm(total=total, unit="B", unit_scale=True, unit_divisor=1024, desc=description,
                disable=total < PROGRESS_MIN_BYTES, leave=False)


def _subscribers(bar: Any) -> list:
    from s3transfer.subscribers import BaseSubscriber

    class _Progress(BaseSubscriber):
        def on_progress(self, future: Any, bytes_transferred: int, **kwargs: Any) -> None:
            bar.update(bytes_transferred)

    return [_Progress()]


def _run_transfers(uri: str, action: str, jobs: Sequence[tuple[str, Callable]], total: int) -> None:
    """Submit every `(label, submit(manager, subscribers))` to one TransferManager; wait for all."""
    from boto3.s3.transfer import create_transfer_manager

    if not jobs:
        return
    client = s3_client()
    with _s3_errors(uri, action), _progress(total, action) as bar:
        subscribers = _subscribers(bar)
        with create_transfer_manager(client, _transfer_config()) as manager:
            futures = [submit(manager, subscribers) for _, submit in jobs]
            for future in futures:
                future.result()


# ---------------------------------------------------------------- hashing and local copies


def sha256_file(path: str | os.PathLike) -> str:
    """Hex sha256 of a local file."""
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        while chunk := handle.read(8 * MB):
            digest.update(chunk)
    return digest.hexdigest()


def _copy_atomic(source: Path, target: Path) -> None:
    """Copy so that readers see the old file or the whole new one, never a part."""
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.")
    os.close(fd)
    try:
        shutil.copyfile(source, tmp)
        os.replace(tmp, target)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


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


# ---------------------------------------------------------------- public operations


def upload_file(path: str | os.PathLike, uri: str, *, sha256: str | None = None) -> str:
    """Upload one local file to `uri` (an object, not a folder); return `uri`."""
    target = parse(uri)
    source = Path(path)
    if not source.is_file():
        raise StorageError(f"upload to {uri} failed: {source} is not a file")
    if target.scheme == "file":
        with _local_errors(uri, "upload to"):
            _copy_atomic(source, target.path)
        return uri
    digest = sha256 or sha256_file(source)

    def submit(manager: Any, subscribers: list) -> Any:
        return manager.upload(str(source), target.bucket, target.key,
                              extra_args={"Metadata": {SHA256_METADATA: digest}},
                              subscribers=subscribers)

    _run_transfers(uri, "upload to", [(str(source), submit)], source.stat().st_size)
    return uri


def _local_files(folder: Path) -> list[tuple[str, Path]]:
    """`(relative posix key, path)` of every file under `folder`, sorted."""
    found = []
    for root, dirs, files in os.walk(folder, followlinks=True):
        dirs.sort()
        for name in sorted(files):
            path = Path(root, name)
            found.append((path.relative_to(folder).as_posix(), path))
    return found


def upload_dir(local_dir: str | os.PathLike, uri: str, *, skip_same: bool = True) -> int:
    """Upload every file under `local_dir` to the folder `uri` (relative paths kept).

    With `skip_same`, files whose content is already there (same sha256) are not sent again.
    Returns how many files were uploaded.
    """
    folder = Path(local_dir)
    if not folder.is_dir():
        raise StorageError(f"upload to {uri} failed: {folder} is not a folder")
    target = parse(uri)
    files = _local_files(folder)
    if target.scheme == "file":
        with _local_errors(uri, "upload to"):
            for key, path in files:
                _copy_atomic(path, target.path / key)
        return len(files)

    existing = {info.key: info.size for info in list_objects(uri)} if skip_same else {}
    jobs, total, bucket = [], 0, target.bucket
    for key, path in files:
        digest = sha256_file(path)
        object_uri = join(uri, key)
        if existing.get(key) == path.stat().st_size and content_sha256(object_uri) == digest:
            logger.debug("%s unchanged, not uploaded again", object_uri)
            continue
        object_key = parse(object_uri).key

        def submit(manager: Any, subscribers: list, path=path, key=object_key, digest=digest):
            return manager.upload(str(path), bucket, key,
                                  extra_args={"Metadata": {SHA256_METADATA: digest}},
                                  subscribers=subscribers)

        jobs.append((key, submit))
        total += path.stat().st_size
    _run_transfers(uri, "upload to", jobs, total)
    logger.info("uploaded %d file(s) to %s (%d unchanged)", len(jobs), uri,
                len(files) - len(jobs))
    return len(jobs)


def download_file(uri: str, path: str | os.PathLike) -> Path:
    """Download the object `uri` to the local file `path`; return the path."""
    source, target = parse(uri), Path(path)
    if source.scheme == "file":
        with _local_errors(uri, "download of"):
            if not source.path.is_file():
                raise FileNotFoundError(2, "no such file", str(source.path))
            _copy_atomic(source.path, target)
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    size = _head(uri, "download of")["ContentLength"]

    def submit(manager: Any, subscribers: list) -> Any:
        return manager.download(source.bucket, source.key, str(target), subscribers=subscribers)

    _run_transfers(uri, "download of", [(uri, submit)], size)
    return target


def _safe_relative(key: str, uri: str) -> str:
    parts = [p for p in key.split("/") if p not in ("", ".")]
    if ".." in parts or not parts:
        raise StorageError(f"download of {uri} failed: object key {key!r} escapes the folder")
    return "/".join(parts)


def download_prefix(uri: str, local_dir: str | os.PathLike,
                    keys: Sequence[str] | None = None) -> list[Path]:
    """Download everything under the folder `uri` (or only `keys`, relative) into `local_dir`."""
    source, folder = parse(uri), Path(local_dir)
    infos = list_objects(uri)
    if keys is not None:
        wanted = set(keys)
        infos = [info for info in infos if info.key in wanted]
    paths = []
    if source.scheme == "file":
        with _local_errors(uri, "download of"):
            for info in infos:
                target = folder / _safe_relative(info.key, uri)
                _copy_atomic(source.path / info.key, target)
                paths.append(target)
        return paths
    prefix = parse(as_folder(uri)).key
    jobs = []
    for info in infos:
        target = folder / _safe_relative(info.key, uri)
        target.parent.mkdir(parents=True, exist_ok=True)
        paths.append(target)

        def submit(manager: Any, subscribers: list, key=prefix + info.key, target=target):
            return manager.download(source.bucket, key, str(target), subscribers=subscribers)

        jobs.append((info.key, submit))
    _run_transfers(uri, "download of", jobs, sum(info.size for info in infos))
    return paths


def list_objects(uri: str) -> list[ObjectInfo]:
    """Every object under the folder `uri` (keys relative to it, sorted); [] when there is none."""
    location = parse(as_folder(uri))
    if location.scheme == "file":
        if not location.path.is_dir():
            return []
        with _local_errors(uri, "listing of"):
            return [ObjectInfo(key, path.stat().st_size)
                    for key, path in _local_files(location.path)]
    found = []
    with _s3_errors(uri, "listing of"):
        pages = s3_client().get_paginator("list_objects_v2").paginate(
            Bucket=location.bucket, Prefix=location.key)
        for page in pages:
            for item in page.get("Contents", []):
                found.append(ObjectInfo(item["Key"][len(location.key):], item["Size"]))
    return sorted(found, key=lambda info: info.key)


def _head(uri: str, action: str) -> dict[str, Any]:
    location = parse(uri)
    with _s3_errors(uri, action):
        return s3_client().head_object(Bucket=location.bucket, Key=location.key)


def exists(uri: str) -> bool:
    """True when the object (or local file) `uri` exists."""
    location = parse(uri)
    if location.scheme == "file":
        return location.path.is_file()
    from botocore.exceptions import ClientError

    try:
        with _s3_errors(uri, "lookup of"):
            s3_client().head_object(Bucket=location.bucket, Key=location.key)
    except StorageError as error:
        cause = error.__cause__
        if isinstance(cause, ClientError) and _cause(cause) == "no such object":
            return False
        raise
    return True


def content_sha256(uri: str) -> str | None:
    """The sha256 of the object `uri` (recorded at upload for S3), None when unknown or absent."""
    location = parse(uri)
    if location.scheme == "file":
        return sha256_file(location.path) if location.path.is_file() else None
    if not exists(uri):
        return None
    return _head(uri, "lookup of").get("Metadata", {}).get(SHA256_METADATA)


def read_bytes(uri: str) -> bytes:
    """The whole content of a small object (a manifest, a config file)."""
    location = parse(uri)
    if location.scheme == "file":
        with _local_errors(uri, "read of"):
            return location.path.read_bytes()
    with _s3_errors(uri, "read of"):
        response = s3_client().get_object(Bucket=location.bucket, Key=location.key)
        return response["Body"].read()


def check_bucket(uri: str) -> None:
    """Fail now (StorageError) when the bucket of an `s3://` URI cannot be used."""
    from botocore.exceptions import ClientError

    location = parse(uri)
    if location.scheme != "s3":
        return
    try:
        with _s3_errors(uri, "access to"):
            s3_client().head_bucket(Bucket=location.bucket)
    except StorageError as error:
        cause = error.__cause__
        if isinstance(cause, ClientError) and _cause(cause) == "no such object":
            raise StorageError(f"access to {uri} failed: no such bucket") from cause
        raise
