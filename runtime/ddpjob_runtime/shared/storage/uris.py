"""URIs of the stores: `s3://bucket/key`, `file:///abs/path` or a plain local path.

One bucket is a folder: in the processes of the local backend (its supervisor and hosts, which
it hands `$DDPJOB_LOCAL_BUCKET`), `s3://sagemaker-local/<key>` is the file `<that folder>/<key>`:
the `LocalSession`'s default bucket, which the official SDK's session names in its requests.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import TypeGuard
from urllib.parse import unquote, urlparse

from ddpjob_runtime.shared.errors import InvalidURIError, UnsafePathError
from ddpjob_runtime.shared.fsutil import contained

_BUCKET = re.compile(r"^[a-z0-9][a-z0-9.\-]{1,61}[a-z0-9]$")
_IP_ADDRESS = re.compile(r"^\d+\.\d+\.\d+\.\d+$")
#: S3's naming rules for buckets, as every message about a bucket name says them.
BUCKET_RULES = ("3-63 lowercase letters, digits, dots and hyphens, starting and ending with a "
                "letter or digit, no '..', not an IP address")
_SCHEME = re.compile(r"^([a-zA-Z][a-zA-Z0-9+.\-]*):")
#: The bucket that is a folder on this machine (`LocalSession().default_bucket()`).
LOCAL_BUCKET = "sagemaker-local"
#: Names that folder in the processes of the local backend, which sets it for them.
LOCAL_BUCKET_ENV = "DDPJOB_LOCAL_BUCKET"


@dataclass(frozen=True)
class Location:
    """A parsed URI: `scheme` "s3" (bucket, key) or "file" (path)."""

    uri: str
    scheme: str
    bucket: str = ""
    key: str = ""
    path: Path | None = None

    @property
    def is_s3(self) -> bool:
        return self.scheme == "s3"


def is_bucket_name(name: object) -> TypeGuard[str]:
    """Whether `name` follows S3's bucket naming rules (`BUCKET_RULES`): the one check of a
    bucket name, for URIs, `default_bucket`, `upload_data(bucket=...)` and the config file."""
    return isinstance(name, str) and bool(_BUCKET.match(name)) and ".." not in name \
        and not _IP_ADDRESS.match(name)


def check_bucket_name(name: object, argument: str) -> str:
    """`name` when it is an S3 bucket name, else InvalidURIError naming `argument`."""
    if not is_bucket_name(name):
        raise InvalidURIError(f"{argument} {name!r} is not an S3 bucket name ({BUCKET_RULES}; "
                              f"no s3:// in front)")
    return name


def parse(uri: object, argument: str = "uri") -> Location:
    """Parse `s3://bucket/key`, `file:///abs/path` or a plain path; InvalidURIError otherwise.

    Anything that looks like a URI but is malformed (`s3:/bad`, `gs://b/k`) is refused, never
    taken for a local folder. `argument` names the value in the message.
    """
    if isinstance(uri, os.PathLike):
        uri = os.fspath(uri)
    if not isinstance(uri, str) or not uri or "\x00" in uri:
        raise InvalidURIError(f"{argument} must be a URI (s3://bucket/key or file:///path) or a "
                              f"path, got {uri!r}")
    if uri.startswith("s3://"):
        bucket, _, key = uri[len("s3://"):].partition("/")
        if not is_bucket_name(bucket):
            raise InvalidURIError(
                f"{argument} {uri!r}: {bucket!r} is not an S3 bucket name ({BUCKET_RULES}); "
                f"use s3://<bucket>/<key>")
        root = os.environ.get(LOCAL_BUCKET_ENV) if bucket == LOCAL_BUCKET else None
        if root:
            return Location(uri=uri, scheme="file", path=_in_local_bucket(root, key, argument))
        return Location(uri=uri, scheme="s3", bucket=bucket, key=key)
    if uri.startswith("file://"):
        parsed = urlparse(uri)
        if parsed.netloc not in ("", "localhost") or not parsed.path.startswith("/"):
            raise InvalidURIError(
                f"{argument} {uri!r}: a file URI needs an absolute path, e.g. file:///data/train")
        return Location(uri=uri, scheme="file", path=Path(unquote(parsed.path)))
    scheme = _SCHEME.match(uri)
    if scheme and (scheme.group(1).lower() in ("s3", "file") or "://" in uri):
        raise InvalidURIError(
            f"{argument} {uri!r}: unsupported scheme {scheme.group(1)!r} or malformed URI; use "
            f"s3://bucket/key, file:///path or a local path")
    path = Path(uri).expanduser().absolute()
    return Location(uri=path.as_uri(), scheme="file", path=path)


def _in_local_bucket(root: str, key: str, argument: str) -> Path:
    """The path of `key` in the local bucket's folder `root` (the folder itself for "")."""
    if not key.strip("/"):
        return Path(root)
    try:
        return contained(root, key.rstrip("/"), what="key")
    except UnsafePathError as error:
        raise InvalidURIError(f"{argument} s3://{LOCAL_BUCKET}/{key}: {error}") from None


def is_s3(uri: object) -> bool:
    """True for `s3://` URIs (but for the local bucket where it is a folder)."""
    if not isinstance(uri, str) or not uri.startswith("s3://"):
        return False
    return not (os.environ.get(LOCAL_BUCKET_ENV) and
                uri[len("s3://"):].partition("/")[0] == LOCAL_BUCKET)


def join(uri: str, *parts: str) -> str:
    """`uri` and `parts` joined with single slashes (`s3://b/out/` + `job` -> `s3://b/out/job`)."""
    return "/".join([uri.rstrip("/"), *(part.strip("/") for part in parts)])


def as_folder(uri: str) -> str:
    """`uri` with exactly one trailing slash, so that `run-1` never matches `run-10`."""
    return uri.rstrip("/") + "/"
