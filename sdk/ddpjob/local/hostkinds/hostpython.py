"""The Python a host that runs an image's own program gives it: what a training image has.

ModelTrainer's drivers and SageMaker's PyTorch toolkit look for `python3`/`python` and
`pip3`/`pip` on PATH, start `torchrun`, read the host's GPU count from `nvidia-smi --list-gpus`,
and install the code's `requirements.txt` with that pip. Each host gets a virtual environment of
its own under the job folder (`ddpjob_runtime.shared.pyenv`), over the image's Python
(`$DDPJOB_DLC_PYTHON`, else this one), so what a job installs stays in the job, never in the
user's environment. `pip`, `pip3` and `torchrun` run the
image's modules with the venv's interpreter (so installs land in the venv); `nvidia-smi` lists
only the host's own GPUs (none on `local` and CPU instance types).
"""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

from ddpjob_runtime.shared import pyenv

from ddpjob.local.isolation import gpus

PYTHON_ENV = "DDPJOB_DLC_PYTHON"
NO_GPU_EXIT = 6  # what nvidia-smi exits with when it finds no device
#: The commands every host's bin holds, whatever this machine's PATH has.
COMMANDS = ("python", "python3", "pip", "pip3", "torchrun", "nvidia-smi")


def image_python() -> str:
    """The Python that stands for the training image's: `$DDPJOB_DLC_PYTHON`, else this one."""
    return os.environ.get(PYTHON_ENV) or sys.executable


def create(folder: Path, python: str, gpu_ids: list[str]) -> Path:
    """A venv at `folder` over `python` (`ddpjob_runtime.shared.pyenv`), with the commands a
    training image has; its bin."""
    interpreter = pyenv.create(folder, python)
    bin_dir = interpreter.parent
    for name in ("pip", "pip3"):
        _script(bin_dir / name, f'exec "{interpreter}" -m pip "$@"')
    _script(bin_dir / "torchrun",  # torch's console script, run by the venv's interpreter
            f'exec "{interpreter}" -c "import sys; sys.argv[0] = \'torchrun\'; '
            f'from torch.distributed.run import main; sys.exit(main())" "$@"')
    _script(bin_dir / "nvidia-smi", _nvidia_smi(gpu_ids, exclude=bin_dir))
    return bin_dir


def _nvidia_smi(gpu_ids: list[str], exclude: Path) -> str:
    """The body of an `nvidia-smi` that sees only `gpu_ids` (indexes or UUIDs of the machine's
    GPUs): `--list-gpus` lists them alone (what the drivers count), anything else runs the
    machine's `nvidia-smi` on them (`-i`)."""
    path = os.pathsep.join(p for p in os.environ.get("PATH", "").split(os.pathsep)
                           if p and Path(p) != exclude)
    real = shutil.which("nvidia-smi", path=path)
    listed = gpus.listing(real) if gpu_ids and real else []
    mine = [line for index, line in enumerate(listed)
            if str(index) in gpu_ids or any(f"UUID: {g})" in line for g in gpu_ids)]
    if not mine:
        return f'echo "No devices were found"\nexit {NO_GPU_EXIT}'
    return ('case "$1" in\n-L|--list-gpus) cat <<"EOF"\n' + "\n".join(mine) +
            f'\nEOF\n;;\n*) exec "{real}" -i {",".join(gpu_ids)} "$@";;\nesac')


def _script(path: Path, body: str) -> None:
    path.write_text(f"#!/bin/sh\n{body}\n")
    path.chmod(0o700)
