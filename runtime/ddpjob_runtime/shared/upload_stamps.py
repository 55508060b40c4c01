"""Who uploaded an object of a synced folder, carried by the object itself.

Several hosts sync their checkpoint folders to one URI (`folder_sync`), as SageMaker does, and
the last writer of a name wins. So that a host can tell that another host of the same job wrote
different bytes there, each of its uploads carries a stamp: the job, the host and the sha256 of
the bytes. On `s3://` the stamp is the object's user metadata (`sha256`, as `storage` records
it, and `ddpjob-job`, `ddpjob-host`, `ddpjob-clash`); a local folder's file keeps it in the
extended attribute `user.ddpjob.stamp`, set before the file is renamed into place (where the
filesystem keeps none, the file goes unstamped). Reading a stamp is one HEAD (or one getxattr),
no download. Only storage's S3 client is used, so the stamps work the same against AWS.

A stamp is what its writer claims, and anyone who can write there can claim anything (or leave
a stamp behind that the bytes no longer match). So a stamp names the bytes there only where
the store vouches for them (`holds`): on `s3://` the object's ETag, which S3 computes from the
bytes it keeps, matches these bytes; a local file's stamp is read only when the file's own
sha256 matches it. Torch-free.
"""

from __future__ import annotations

import dataclasses
import errno
import json
import os
import shutil
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import IO

from ddpjob_runtime.shared import fsutil, safefiles, storage
from ddpjob_runtime.shared.errors import ObjectNotFoundError, StorageError
from ddpjob_runtime.shared.storage import s3

JOB, HOST, CLASH = "ddpjob-job", "ddpjob-host", "ddpjob-clash"
XATTR = "user.ddpjob.stamp"
# A filesystem that keeps no user attributes answers these: the file goes unstamped.
_NO_XATTR = (errno.ENOTSUP, errno.EOPNOTSUPP, errno.EPERM, errno.ENODATA)


@dataclass(frozen=True)
class Writer:
    """The host of a job that uploads: what its stamps name."""

    job: str
    host: str


@dataclass(frozen=True)
class Stamp:
    """Who uploaded an object, and what.

    `clash`: the hosts already named in a warning that they wrote different bytes to this name
    (carried on, so that one clash is warned about once in a job, by whichever host sees it).
    """

    writer: Writer
    sha256: str
    clash: frozenset[str] = frozenset()
    etag: str | None = None  # an S3 object's ETag, as read with the stamp (not part of it)

    def metadata(self) -> dict[str, str]:
        """As S3 user metadata (and the local attribute's JSON)."""
        found = {s3.SHA256_METADATA: self.sha256, JOB: self.writer.job, HOST: self.writer.host}
        if self.clash:
            found[CLASH] = ",".join(sorted(self.clash))
        return found

    @classmethod
    def from_metadata(cls, metadata: Mapping[str, str]) -> Stamp | None:
        """The stamp in an object's metadata; None for one that ddpjob's sync did not write."""
        job, host, digest = (metadata.get(k) for k in (JOB, HOST, s3.SHA256_METADATA))
        if not (isinstance(job, str) and isinstance(host, str) and isinstance(digest, str)):
            return None
        clash = metadata.get(CLASH)
        hosts = frozenset(clash.split(",")) if isinstance(clash, str) and clash else frozenset()
        return cls(Writer(job, host), digest, hosts)


def read(uri: str) -> Stamp | None:
    """The stamp of the object (or local file) `uri`; None when it is absent or unstamped."""
    location = storage.parse(uri)
    if location.is_s3:
        with s3.errors(uri, "lookup of"):
            found = s3.head(location.bucket, location.key) or {}
        stamp = Stamp.from_metadata(found.get("Metadata") or {})
        return dataclasses.replace(stamp, etag=found.get("ETag")) if stamp else None
    try:
        with safefiles.open_file(location.path.parent, location.path.name) as handle:
            stamp = _local_stamp(os.getxattr(handle.fileno(), XATTR))
            # A stamp the bytes no longer match (changed in place, or forged) is none.
            return stamp if stamp and fsutil.sha256_file(handle) == stamp.sha256 else None
    except OSError as error:
        if error.errno in (errno.ENOENT, *_NO_XATTR):
            return None
        raise StorageError(f"lookup of {uri} failed: {error.strerror}") from error


def _local_stamp(raw: bytes) -> Stamp | None:
    try:
        metadata = json.loads(raw)
    except ValueError:
        return None
    return Stamp.from_metadata(metadata) if isinstance(metadata, dict) else None


def holds(there: Stamp | None, sha256: str, source: IO[bytes]) -> bool:
    """Whether the object whose stamp `read` gave holds the bytes of `source` (sha256
    `sha256`): the stamp names them, and on S3 the object's ETag is theirs too."""
    if there is None or there.sha256 != sha256:
        return False
    return there.etag is None or there.etag == s3.expected_etag(source)


def upload(path: Path | IO[bytes], uri: str, stamp: Stamp) -> None:
    """Upload the file `path` (or one already open) to the object `uri` carrying `stamp`.
    ObjectNotFoundError when the file is gone, StorageError for other failures."""
    location = storage.parse(uri)
    if location.is_s3:
        extra = {k: v for k, v in stamp.metadata().items() if k != s3.SHA256_METADATA}
        storage.upload_file(path, uri, sha256=stamp.sha256, extra_args={"Metadata": extra})
        return
    try:
        with fsutil.reading(path) as source, fsutil.atomic_open(location.path) as target:
            source.seek(0)
            shutil.copyfileobj(source, target)
            _stamp_file(target.fileno(), stamp)  # before the rename: never a stale stamp
    except FileNotFoundError as error:
        raise ObjectNotFoundError(f"upload to {uri} failed: {path} is gone") from error
    except OSError as error:
        raise StorageError(f"upload to {uri} failed: {error.strerror or error}") from error


def _stamp_file(fd: int, stamp: Stamp) -> None:
    try:
        os.setxattr(fd, XATTR, json.dumps(stamp.metadata()).encode())
    except OSError as error:
        if error.errno not in _NO_XATTR:
            raise
