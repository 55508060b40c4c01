"""Multipart uploads into the local bucket, checked as S3 checks them.

An upload is the folder `<home>/buckets/.multipart/<upload id>`: the file `key` (the object's
key) and one file per part (`00001` ...). Completing it checks the list S3 checks (parts in
ascending order, each uploaded with that ETag, all but the last at least 5 MiB) before one
atomic write of the object; a refused completion leaves the upload as it was.
"""

from __future__ import annotations

import shutil
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import IO, Any

from ddpjob_runtime.shared import fsutil
from ddpjob_runtime.shared.storage.uris import LOCAL_BUCKET

from ddpjob.local.aws.bucket_listing import Answer, error, etag
from ddpjob.local.aws.bucket_store import PRIVATE, ObjectStore, Stored

MIN_PART_SIZE = 5 * 1024 * 1024  # S3's least size of a part but the last
MAX_PART_NUMBER = 10_000
_CHUNK = 8 * 1024 * 1024
_NO_UPLOAD = (404, "NoSuchUpload", "The specified upload does not exist. The upload ID may be "
              "invalid, or the upload may have been aborted or completed.")


def _part_etag(path: Path) -> str:
    return etag(Stored(path.name, str(path), 0, path.stat()))


class Uploads:
    """The multipart uploads of the bucket whose objects `store` holds."""

    def __init__(self, store: ObjectStore, folder: Path):
        self.store, self.folder = store, folder

    def _upload(self, params: dict[str, Any]) -> Path | None:
        """The folder of `UploadId` when it is an upload of `Key`, else None."""
        upload_id = str(params.get("UploadId", ""))
        folder = self.folder / upload_id
        if not upload_id.isalnum() or not (folder / "key").is_file():
            return None
        return folder if (folder / "key").read_bytes() == params["Key"].encode() else None

    def create(self, params: dict[str, Any]) -> Answer:
        """CreateMultipartUpload: a folder for the parts, named by the upload id."""
        upload_id = uuid.uuid4().hex
        folder = self.folder / upload_id
        folder.mkdir(parents=True, mode=0o700)
        with fsutil.atomic_open(folder / "key", mode=PRIVATE) as out:
            out.write(params["Key"].encode())
        return 200, {"Bucket": LOCAL_BUCKET, "Key": params["Key"], "UploadId": upload_id}

    def upload_part(self, params: dict[str, Any], fill: Callable[[IO[bytes]], None]) -> Answer:
        """UploadPart: one numbered part (1 to 10,000), written by `fill`."""
        number = params["PartNumber"]
        if not 1 <= number <= MAX_PART_NUMBER:
            return error(400, "InvalidArgument", "Part number must be an integer between 1 and "
                         f"{MAX_PART_NUMBER}, inclusive", ArgumentName="partNumber",
                         ArgumentValue=str(number))
        folder = self._upload(params)
        if folder is None:
            return error(*_NO_UPLOAD, UploadId=params.get("UploadId"))
        part = folder / f"{number:05d}"
        with fsutil.atomic_open(part, mode=PRIVATE) as out:
            fill(out)
        return 200, {"ETag": _part_etag(part)}

    def _refusal(self, folder: Path, parts: list[dict[str, Any]]) -> Answer | None:
        """What S3 answers to a completion naming `parts`, when it refuses it."""
        if not parts:
            return error(400, "MalformedXML", "The XML you provided was not well-formed or did "
                         "not validate against our published schema")
        numbers = [part.get("PartNumber", 0) for part in parts]
        if numbers != sorted(set(numbers)):
            return error(400, "InvalidPartOrder", "The list of parts was not in ascending "
                         "order. Parts must be ordered by part number.")
        paths = [folder / f"{number:05d}" for number in numbers]
        for part, path in zip(parts, paths, strict=True):
            if not path.is_file() or part.get("ETag", "").strip('"') != \
                    _part_etag(path).strip('"'):
                return error(400, "InvalidPart", "One or more of the specified parts could not "
                             "be found.  The part may not have been uploaded, or the specified "
                             "entity tag may not match the part's entity tag.",
                             PartNumber=str(part.get("PartNumber")), ETag=part.get("ETag", ""))
        if any(path.stat().st_size < MIN_PART_SIZE for path in paths[:-1]):
            return error(400, "EntityTooSmall", "Your proposed upload is smaller than the "
                         "minimum allowed size")
        return None

    def complete(self, params: dict[str, Any]) -> Answer:
        """CompleteMultipartUpload: the listed parts, once checked, become the object."""
        folder = self._upload(params)
        if folder is None:
            return error(*_NO_UPLOAD, UploadId=params.get("UploadId"))
        parts = list(params.get("MultipartUpload", {}).get("Parts", []))
        refused = self._refusal(folder, parts)
        if refused:
            return refused

        def fill(out: IO[bytes]) -> None:
            for part in parts:
                with open(folder / f"{part['PartNumber']:05d}", "rb") as source:
                    shutil.copyfileobj(source, out, _CHUNK)

        stored = self.store.write(params["Key"], fill)
        shutil.rmtree(folder)
        return 200, {"Bucket": LOCAL_BUCKET, "Key": params["Key"], "ETag": etag(stored)}

    def abort(self, params: dict[str, Any]) -> Answer:
        """AbortMultipartUpload: the parts go."""
        folder = self._upload(params)
        if folder is None:
            return error(*_NO_UPLOAD, UploadId=params.get("UploadId"))
        shutil.rmtree(folder)
        return 204, {}
