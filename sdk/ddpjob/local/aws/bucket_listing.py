"""ListObjectsV2 and ListObjects (v1) of the local bucket, paged as S3 pages them.

Entries are the keys under `Prefix` and, with a `Delimiter`, the common prefixes that roll keys
up (each once), in the order of their UTF-8 bytes; `MaxKeys` (0 to 1000 on a page) counts both.
A page goes on after the last entry of the one before it: v2's continuation token is that
entry, opaque (base64); `StartAfter` and v1's `Marker` start after a given string. With
`EncodingType=url`, keys, common prefixes, `Delimiter`, `StartAfter` and v2's `Prefix`, v1's
markers are percent-encoded in the answer (`/` kept, a space `%20`): the elements botocore
decodes when it asked for the encoding itself (v1's `Prefix` it leaves, so it is not encoded).
"""

from __future__ import annotations

import base64
import binascii
import datetime as dt
import os
from collections.abc import Iterable
from typing import Any
from urllib.parse import quote

from ddpjob_runtime.shared.storage.uris import LOCAL_BUCKET

from ddpjob.local.aws.bucket_store import Stored

Answer = tuple[int, dict[str, Any]]
PAGE_LIMIT = 1000  # S3 answers at most this many entries, whatever MaxKeys asks
_MAX_KEYS = 2**31 - 1
OWNER = {"DisplayName": "ddpjob-local", "ID": "ddpjob-local"}


def error(status: int, code: str, message: str, **details: object) -> Answer:
    """An S3 error answer (`details` are the error's extra elements, e.g. `Key`)."""
    return status, {"Error": {"Code": code, "Message": message, **details}}


def etag(stored: Stored) -> str:
    """An ETag that changes when the object does (size and modification time)."""
    return f'"{stored.size:x}-{stored.stat.st_mtime_ns:x}"'


def modified(stat: os.stat_result) -> dt.datetime:
    """The time a file (an object, the bucket's folder) last changed."""
    return dt.datetime.fromtimestamp(stat.st_mtime, dt.timezone.utc)


def _entries(objects: Iterable[Stored], prefix: str,
             delimiter: str) -> list[tuple[str, Stored | None]]:
    """(name, object) of each key, or (common prefix, None) for the keys it rolls up, sorted."""
    found: dict[str, Stored | None] = {}
    for stored in objects:
        cut = stored.key.find(delimiter, len(prefix)) if delimiter else -1
        if cut >= 0:
            found[stored.key[:cut + len(delimiter)]] = None
        else:
            found[stored.key] = stored
    return sorted(found.items(), key=lambda item: item[0].encode())


def _page(entries: list[tuple[str, Stored | None]], after: str,
          max_keys: int) -> tuple[list[tuple[str, Stored | None]], bool]:
    """The entries after `after` that fit on a page, and whether more follow."""
    start = after.encode()
    rest = [entry for entry in entries if entry[0].encode() > start]
    size = min(max_keys, PAGE_LIMIT)
    return rest[:size], size > 0 and len(rest) > size


def _token(name: str) -> str:
    return base64.b64encode(name.encode()).decode()


def _untoken(token: str) -> str | None:
    try:
        return base64.b64decode(token, validate=True).decode() if token else None
    except (binascii.Error, UnicodeDecodeError):
        return None


def _checked(params: dict[str, Any]) -> Answer | None:
    """The InvalidArgument answer for a `MaxKeys` or `EncodingType` S3 refuses, else None."""
    max_keys = params.get("MaxKeys", PAGE_LIMIT)
    if not 0 <= max_keys <= _MAX_KEYS:
        return error(400, "InvalidArgument",
                     f"Argument maxKeys must be an integer between 0 and {_MAX_KEYS}",
                     ArgumentName="maxKeys", ArgumentValue=str(max_keys))
    if params.get("EncodingType", "url") != "url":
        return error(400, "InvalidArgument", "Invalid Encoding Method specified in Request",
                     ArgumentName="encoding-type", ArgumentValue=params["EncodingType"])
    return None


def _body(params: dict[str, Any], objects: Iterable[Stored],
          after: str) -> tuple[dict[str, Any], list[tuple[str, Stored | None]], bool]:
    """What both versions answer: the page's keys and common prefixes, and their echoes."""
    prefix, delimiter = params.get("Prefix", ""), params.get("Delimiter", "")
    max_keys = params.get("MaxKeys", PAGE_LIMIT)
    page, truncated = _page(_entries(objects, prefix, delimiter), after, max_keys)
    encode = _encoder(params)
    response: dict[str, Any] = {"Name": LOCAL_BUCKET, "Prefix": prefix,
                                "MaxKeys": max_keys, "IsTruncated": truncated}
    contents = [{"Key": encode(name), "LastModified": modified(stored.stat), "ETag": etag(stored),
                 "Size": stored.size, "StorageClass": "STANDARD"}
                for name, stored in page if stored is not None]
    common = [{"Prefix": encode(name)} for name, stored in page if stored is None]
    if contents:
        response["Contents"] = contents
    if delimiter:
        response["Delimiter"] = encode(delimiter)
    if common:
        response["CommonPrefixes"] = common
    if "EncodingType" in params:
        response["EncodingType"] = params["EncodingType"]
    return response, page, truncated


def _encoder(params: dict[str, Any]) -> Any:
    return (lambda text: quote(text, safe="/")) if params.get("EncodingType") == "url" else str


def list_v2(params: dict[str, Any], objects: Iterable[Stored]) -> Answer:
    """ListObjectsV2 of `objects` (the keys under the request's `Prefix`)."""
    refused = _checked(params)
    if refused:
        return refused
    after = params.get("StartAfter", "")
    if "ContinuationToken" in params:
        after = _untoken(params["ContinuationToken"])  # type: ignore[assignment]
        if after is None:
            return error(400, "InvalidArgument", "The continuation token provided is incorrect",
                         ArgumentName="continuation-token")
    response, page, truncated = _body(params, objects, after)
    response["KeyCount"] = len(page)
    response["Prefix"] = _encoder(params)(response["Prefix"])  # v2's only: botocore decodes it
    if params.get("FetchOwner"):
        for item in response.get("Contents", []):
            item["Owner"] = OWNER
    if "ContinuationToken" in params:
        response["ContinuationToken"] = params["ContinuationToken"]
    if "StartAfter" in params:
        response["StartAfter"] = _encoder(params)(params["StartAfter"])
    if truncated:
        response["NextContinuationToken"] = _token(page[-1][0])
    return 200, response


def list_v1(params: dict[str, Any], objects: Iterable[Stored]) -> Answer:
    """ListObjects (v1) of `objects`: `NextMarker` only with a `Delimiter`, as S3 answers."""
    refused = _checked(params)
    if refused:
        return refused
    marker = params.get("Marker", "")
    response, page, truncated = _body(params, objects, marker)
    response["Marker"] = _encoder(params)(marker)
    for item in response.get("Contents", []):
        item["Owner"] = OWNER
    if truncated and params.get("Delimiter"):
        response["NextMarker"] = _encoder(params)(page[-1][0])
    return 200, response
