"""What SageMaker mirrors to S3 around a training container, done by ddpjob's runtime locally.

`platform.json` hands these duties over (docs/contract.md): the checkpoint folder is synced with
`checkpoint_s3_uri` as SageMaker syncs it on every instance (every host brings the objects down
before the script starts and uploads its own new or changed files every 2 s and at the end, so a
sharded checkpoint written by every rank reaches S3 whole; two hosts writing different bytes to
one name are warned about, see `folder_sync`), and the TensorBoard folder
(`tensorboard_output_config`) is uploaded from the first host. Files inside checkpoint step
folders are left to `ddpjob_runtime.checkpoints` (restored at start, uploaded by rank 0 with its
manifest last); this sync handles every other file, such as a script's own `torch.save`.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path

from ddpjob_runtime.platform.environment import TrainingEnvironment, mapped_path
from ddpjob_runtime.platform.folder_sync import FolderSync
from ddpjob_runtime.shared.checkpoint_layout import step_of
from ddpjob_runtime.shared.upload_stamps import Writer

DEFAULT_TENSORBOARD_DIR = "/opt/ml/output/tensorboard"


def in_step_folder(rel: str) -> bool:
    """Whether the relative path lies inside a checkpoint step folder (`step-000000100/...`)."""
    first, slash, _ = rel.partition("/")
    return bool(slash) and step_of(first) is not None


def tensorboard_dir(root: Path, config: Mapping[str, str]) -> Path:
    """The TensorBoard folder of `TensorBoardOutputConfig` (`LocalPath` mapped under `root`)."""
    return mapped_path(root, config.get("LocalPath") or DEFAULT_TENSORBOARD_DIR,
                       "TensorBoardOutputConfig.LocalPath")


def tensorboard_sync(root: Path, config: Mapping[str, str] | None) -> FolderSync:
    """The upload of the TensorBoard folder to `S3OutputPath` (a no-op without a config)."""
    config = config or {}
    return FolderSync(tensorboard_dir(root, config), config.get("S3OutputPath"))


class JobMirrors:
    """This host's mirrored folders: `download()` before the script, `running()` around it,
    and the last round of each sync (`finishes`) once it ended, before the job can complete."""

    def __init__(self, env: TrainingEnvironment) -> None:
        self.checkpoint = FolderSync(env.checkpoint_dir, env.platform.checkpoint_s3_uri,
                                     skip=in_step_folder,
                                     writer=Writer(env.job_name, env.current_host))
        tensorboard = env.platform.tensorboard_output_config
        self.tensorboard_dir = tensorboard_dir(env.root, tensorboard) if tensorboard else None
        # Every host's checkpoint folder, as SageMaker syncs each instance's; TensorBoard's from
        # the first host only.
        self.uploads = [self.checkpoint, *([tensorboard_sync(env.root, tensorboard)]
                                           if env.is_master else [])]

    def download(self) -> None:
        """The checkpoint folder's other files from S3 (every host); the TensorBoard folder."""
        self.checkpoint.download()
        if self.tensorboard_dir is not None:
            self.tensorboard_dir.mkdir(parents=True, exist_ok=True)

    @contextlib.contextmanager
    def running(self) -> Iterator[None]:
        with contextlib.ExitStack() as stack:
            for sync in self.uploads:
                stack.enter_context(sync.running())
            yield

    @property
    def finishes(self) -> list[Callable[[], int]]:
        """The last round of each of this host's syncs, to be run each (`results.each_tried`):
        one failing costs the others nothing."""
        return [sync.finish for sync in self.uploads]
