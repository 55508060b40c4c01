"""The S3 side of storage: the one client cache, transfer settings, errors in words, progress.

boto3, botocore, s3transfer and tqdm are imported on first use only.
"""

from __future__ import annotations

import functools
import hashlib
import os
import threading
from collections.abc import Iterable, Iterator
from contextlib import contextmanager, nullcontext
from typing import IO, TYPE_CHECKING, Any

from ddpjob_runtime.shared import contract
from ddpjob_runtime.shared.errors import ObjectNotFoundError, StorageError
from ddpjob_runtime.shared.storage.uris import LOCAL_BUCKET

if TYPE_CHECKING:  # pragma: no cover
    from boto3.s3.transfer import TransferConfig
    from botocore.client import BaseClient
    from s3transfer.futures import TransferFuture
    from s3transfer.subscribers import BaseSubscriber

MB = 1024 * 1024
# Measured with benchmarks/bench_transfers.py (moto on loopback, 2 CPUs, --no-cli sweeps with
# DDPJOB_S3_*; 256 MB file, 1,000 small files): 16 MiB parts beat 8 MiB on download (3.5 s vs
# 7.2 s) and 32 MiB on upload (2.5 s vs 4.7 s: too few parts to fill 16 threads); upload equal at
# 8/16 MiB. Concurrency 32 vs 16 was within run-to-run noise (+-15%) for small files, so 16.
# Against the AWS CLI (defaults: 8 MB, 10 requests), ours/CLI: 0.74 up, 0.47 down (256 MB),
# 0.96 / 0.93 for 2,000 small files up / down. The pool (below) is >= the concurrency, so
# no transfer thread waits for a connection.
MULTIPART_THRESHOLD = 16 * MB
MULTIPART_CHUNKSIZE = 16 * MB
MAX_CONCURRENCY = 16
MAX_ATTEMPTS = 8  # botocore "standard" retries: exponential backoff with jitter, 5xx/throttling
PROGRESS_MIN_BYTES = 32 * MB  # no progress bar for transfers that end in a blink
SHA256_METADATA = "sha256"
_NOT_FOUND = ("NoSuchKey", "404", "NotFound")
_CLIENT_ENV = ("AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_S3", "AWS_ACCESS_KEY_ID", "AWS_PROFILE",
               "AWS_DEFAULT_REGION", "AWS_REGION", "AWS_SHARED_CREDENTIALS_FILE",
               "AWS_CONFIG_FILE")

_lock = threading.Lock()
_clients: dict[tuple, BaseClient] = {}


def transfer_config() -> TransferConfig:
    """The s3transfer settings: module defaults, overridable by the DDPJOB_S3_* variables."""
    from boto3.s3.transfer import TransferConfig

    def env_int(name: str, default: int) -> int:
        return int(os.environ.get(name) or default)

    return TransferConfig(
        multipart_threshold=env_int(contract.ENV_S3_MULTIPART_THRESHOLD, MULTIPART_THRESHOLD),
        multipart_chunksize=env_int(contract.ENV_S3_MULTIPART_CHUNKSIZE, MULTIPART_CHUNKSIZE),
        max_concurrency=env_int(contract.ENV_S3_MAX_CONCURRENCY, MAX_CONCURRENCY),
        use_threads=True)


def client() -> BaseClient:
    """The process's S3 client: one per process and AWS environment, thread-safe."""
    # Keyed by pid (a forked child must not share the parent's connection pool) and by the
    # variables that pick the endpoint and credentials (tests switch them within a process).
    key = (os.getpid(), *(os.environ.get(name) for name in _CLIENT_ENV))
    with _lock:
        if key not in _clients:
            import boto3
            from botocore.config import Config

            custom = os.environ.get("AWS_ENDPOINT_URL_S3") or os.environ.get("AWS_ENDPOINT_URL")
            config = Config(
                retries={"mode": "standard", "max_attempts": MAX_ATTEMPTS},
                max_pool_connections=max(MAX_CONCURRENCY, transfer_config().max_concurrency) + 4,
                connect_timeout=10,
                read_timeout=120,
                # S3-compatible endpoints (moto, MinIO) rarely resolve bucket subdomains.
                s3={"addressing_style": "path"} if custom else None)
            _clients.clear()
            _clients[key] = boto3.session.Session().client("s3", config=config)
        return _clients[key]


def explain(error: BaseException) -> tuple[str, bool]:
    """(the cause of a boto3/botocore/s3transfer failure in words, whether it is 'not found')."""
    from botocore.exceptions import (
        ClientError,
        EndpointConnectionError,
        NoCredentialsError,
        PartialCredentialsError,
    )

    seen: BaseException | None = error
    while seen is not None:  # s3transfer/boto3 wrap the botocore error; find it
        if isinstance(seen, (NoCredentialsError, PartialCredentialsError)):
            return ("no AWS credentials (run `aws configure`, or set AWS_PROFILE or "
                    "AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY; a local job needs none for "
                    f"s3://{LOCAL_BUCKET}/... or file:// URIs)", False)
        if isinstance(seen, EndpointConnectionError):
            return f"cannot reach the S3 endpoint ({seen})", False
        if isinstance(seen, ClientError):
            err = seen.response.get("Error", {})
            code = str(err.get("Code", ""))
            if code == "NoSuchBucket":
                return "no such bucket", False
            if code in _NOT_FOUND:
                return "no such object", True
            if code in ("AccessDenied", "403", "Forbidden", "AllAccessDisabled"):
                return "access denied (check the bucket policy and your IAM permissions)", False
            if code in ("InvalidAccessKeyId", "SignatureDoesNotMatch", "ExpiredToken"):
                return f"AWS credentials rejected ({code})", False
            return f"{code}: {' '.join(str(err.get('Message', '')).split())}", False
        seen = seen.__cause__ or seen.__context__
    return f"{type(error).__name__}: {' '.join(str(error).split())}", False


@contextmanager
def errors(uri: str, action: str) -> Iterator[None]:
    """Turn any AWS failure in the block into one StorageError line naming `action` and `uri`."""
    try:
        yield
    except StorageError:
        raise
    except Exception as error:
        if not type(error).__module__.startswith(("boto3", "botocore", "s3transfer")):
            raise
        cause, not_found = explain(error)
        kind = ObjectNotFoundError if not_found else StorageError
        raise kind(f"{action} {uri} failed: {cause}") from error


def head(bucket: str, key: str) -> dict[str, Any] | None:
    """HeadObject's answer, None when the object is not there (other failures raise)."""
    from botocore.exceptions import ClientError

    try:
        return client().head_object(Bucket=bucket, Key=key)
    except ClientError as error:
        if error.response.get("Error", {}).get("Code") in _NOT_FOUND:
            return None
        raise


def bucket_exists(bucket: str) -> bool:
    """Whether `bucket` exists (other failures, e.g. access denied, raise)."""
    from botocore.exceptions import ClientError

    try:
        client().head_bucket(Bucket=bucket)
    except ClientError as error:
        if error.response.get("Error", {}).get("Code") in (*_NOT_FOUND, "NoSuchBucket"):
            return False
        raise
    return True


def expected_etag(source: IO[bytes]) -> str:
    """The ETag S3 gives an upload of `source` by `run_transfers` (its bytes from the start):
    the MD5 of the bytes, or above the multipart threshold the MD5 of each part's MD5 and the
    number of parts, with the part size s3transfer picks."""
    from s3transfer.utils import ChunksizeAdjuster

    config = transfer_config()
    size = os.fstat(source.fileno()).st_size
    source.seek(0)
    if size < config.multipart_threshold:
        return f'"{_md5(source, size).hexdigest()}"'
    part = ChunksizeAdjuster().adjust_chunksize(config.multipart_chunksize, size)
    count = -(-size // part)
    digests = b"".join(_md5(source, part).digest() for _ in range(count))
    return f'"{hashlib.md5(digests, usedforsecurity=False).hexdigest()}-{count}"'


def _md5(source: IO[bytes], length: int) -> Any:
    """The MD5 of the next `length` bytes of `source` (fewer at its end)."""
    digest = hashlib.md5(usedforsecurity=False)
    while length > 0 and (chunk := source.read(min(length, 8 * MB))):
        digest.update(chunk)
        length -= len(chunk)
    return digest


@functools.cache
def _known_object_type() -> type:
    """An s3transfer subscriber handing over the listed size and ETag, as `aws s3 cp` does:
    s3transfer then skips its HeadObject per file (half the requests of a many-file download)."""
    from s3transfer.subscribers import BaseSubscriber

    class KnownObject(BaseSubscriber):
        def __init__(self, size: int, etag: str | None) -> None:
            self.size, self.etag = size, etag

        def on_queued(self, future: TransferFuture, **kwargs: Any) -> None:
            future.meta.provide_transfer_size(self.size)
            if self.etag:
                future.meta.provide_object_etag(self.etag)

    return KnownObject


def known_object(size: int, etag: str | None) -> BaseSubscriber:
    """The subscriber that tells s3transfer an object's listed size and ETag."""
    return _known_object_type()(size, etag)


def _progress_bar(total: int, description: str) -> Any:
    from tqdm.auto import tqdm

    return tqdm(total=total, unit="B", unit_scale=True, unit_divisor=1024, desc=description,
                disable=total < PROGRESS_MIN_BYTES, leave=False)


#: One transfer: a TransferManager method ("upload", "download"), its arguments, its keyword
#: arguments (their `subscribers` come first, the progress bar's after).
Transfer = tuple[str, tuple[Any, ...], dict[str, Any]]


def run_transfers(uri: str, action: str, jobs: Iterable[Transfer], total: int | None) -> None:
    """Submit every transfer to one TransferManager (parallel across files) and wait for all.

    With a `total` (bytes), a tqdm progress bar follows the transfers.
    """
    from boto3.s3.transfer import ProgressCallbackInvoker, create_transfer_manager

    jobs = list(jobs)
    if not jobs:
        return
    bar = _progress_bar(total, action) if total is not None else nullcontext()
    with errors(uri, action), bar:
        subscribers = [ProgressCallbackInvoker(bar.update)] if total is not None else []
        with create_transfer_manager(client(), transfer_config()) as manager:
            futures = [getattr(manager, method)(*args, **{
                **kwargs, "subscribers": [*kwargs.get("subscribers", ()), *subscribers]})
                for method, args, kwargs in jobs]
            for future in futures:
                future.result()
