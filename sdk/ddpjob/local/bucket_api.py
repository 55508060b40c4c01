"""S3's API over the local bucket: what boto3 and s3transfer send for `sagemaker-local`,
answered from its folder `<home>/buckets/sagemaker-local` (see `official_session`).

Each method takes an operation's API parameters and returns `(HTTP status, parsed response)` as
botocore would have parsed S3's answer: objects are files (an object key is a relative path in
the folder), multipart uploads gather their parts under `<home>/buckets/.multipart/<upload id>`
until they complete. Everything written is private to the user (0600), atomically.
"""

from __future__ import annotations

import datetime as dt
import io
import os
import shutil
import uuid
from pathlib import Path
from typing import Any
from urllib.parse import quote

from ddpjob_runtime import fsutil
from ddpjob_runtime.errors import UnsafePathError
from ddpjob_runtime.storage.uris import LOCAL_BUCKET

Answer = tuple[int, dict[str, Any]]
PRIVATE = 0o600
_CHUNK = 8 * 1024 * 1024


def error(status: int, code: str, message: str) -> Answer:
    return status, {"Error": {"Code": code, "Message": message}}


def _etag(stat: os.stat_result) -> str:
    """An ETag that changes when the file does (size and modification time)."""
    return f'"{stat.st_size:x}-{stat.st_mtime_ns:x}"'


def _modified(stat: os.stat_result) -> dt.datetime:
    return dt.datetime.fromtimestamp(stat.st_mtime, dt.timezone.utc)


def _write(body: Any, target: Path) -> None:
    """Write a request body (bytes, str or a readable stream) to `target`, atomically."""
    with fsutil.atomic_open(target, mode=PRIVATE) as out:
        if isinstance(body, (bytes, bytearray, str)):
            out.write(body.encode() if isinstance(body, str) else body)
        elif body is not None:
            shutil.copyfileobj(body, out, _CHUNK)


class LocalBucket:
    """The bucket `sagemaker-local` as the folder `root`, behind S3's operations."""

    def __init__(self, root: Path, region: str):
        self.root, self.region = Path(root), region
        self.uploads = self.root.parent / ".multipart"

    def _path(self, key: str) -> Path:
        return fsutil.contained(self.root, key, what="object key")

    def _file(self, params: dict[str, Any]) -> Path | Answer:
        """The file of `params["Key"]`, or the NoSuchKey answer."""
        try:
            path = self._path(params["Key"])
        except UnsafePathError as exc:
            return error(400, "InvalidArgument", str(exc))
        if not path.is_file():
            return error(404, "NoSuchKey", "The specified key does not exist.")
        return path

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
        created = _modified(self.root.stat())
        return 200, {"Buckets": [{"Name": LOCAL_BUCKET, "CreationDate": created}],
                     "Owner": {"DisplayName": "ddpjob-local", "ID": "ddpjob-local"}}

    # --- objects -------------------------------------------------------------------------

    def put_object(self, params: dict[str, Any]) -> Answer:
        """PutObject: the body becomes the file of the key."""
        try:
            target = self._path(params["Key"])
        except UnsafePathError as exc:
            return error(400, "InvalidArgument", str(exc))
        _write(params.get("Body"), target)
        return 200, {"ETag": _etag(target.stat())}

    def head_object(self, params: dict[str, Any]) -> Answer:
        """HeadObject: size, ETag and time of the file (a bare 404 when missing, as S3)."""
        path = self._file(params)
        if not isinstance(path, Path):
            return error(404, "404", "Not Found") if path[0] == 404 else path
        stat = path.stat()
        return 200, {"ContentLength": stat.st_size, "ETag": _etag(stat), "Metadata": {},
                     "LastModified": _modified(stat), "ContentType": "binary/octet-stream"}

    def get_object(self, params: dict[str, Any]) -> Answer:
        """GetObject: the file as a streaming body, or the `Range` of it that was asked for."""
        from botocore.response import StreamingBody

        path = self._file(params)
        if not isinstance(path, Path):
            return path
        status, head = self.head_object(params)
        size = head["ContentLength"]
        wanted = params.get("Range")
        if not wanted:
            return status, {**head, "Body": StreamingBody(open(path, "rb"), size)}  # noqa: SIM115
        first, _, last = wanted.removeprefix("bytes=").partition("-")
        start, end = int(first or 0), min(int(last) if last else size - 1, size - 1)
        if start > end:
            return error(416, "InvalidRange", "The requested range is not satisfiable")
        with open(path, "rb") as handle:
            handle.seek(start)
            data = handle.read(end - start + 1)
        return 206, {**head, "ContentLength": len(data), "Body": StreamingBody(
            io.BytesIO(data), len(data)), "ContentRange": f"bytes {start}-{end}/{size}"}

    def delete_object(self, params: dict[str, Any]) -> Answer:
        """DeleteObject: the file goes (a missing one is no error, as in S3)."""
        path = self._file(params)
        if isinstance(path, Path):
            path.unlink()
        return 204, {}

    def delete_objects(self, params: dict[str, Any]) -> Answer:
        """DeleteObjects: each key's file goes."""
        keys = [item["Key"] for item in params["Delete"]["Objects"]]
        for key in keys:
            self.delete_object({"Key": key})
        quiet = params["Delete"].get("Quiet")
        return 200, {} if quiet else {"Deleted": [{"Key": key} for key in keys]}

    # --- listings ------------------------------------------------------------------------

    def _listing(self, params: dict[str, Any]) -> tuple[list[dict[str, Any]], list[str]]:
        """The objects under `Prefix` (and the common prefixes at `Delimiter`), sorted."""
        prefix, delimiter = params.get("Prefix", ""), params.get("Delimiter")
        objects, common = [], set()
        for root, dirs, files in os.walk(self.root) if self.root.is_dir() else ():
            dirs.sort()
            for name in files:
                if fsutil.is_temporary(name):
                    continue
                path = Path(root, name)
                key = path.relative_to(self.root).as_posix()
                if not key.startswith(prefix):
                    continue
                rest = key[len(prefix):]
                if delimiter and delimiter in rest:
                    common.add(prefix + rest.split(delimiter, 1)[0] + delimiter)
                    continue
                stat = path.stat()
                objects.append({"Key": key, "Size": stat.st_size, "ETag": _etag(stat),
                                "LastModified": _modified(stat), "StorageClass": "STANDARD"})
        return sorted(objects, key=lambda o: o["Key"]), sorted(common)

    def _page(self, params: dict[str, Any], after: str) -> tuple[dict[str, Any], bool]:
        """One page of the listing (keys after `after`), keys quoted as `EncodingType` asks."""
        objects, common = self._listing(params)
        objects = [o for o in objects if o["Key"] > after]
        size = params.get("MaxKeys", 1000)
        page, truncated = objects[:size], len(objects) > size
        encode = quote if params.get("EncodingType") == "url" else str
        response: dict[str, Any] = {
            "Name": LOCAL_BUCKET, "Prefix": encode(params.get("Prefix", "")), "MaxKeys": size,
            "IsTruncated": truncated, "KeyCount": len(page),
            "Contents": [{**o, "Key": encode(o["Key"])} for o in page],
            "CommonPrefixes": [{"Prefix": encode(p)} for p in common],
        }
        for name in ("Delimiter", "EncodingType"):
            if name in params:
                response[name] = params[name]
        return response, truncated

    def list_objects_v2(self, params: dict[str, Any]) -> Answer:
        """ListObjectsV2, paged by the last key of a page as its continuation token."""
        after = params.get("ContinuationToken") or params.get("StartAfter") or ""
        response, truncated = self._page(params, after)
        if truncated:
            response["NextContinuationToken"] = response["Contents"][-1]["Key"]
        return 200, response

    def list_objects(self, params: dict[str, Any]) -> Answer:
        """ListObjects (v1, what boto3's `bucket.objects` uses), paged by `Marker`."""
        response, truncated = self._page(params, params.get("Marker", ""))
        if truncated:
            response["NextMarker"] = response["Contents"][-1]["Key"]
        return 200, response

    # --- multipart uploads -----------------------------------------------------------------

    def create_multipart_upload(self, params: dict[str, Any]) -> Answer:
        """CreateMultipartUpload: a folder for the parts, named by the upload id."""
        try:
            self._path(params["Key"])
        except UnsafePathError as exc:
            return error(400, "InvalidArgument", str(exc))
        upload_id = uuid.uuid4().hex
        (self.uploads / upload_id).mkdir(parents=True, mode=0o700)
        return 200, {"Bucket": LOCAL_BUCKET, "Key": params["Key"], "UploadId": upload_id}

    def _upload(self, params: dict[str, Any]) -> Path | None:
        folder = self.uploads / str(params["UploadId"])
        return folder if params["UploadId"].isalnum() and folder.is_dir() else None

    def upload_part(self, params: dict[str, Any]) -> Answer:
        """UploadPart: one numbered part."""
        folder = self._upload(params)
        if folder is None:
            return error(404, "NoSuchUpload", "The specified upload does not exist.")
        part = folder / f"{int(params['PartNumber']):05d}"
        _write(params.get("Body"), part)
        return 200, {"ETag": _etag(part.stat())}

    def complete_multipart_upload(self, params: dict[str, Any]) -> Answer:
        """CompleteMultipartUpload: the listed parts, in order, become the object."""
        folder = self._upload(params)
        if folder is None:
            return error(404, "NoSuchUpload", "The specified upload does not exist.")
        numbers = sorted(p["PartNumber"] for p in params["MultipartUpload"]["Parts"])
        target = self._path(params["Key"])
        with fsutil.atomic_open(target, mode=PRIVATE) as out:
            for number in numbers:
                with open(folder / f"{number:05d}", "rb") as part:
                    shutil.copyfileobj(part, out, _CHUNK)
        shutil.rmtree(folder)
        return 200, {"Bucket": LOCAL_BUCKET, "Key": params["Key"],
                     "ETag": _etag(target.stat())}

    def abort_multipart_upload(self, params: dict[str, Any]) -> Answer:
        """AbortMultipartUpload: the parts go."""
        folder = self._upload(params)
        if folder is not None:
            shutil.rmtree(folder)
        return 204, {}
