"""SageMaker's own training containers (Deep Learning Containers), as the official SDK picks them.

A job on `ml.*` with no `image_uri` runs on SageMaker's PyTorch training DLC (or the Hugging Face
one, for `ddpjob.HuggingFace`). The URI comes from the official SDK's registry data through
`sagemaker.image_uris.get_training_image_uri`, the function its estimators call; the SDK is
imported here, lazily, and only on this path, so `import ddpjob` stays fast.

Before asking the SDK, the framework version, Python version, processor (cpu/gpu, from the
instance type) and region are checked against the same data, so a miss is one line that lists
what is available rather than the SDK's multi-line message.
"""

from __future__ import annotations

import functools
import re
import warnings
from dataclasses import dataclass
from typing import Any

from ddpjob import official_sdk
from ddpjob.errors import UserInputError

PYTORCH = "pytorch"
HUGGINGFACE = "huggingface"
#: The newest PyTorch training DLC that the pinned official SDK (2.257) knows with both a cpu and
#: a gpu image; used when `framework_version`/`py_version` are not given.
DEFAULT_FRAMEWORK_VERSION = "2.8.0"
DEFAULT_PY_VERSION = "py312"
#: Repositories of SageMaker's training DLCs that run a `sagemaker_program` through the toolkit.
DLC_REPOSITORIES = ("pytorch-training", "huggingface-pytorch-training", "pytorch-smp",
                    "pytorch-trcomp-training")
# <account>.dkr.ecr.<region>.amazonaws.com[.cn]/<repository>(:<tag>|@<digest>)
_DLC = re.compile(
    r"^\d{12}\.dkr\.ecr\.[a-z0-9-]+\.amazonaws\.com(\.cn)?/(?P<repo>[^:@]+)"
    r"(:(?P<tag>[\w.-]+)$|@)")
_GPU_FAMILIES = ("p", "g")


def dlc_repository(image_uri: str | None) -> tuple[str, str | None] | None:
    """`(repository, tag)` when `image_uri` names one of SageMaker's PyTorch training
    containers (the tag is None for a digest), else None."""
    match = _DLC.match(image_uri or "")
    if match is None or match.group("repo") not in DLC_REPOSITORIES:
        return None
    return match.group("repo"), match.group("tag")


def is_dlc(image_uri: str | None) -> bool:
    """True when `image_uri` names one of SageMaker's PyTorch training containers."""
    return dlc_repository(image_uri) is not None


def processor(instance_type: str) -> str:
    """"gpu" for the ml.p*/ml.g* families, "neuron" for trn/inf, else "cpu" (official rule)."""
    family = instance_type.split(".")[1] if instance_type.count(".") >= 2 else ""
    if family.startswith(("trn", "inf")):
        return "neuron"
    return "gpu" if family.startswith(_GPU_FAMILIES) else "cpu"


@dataclass(frozen=True)
class ImageRequest:
    """What picks a training DLC: framework and versions, instance type, region, distribution."""

    framework: str
    framework_version: str
    py_version: str | None  # None: the newest the version has
    instance_type: str
    region: str
    distribution: dict[str, Any] | None = None
    pytorch_version: str | None = None  # Hugging Face only: the PyTorch under transformers
    compiler_config: Any = None  # the official TrainingCompilerConfig: its `-trcomp-` container


def _sagemaker_image_uris() -> Any:
    return official_sdk.module("image_uris", "image_uri not given: picking SageMaker's "
                                             "container (or pass image_uri=...)")


@functools.lru_cache(maxsize=4)
def _training_config(framework: str) -> dict[str, Any]:
    return _sagemaker_image_uris().config_for_framework(framework)["training"]


def _one_of(value: str, available: list[str], what: str) -> None:
    if value not in available:
        raise UserInputError(f"{what} {value!r} has no SageMaker training container; "
                             f"available: {', '.join(available)}")


def _version_config(request: ImageRequest) -> dict[str, Any]:
    config = _training_config(request.framework)
    aliases = config.get("version_aliases", {})
    versions = list(config["versions"])
    argument = "transformers_version" if request.framework == HUGGINGFACE else \
        "framework_version"
    version = aliases.get(request.framework_version, request.framework_version)
    _one_of(version, versions + [a for a in aliases if aliases[a] in versions], argument)
    entry = config["versions"][version]
    if request.framework == HUGGINGFACE:
        options = [key[len("pytorch"):] for key in entry if key.startswith("pytorch")]
        if request.pytorch_version is None:
            raise UserInputError(f"pytorch_version is required for HuggingFace; for "
                                 f"transformers {version}: {', '.join(options)}")
        inner = entry.get("version_aliases", {})
        key = inner.get(f"pytorch{request.pytorch_version}", f"pytorch{request.pytorch_version}")
        _one_of(key[len("pytorch"):], options, f"pytorch_version (transformers {version})")
        entry = entry[key]
    return entry


def _check(request: ImageRequest) -> str:
    """The py_version to use, once everything is checked against the SDK's data."""
    entry = _version_config(request)
    py_versions = entry.get("py_versions", [])
    py_version = request.py_version or (py_versions[-1] if py_versions else "")
    _one_of(py_version, py_versions, f"py_version (framework {request.framework_version})")
    kind = processor(request.instance_type)
    processors = entry.get("processors") or _training_config(request.framework)["processors"]
    if kind not in processors:
        raise UserInputError(
            f"instance_type {request.instance_type!r} needs a {kind} image, but framework "
            f"{request.framework_version} has {'/'.join(processors)} training images only; "
            f"pick an instance type of those")
    regions = sorted(entry.get("registries", {}))
    if request.region not in regions:
        raise UserInputError(f"region {request.region!r} has no SageMaker training container "
                             f"for framework {request.framework_version}; available: "
                             f"{', '.join(regions)}")
    return py_version


def _smp(distribution: dict[str, Any] | None) -> bool:
    """SageMaker's model-parallel v2 form: its own container (`pytorch-smp`) and versions."""
    distribution = distribution or {}
    modelparallel = distribution.get("smdistributed", {}).get("modelparallel", {})
    return "torch_distributed" in distribution and modelparallel.get("enabled", True) is True \
        and bool(modelparallel)


def training_image_uri(request: ImageRequest) -> str:
    """The DLC URI the official SDK would pick, or one-line UserInputError listing options."""
    if _smp(request.distribution):  # checked by the SDK itself, against pytorch-smp's data
        if not request.py_version:
            raise UserInputError("py_version is required with smdistributed modelparallel "
                                 "(e.g. 'py311')")
        py_version = request.py_version
    else:
        py_version = _check(request)
    image_uris = _sagemaker_image_uris()
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return image_uris.get_training_image_uri(
                request.region, request.framework, request.framework_version,
                py_version, distribution=request.distribution,
                pytorch_version=request.pytorch_version, instance_type=request.instance_type,
                compiler_config=request.compiler_config)
    except ValueError as error:
        raise UserInputError("no SageMaker training container: " + " ".join(str(error).split())
                             ) from None
