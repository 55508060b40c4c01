"""URIs of the stores: `s3://bucket/key`, `file:///abs/path` or a plain local path.

One bucket is a folder: in the processes of the local backend (its supervisor and hosts, which
it hands `$DDPJOB_LOCAL_BUCKET`), `s3://sagemaker-local/<key>` is the file `<that folder>/<key>`:
the `LocalSession`'s default bucket, which the official SDK's session names in its requests.

Keys and file names are opaque: an S3 key is kept as it is (`a//b` is not `a/b`), and a name
joined below a `file://` URI is percent-encoded by `join`, so that `parse` gives back exactly
that name (`a%2Fb.txt` stays one file of that name). Only the folder part of a `file://` URI
a user writes is decoded, as `Path.as_uri()` encodes it.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import TypeGuard
from urllib.parse import quote_from_bytes, unquote_to_bytes

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
            return Location(uri=uri, scheme="file", path=local_bucket_path(root, key, argument))
        return Location(uri=uri, scheme="s3", bucket=bucket, key=key)
    if uri.startswith("file://"):
        host, slash, path = uri[len("file://"):].partition("/")
        if host not in ("", "localhost") or not slash:
            raise InvalidURIError(
                f"{argument} {uri!r}: a file URI needs an absolute path, e.g. file:///data/train")
        # Every byte as written ('?', '#' and newlines are parts of a file name here), then
        # decoded as `Path.as_uri()` and `join` encode: any bytes, not only UTF-8.
        decoded = os.fsdecode(unquote_to_bytes("/" + path))
        if "\x00" in decoded:
            raise InvalidURIError(f"{argument} {uri!r}: a file path cannot hold a NUL byte")
        return Location(uri=uri, scheme="file", path=Path(decoded))
    scheme = _SCHEME.match(uri)
    if scheme and (scheme.group(1).lower() in ("s3", "file") or "://" in uri):
        raise InvalidURIError(
            f"{argument} {uri!r}: unsupported scheme {scheme.group(1)!r} or malformed URI; use "
            f"s3://bucket/key, file:///path or a local path")
    path = Path(uri).expanduser().absolute()
    return Location(uri=path.as_uri(), scheme="file", path=path)


def local_bucket_path(root: str | os.PathLike, key: str, argument: str) -> Path:
    """The path of `key` in the local bucket's folder `root` (the folder itself for "").

    A folder holds a key as a path only where no other key shares it: InvalidURIError naming
    `argument` for a key with an empty, '.' or '..' segment (`ds//train.csv` is not
    `ds/train.csv`, which a folder would read instead) or a backslash. One trailing slash
    marks a folder.
    """
    name = key[:-1] if key.endswith("/") else key
    if not name:
        return Path(root)
    if any(part in ("", ".", "..") for part in name.split("/")) or "\\" in name:
        raise InvalidURIError(
            f"{argument} s3://{LOCAL_BUCKET}/{key}: the local bucket is a folder, which cannot "
            f"keep this key apart from others; use a key without an empty, '.' or '..' segment "
            f"or a backslash")
    try:
        return contained(root, name, what="key")
    except UnsafePathError as error:
        raise InvalidURIError(f"{argument} s3://{LOCAL_BUCKET}/{key}: {error}") from None


def is_s3(uri: object) -> bool:
    """True for `s3://` URIs (but for the local bucket where it is a folder)."""
    if not isinstance(uri, str) or not uri.startswith("s3://"):
        return False
    return not (os.environ.get(LOCAL_BUCKET_ENV) and
                uri[len("s3://"):].partition("/")[0] == LOCAL_BUCKET)


def join(uri: str, *parts: str) -> str:
    """The URI of the object named `parts` (slash-joined) below the folder `uri`
    (`s3://b/out/` + `job` -> `s3://b/out/job`).

    A part is a name, kept whole: an S3 key's own slashes stay (`x` + `/y` is the key `x//y`),
    and below a `file://` URI each name is percent-encoded, so that `parse` reads back that
    very name (`a%2Fb.txt` is no `a/b.txt`, a newline stays in its name).
    """
    if uri.startswith("file://"):
        parts = tuple(quote_from_bytes(os.fsencode(part), safe="/") for part in parts)
    return "/".join([uri.rstrip("/"), *parts])


def as_folder(uri: str) -> str:
    """`uri` with exactly one trailing slash, so that `run-1` never matches `run-10`."""
    return uri.rstrip("/") + "/"
