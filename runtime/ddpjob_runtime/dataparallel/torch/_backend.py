"""Which torch.distributed backend a job uses: a pure choice, plus loading oneCCL on demand."""

from __future__ import annotations

import importlib

from ddpjob_runtime.dataparallel.errors import BackendUnavailableError

# smdistributed >= 1.4 scripts ask torch.distributed for "smddp"; here it means "the default".
_DEFAULT_ALIASES = {None, "", "smddp"}


def choose_backend(requested: str | None, cuda_available: bool) -> str:
    """The backend name to give torch: NCCL with CUDA, gloo without, else what was asked."""
    name = None if requested is None else str(requested).strip().lower()
    if name in _DEFAULT_ALIASES:
        return "nccl" if cuda_available else "gloo"
    if name == "nccl" and not cuda_available:
        raise BackendUnavailableError(
            "backend='nccl' needs CUDA, which this process does not see; "
            "leave backend unset to use gloo on CPU")
    if name == "ccl":
        load_ccl()
    return name


def load_ccl() -> None:
    """Import Intel's oneCCL bindings, which register the ``ccl`` backend with torch."""
    try:
        importlib.import_module("oneccl_bindings_for_pytorch")
    except ImportError as err:
        raise BackendUnavailableError(
            "backend='ccl' needs Intel's oneCCL bindings for PyTorch "
            "(pip install oneccl_bind_pt), which cannot be imported here: "
            f"{err}") from None
