"""What `fit` stores before the job starts: the packed code and the local inputs of a job.

`planner.submit` hands them to the session as its `stage`: they run after the session has
reserved the job name and before the job is scheduled.
"""

from __future__ import annotations

import logging
import tempfile
from collections.abc import Iterable
from pathlib import Path

from ddpjob_runtime.shared import storage

from ddpjob import packaging
from ddpjob.inputs import Channel

logger = logging.getLogger(__name__)


def check_buckets(locations: Iterable[storage.Location | None]) -> None:
    """A missing bucket of any S3 location fails before anything is stored or sent."""
    for location in locations:
        if location is not None and location.is_s3:
            storage.check_bucket(location.uri)


def stage_code(source: packaging.SourceSpec, uri: str, *, include_runtime: bool = False) -> None:
    """Pack `source` (with `ddpjob_runtime` beside it when `include_runtime`: SageMaker's DLC
    does not have it) and store it at `uri`, unless the same bytes are already there."""
    with tempfile.TemporaryDirectory(prefix="ddpjob-pack-") as tmp:
        archive = Path(tmp, packaging.ARCHIVE_NAME)
        digest = packaging.pack(source, archive, include_runtime=include_runtime)
        if storage.content_sha256(uri) == digest:
            logger.info("source unchanged at %s, not uploaded again", uri)
            return
        storage.upload_file(archive, uri, sha256=digest, progress=True)
        logger.info("uploaded source to %s", uri)


def stage_inputs(channels: Iterable[Channel]) -> None:
    """Upload each channel's local data to the URI its config names."""
    for channel in channels:
        if channel.upload_from is None:
            continue
        uri = channel.config["DataSource"]["S3DataSource"]["S3Uri"]
        if channel.upload_from.is_dir():
            storage.upload_dir(channel.upload_from, uri, progress=True)
        else:
            storage.upload_file(channel.upload_from, storage.join(uri, channel.upload_from.name),
                                progress=True)
