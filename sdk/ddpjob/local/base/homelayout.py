"""Where things lie in a ddpjob home that more than one room needs to find."""

from __future__ import annotations

from pathlib import Path

from ddpjob_runtime.shared.storage.uris import LOCAL_BUCKET


def bucket_folder(home: Path) -> Path:
    """The folder of the local bucket in the ddpjob home `home`; beside it, in
    `<home>/buckets`, are only the S3 face's own files (escaped objects, multipart uploads)."""
    return Path(home) / "buckets" / LOCAL_BUCKET
