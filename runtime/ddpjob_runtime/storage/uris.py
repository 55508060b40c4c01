"""URIs of the stores: `s3://bucket/key`, `file:///abs/path` or a plain local path."""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlparse

from ddpjob_runtime.errors import InvalidURIError

_BUCKET = re.compile(r"^[a-z0-9][a-z0-9.\-]{1,61}[a-z0-9]$")
_IP_ADDRESS = re.compile(r"^\d+\.\d+\.\d+\.\d+$")
#: S3's naming rules for buckets, as every message about a bucket name says them.
BUCKET_RULES = ("3-63 lowercase letters, digits, dots and hyphens, starting and ending with a "
                "letter or digit, no '..', not an IP address")
_SCHEME = re.compile(r"^([a-zA-Z][a-zA-Z0-9+.\-]*):")


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


def is_bucket_name(name: Any) -> bool:
    """Whether `name` follows S3's bucket naming rules (`BUCKET_RULES`): the one check of a
    bucket name, for URIs, `default_bucket`, `upload_data(bucket=...)` and the config file."""
    return isinstance(name, str) and bool(_BUCKET.match(name)) and ".." not in name \
        and not _IP_ADDRESS.match(name)


def check_bucket_name(name: Any, argument: str) -> str:
    """`name` when it is an S3 bucket name, else InvalidURIError naming `argument`."""
    if not is_bucket_name(name):
        raise InvalidURIError(f"{argument} {name!r} is not an S3 bucket name ({BUCKET_RULES}; "
                              f"no s3:// in front)")
    return name


def parse(uri: Any, argument: str = "uri") -> Location:
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


def is_s3(uri: Any) -> bool:
    """True for `s3://` URIs."""
    return isinstance(uri, str) and uri.startswith("s3://")


def join(uri: str, *parts: str) -> str:
    """`uri` and `parts` joined with single slashes (`s3://b/out/` + `job` -> `s3://b/out/job`)."""
    return "/".join([uri.rstrip("/"), *(part.strip("/") for part in parts)])


def as_folder(uri: str) -> str:
    """`uri` with exactly one trailing slash, so that `run-1` never matches `run-10`."""
    return uri.rstrip("/") + "/"
