"""`upload_data` / `download_data` of every session: local files to and from a bucket's folder.

The official SageMaker SDK's key layout: a file goes to `<key_prefix>/<name>` (its URI is
returned), a folder's files to `<key_prefix>/<relative path>` (the prefix's URI is returned).
The bucket's root is a folder URI that the session picks (`s3://` or, for the local default
bucket, `file://`); transfers go through `ddpjob_runtime.shared.storage`.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ddpjob_runtime.shared import fsutil, storage

from ddpjob.errors import UnsafePathError, UserInputError

logger = logging.getLogger(__name__)


def _check_extra_args(extra_args: Mapping[str, Any] | None, direction: str) -> dict | None:
    """A copy of `extra_args` when each key is one that boto3 takes for `direction`."""
    if extra_args is None:
        return None
    from boto3.s3.transfer import S3Transfer

    allowed = (S3Transfer.ALLOWED_UPLOAD_ARGS if direction == "upload"
               else S3Transfer.ALLOWED_DOWNLOAD_ARGS)
    if not isinstance(extra_args, Mapping):
        raise UserInputError(f"extra_args must be a dict of boto3 {direction} ExtraArgs, got "
                             f"{type(extra_args).__name__}")
    unknown = sorted(set(extra_args) - set(allowed))
    if unknown:
        raise UserInputError(f"extra_args {', '.join(map(repr, unknown))}: not an S3 {direction} "
                             f"argument; allowed: {', '.join(sorted(allowed))}")
    return dict(extra_args)


def target_folder(root: str, key_prefix: object) -> str:
    """The folder URI `key_prefix` names under the bucket root `root` (never outside a local
    bucket's folder)."""
    if not isinstance(key_prefix, str):
        raise UserInputError(f"key_prefix must be a string, got {type(key_prefix).__name__}")
    location = storage.parse(root)
    if location.is_s3:
        return storage.join(root, key_prefix)
    if not key_prefix.strip("/"):
        return location.path.as_uri()
    try:
        path = fsutil.contained(location.path, key_prefix.strip("/"), what="key_prefix")
    except UnsafePathError as error:
        raise UserInputError(str(error)) from None
    return path.as_uri()


def _s3_only(extra: dict | None, uri: str) -> dict | None:
    """`extra` for an S3 URI; None, with one warning line, for a local folder."""
    if extra and not storage.is_s3(uri):
        logger.warning("extra_args %s have no effect on the local folder %s", sorted(extra), uri)
        return None
    return extra


def upload(path: object, root: str, key_prefix: str,
           extra_args: Mapping[str, Any] | None) -> str:
    """Upload the file or folder `path` under `key_prefix` of the bucket root `root`; returns
    the file's URI, or the prefix's for a folder (as the official SDK)."""
    source = Path(os.fspath(path)).expanduser() if isinstance(path, (str, os.PathLike)) else None
    if source is None or not source.exists():
        raise UserInputError(f"path {path!r}: no such file or folder to upload")
    folder = target_folder(root, key_prefix)
    extra = _s3_only(_check_extra_args(extra_args, "upload"), folder)
    if source.is_dir():
        # With ExtraArgs (SSE-C, KMS...) every file is sent again rather than compared.
        storage.upload_dir(source, folder, progress=True, skip_unchanged=not extra,
                           extra_args=extra)
        return folder
    return storage.upload_file(source, storage.join(folder, source.name), progress=True,
                               extra_args=extra)


def download(path: object, root: str, key_prefix: str,
             extra_args: Mapping[str, Any] | None) -> list[str]:
    """Download the object or every object under `key_prefix` of the bucket root `root` into
    the folder `path`; returns the local paths written ([] when there is nothing)."""
    if not isinstance(path, (str, os.PathLike)):
        raise UserInputError(f"path must be a local folder, got {path!r}")
    uri = target_folder(root, key_prefix)
    extra = _s3_only(_check_extra_args(extra_args, "download"), uri)
    if not storage.is_s3(uri):
        if not storage.parse(uri).path.exists():
            logger.info("Nothing to download from %s", uri)
            return []
    elif not key_prefix.strip("/"):
        uri = storage.as_folder(uri)  # the whole bucket
    found = storage.download_prefix(uri, Path(os.fspath(path)).expanduser(), progress=True,
                                    extra_args=extra)
    return [str(target) for target in found]
