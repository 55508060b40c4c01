"""What the platform does after the script on the first host: the job's results as archives.

SageMaker uploads `/opt/ml/model` as `model.tar.gz` and `/opt/ml/output/data` as
`output.tar.gz` under `<output_path>/<job name>/output/`; the bootstrap and a local DLC or
container host's duties both call this, and `each_tried` runs the final uploads so that
`model.tar.gz` is tried whatever failed before it.
"""

from __future__ import annotations

import logging
import tarfile
import tempfile
from collections.abc import Callable, Iterable
from pathlib import Path

from ddpjob_runtime.shared import storage

log = logging.getLogger(__name__)


def each_tried(uploads: Iterable[Callable[[], object]]) -> Exception | None:
    """Run every one of a host's final uploads, each even when one before it failed (the
    checkpoint sync, TensorBoard's, then the results); each failure is logged, the first is
    returned (None when all went)."""
    first = None
    for upload in uploads:
        try:
            upload()
        except Exception as exc:  # noqa: BLE001 - whatever it was, the next upload is tried
            log.error("uploading the results failed: %s", exc)
            first = first or exc
    return first


def upload_results(model_dir: Path, output_data_dir: Path, prefix: str) -> None:
    """`model_dir` and `output_data_dir` as `<prefix>/model.tar.gz` and `<prefix>/output.tar.gz`."""
    with tempfile.TemporaryDirectory(prefix="ddpjob-upload-") as tmp:
        for folder, name in ((model_dir, "model.tar.gz"), (output_data_dir, "output.tar.gz")):
            archive = Path(tmp) / name
            with tarfile.open(archive, "w:gz") as tar:
                for child in sorted(folder.iterdir()) if folder.is_dir() else []:
                    tar.add(child, arcname=child.name)
            log.info("uploading %s to %s/%s", folder, prefix, name)
            storage.upload_file(archive, f"{prefix}/{name}")
