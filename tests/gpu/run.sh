#!/usr/bin/env bash
# What needs an NVIDIA GPU, in one call on the first machine that has one (docs/testing.md#gpu):
# the tests marked `gpu` (NCCL jobs on `local_gpu`, the smddp stand-in on NCCL, DDP step time on
# CUDA, CUDA checkpoints, GPU shares with the real nvidia-smi), then the GPU benchmark. About
# 3 minutes on one GPU, at most 8 (the timeouts below). Run from the repository with the venv
# active, or name its Python: PYTHON=.venv/bin/python tests/gpu/run.sh
set -uo pipefail
cd "$(dirname "$0")/../.."
PYTHON=${PYTHON:-python}
"$PYTHON" -c 'import sys, torch; sys.exit(0 if torch.cuda.is_available() else
    f"torch {torch.__version__} sees no CUDA device: nothing to check here")' || exit 2
nvidia-smi --list-gpus
status=0
timeout 360 "$PYTHON" -m pytest -q -rsP -m gpu tests/gpu || status=1
timeout 120 "$PYTHON" benchmarks/bench_ddp_step.py --device cuda --batch 128 || status=1
exit $status
