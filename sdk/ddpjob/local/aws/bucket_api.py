"""S3's API over the local bucket: what boto3 and s3transfer send for `sagemaker-local`,
answered from its folder `<home>/buckets/sagemaker-local` (see `official_session`).

`LocalBucket.handler(operation)` takes an operation's API parameters and returns `(HTTP status,
parsed response)` as botocore would have parsed S3's answer, errors included (S3's codes and
shapes: NoSuchKey, KeyTooLongError, InvalidRange, InvalidPart ...; a full disk or another
failing write is S3's 500 InternalError naming the cause, never a traceback). Where each key
lies is `bucket_store`'s (plain files that jobs read, escaped files for keys a file system
would alias); listings are `bucket_listing`'s, multipart uploads `bucket_multipart`'s.
"""

from __future__ import annotations

import errno
import logging
import re
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import IO, Any

from ddpjob_runtime.shared.storage.uris import LOCAL_BUCKET

from ddpjob.local.aws import bucket_listing
from ddpjob.local.aws.bucket_listing import OWNER, Answer, error, etag, modified
from ddpjob.local.aws.bucket_multipart import Uploads
from ddpjob.local.aws.bucket_store import MAX_KEY_BYTES, ObjectStore, Stored

__all__ = ["Answer", "LocalBucket", "error"]
log = logging.getLogger(__name__)
_CHUNK = 8 * 1024 * 1024
_RANGE = re.compile(r"bytes=([0-9]*)-([0-9]*)")  # ASCII digits only, as HTTP
_KEYED = {"PutObject", "GetObject", "HeadObject", "DeleteObject", "CreateMultipartUpload",
          "UploadPart", "CompleteMultipartUpload", "AbortMultipartUpload"}
#: The operations answered (each a method of LocalBucket, by botocore's snake-case name).
SERVED = _KEYED | {"HeadBucket", "CreateBucket", "GetBucketLocation", "ListBuckets",
                   "DeleteObjects", "ListObjectsV2", "ListObjects"}


def _filler(body: object) -> Callable[[IO[bytes]], None]:
    """What writes a request body (bytes, str or a readable stream) into a file."""
    def fill(out: IO[bytes]) -> None:
        if isinstance(body, (bytes, bytearray)):
            out.write(body)
        elif isinstance(body, str):
            out.write(body.encode())
        elif body is not None:
            shutil.copyfileobj(body, out, _CHUNK)  # type: ignore[misc]
    return fill


class Unsatisfiable(Exception):
    """A `Range` no byte of the object satisfies (S3's 416 InvalidRange)."""


def byte_range(header: str, size: int) -> tuple[int, int] | None:
    """The first and last byte a `Range` header asks of `size` bytes, as S3 reads it (RFC 7233):
    None (the whole object) for one it ignores (malformed, several ranges, another unit, last
    before first); Unsatisfiable for one no byte satisfies (it starts past the end, `-0`)."""
    match = _RANGE.fullmatch(header.strip())
    if not match or match.groups() == ("", ""):
        return None
    first, last = (int(text) if text else None for text in match.groups())
    if first is None:  # the last `last` bytes
        if last == 0:
            raise Unsatisfiable
        return (size - min(last, size), size - 1) if size else None  # type: ignore[arg-type]
    if last is not None and last < first:
        return None
    if first >= size:
        raise Unsatisfiable
    return first, size - 1 if last is None else min(last, size - 1)


class LocalBucket:
    """The bucket `sagemaker-local` as the folder `root`, behind S3's operations."""

    def __init__(self, root: Path, region: str):
        self.root, self.region = Path(root), region
        self.store = ObjectStore(self.root)
        self.uploads = Uploads(self.store, self.root.parent / ".multipart")

    def handler(self, operation: str) -> Callable[[dict[str, Any]], Answer] | None:
        """The answering function of an S3 operation (e.g. "ListObjectsV2"), None if not
        served."""
        import botocore

        if operation not in SERVED:
            return None
        method = getattr(self, botocore.xform_name(operation))

        def answer(params: dict[str, Any]) -> Answer:
            key = params.get("Key")
            size = len(str(key).encode(errors="replace"))
            if operation in _KEYED and size > MAX_KEY_BYTES:
                return error(400, "KeyTooLongError", "Your key is too long",
                             MaxSizeAllowed=str(MAX_KEY_BYTES), Size=str(size))
            try:
                return method(params)
            except OSError as exc:  # a full disk, a folder made unwritable ...
                log.warning("local bucket: %s of %r failed: %s", operation, key, exc)
                return _internal_error(exc)
        return answer

    def _object(self, params: dict[str, Any]) -> Stored | Answer:
        """The object of `params["Key"]`, or the NoSuchKey answer."""
        stored = self.store.find(params["Key"])
        if stored is None:
            return error(404, "NoSuchKey", "The specified key does not exist.", Key=params["Key"])
        return stored

    # --- buckets -------------------------------------------------------------------------

    def head_bucket(self, params: dict[str, Any]) -> Answer:
        """HeadBucket: the folder is there (made on first use)."""
        self.root.mkdir(parents=True, exist_ok=True, mode=0o700)
        return 200, {"BucketRegion": self.region}

    create_bucket = head_bucket

    def get_bucket_location(self, params: dict[str, Any]) -> Answer:
        """GetBucketLocation: this machine's region."""
        return 200, {"LocationConstraint": None if self.region == "us-east-1" else self.region}

    def list_buckets(self, params: dict[str, Any]) -> Answer:
        """ListBuckets: the local bucket alone (the official SDK looks its default one up)."""
        self.head_bucket(params)
        created = modified(self.root.stat())
        return 200, {"Buckets": [{"Name": LOCAL_BUCKET, "CreationDate": created}],
                     "Owner": OWNER}

    # --- objects -------------------------------------------------------------------------

    def put_object(self, params: dict[str, Any]) -> Answer:
        """PutObject: the body becomes the object of the key."""
        stored = self.store.write(params["Key"], _filler(params.get("Body")))
        return 200, {"ETag": etag(stored)}

    def _head(self, stored: Stored) -> dict[str, Any]:
        return {"ContentLength": stored.size, "ETag": etag(stored), "Metadata": {},
                "LastModified": modified(stored.stat), "ContentType": "binary/octet-stream",
                "AcceptRanges": "bytes"}

    def _ranged(self, stored: Stored, header: str) -> Answer:
        """The head of `stored`, or of the part of it `header` (a `Range`) asks for."""
        try:
            wanted = byte_range(header, stored.size)
        except Unsatisfiable:
            return error(416, "InvalidRange", "The requested range is not satisfiable",
                         RangeRequested=header, ActualObjectSize=str(stored.size))
        if wanted is None:
            return 200, self._head(stored)
        first, last = wanted
        return 206, {**self._head(stored), "ContentLength": last - first + 1,
                     "ContentRange": f"bytes {first}-{last}/{stored.size}"}

    def head_object(self, params: dict[str, Any]) -> Answer:
        """HeadObject: size, ETag and time of the object, or of the `Range` asked for (errors
        bare, as S3 answers a HEAD: no body, the status as the code)."""
        stored = self._object(params)
        if not isinstance(stored, Stored):
            return error(404, "404", "Not Found")
        status, head = self._ranged(stored, params.get("Range", ""))
        return error(416, "416", "Requested Range Not Satisfiable") if status == 416 else (
            status, head)

    def get_object(self, params: dict[str, Any]) -> Answer:
        """GetObject: the object as a streaming body, or the `Range` of it asked for."""
        from botocore.response import StreamingBody

        stored = self._object(params)
        if not isinstance(stored, Stored):
            return stored
        status, head = self._ranged(stored, params.get("Range", ""))
        if status >= 400:
            return status, head
        handle = stored.open()
        if status == 206:
            handle.seek(stored.offset + int(head["ContentRange"].split()[1].split("-")[0]))
        length = head["ContentLength"]
        return status, {**head, "Body": StreamingBody(_Limited(handle, length), length)}

    def delete_object(self, params: dict[str, Any]) -> Answer:
        """DeleteObject: the object goes (a missing one is no error, as in S3)."""
        self.store.delete(params["Key"])
        return 204, {}

    def delete_objects(self, params: dict[str, Any]) -> Answer:
        """DeleteObjects: each key's object goes."""
        deleted, errors = [], []
        for item in params["Delete"]["Objects"]:
            key = item["Key"]
            if len(key.encode()) > MAX_KEY_BYTES:
                errors.append({"Key": key, "Code": "KeyTooLongError",
                               "Message": "Your key is too long"})
                continue
            self.store.delete(key)
            deleted.append({"Key": key})
        response: dict[str, Any] = {} if params["Delete"].get("Quiet") else {"Deleted": deleted}
        return 200, {**response, **({"Errors": errors} if errors else {})}

    # --- listings ------------------------------------------------------------------------

    def list_objects_v2(self, params: dict[str, Any]) -> Answer:
        """ListObjectsV2 (see `bucket_listing`)."""
        return bucket_listing.list_v2(params, self.store.objects(params.get("Prefix", "")))

    def list_objects(self, params: dict[str, Any]) -> Answer:
        """ListObjects, v1 (what boto3's `bucket.objects` uses; see `bucket_listing`)."""
        return bucket_listing.list_v1(params, self.store.objects(params.get("Prefix", "")))

    # --- multipart uploads -----------------------------------------------------------------

    def create_multipart_upload(self, params: dict[str, Any]) -> Answer:
        """CreateMultipartUpload (see `bucket_multipart`)."""
        return self.uploads.create(params)

    def upload_part(self, params: dict[str, Any]) -> Answer:
        """UploadPart: one numbered part."""
        return self.uploads.upload_part(params, _filler(params.get("Body")))

    def complete_multipart_upload(self, params: dict[str, Any]) -> Answer:
        """CompleteMultipartUpload: the listed parts, checked, become the object."""
        return self.uploads.complete(params)

    def abort_multipart_upload(self, params: dict[str, Any]) -> Answer:
        """AbortMultipartUpload: the parts go."""
        return self.uploads.abort(params)


class _Limited:
    """The next `length` bytes of an open file, read as a stream (StreamingBody's raw stream)."""

    def __init__(self, handle: IO[bytes], length: int):
        self.handle, self.left = handle, length

    def read(self, amount: int | None = None) -> bytes:
        wanted = self.left if amount is None or amount < 0 else min(amount, self.left)
        data = self.handle.read(wanted)
        self.left -= len(data)
        return data

    def close(self) -> None:
        self.handle.close()


def _internal_error(exc: OSError) -> Answer:
    """S3's 500 InternalError for a write or read this machine could not do."""
    cause = ("the disk of the local bucket is full" if exc.errno in (errno.ENOSPC, errno.EDQUOT)
             else "the local bucket's folder failed")
    return error(500, "InternalError", f"We encountered an internal error: {cause} "
                 f"({exc.strerror or exc}). Free space or fix the folder, then try again.")
