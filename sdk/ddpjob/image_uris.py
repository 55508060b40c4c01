"""SageMaker's own training containers (Deep Learning Containers), as the official SDK picks them.

A job on `ml.*` with no `image_uri` runs on SageMaker's PyTorch training DLC (or the Hugging Face
one, for `ddpjob.HuggingFace`). Which images exist is the official SDK's registry data
(`image_uri_config/<framework>.json` of v2 or v3, see `official_sdk`), read from the installed
package's files without importing it: the import alone takes seconds. `training_image_uri` builds
the URI from that data by the rule of the SDK's `get_training_image_uri` for cpu and gpu instance
types; the few cases outside that rule (model parallel's and the Training Compiler's own
containers, `_needs_sdk`) ask the SDK's own function. A test compares
both for every version, Python version, processor and several regions of the installed registry.

Versions, processor (cpu/gpu, from the instance type) and region are checked against the same
data first, so a miss is one line that lists what is available rather than the SDK's message.
With no `framework_version`, a PyTorch job gets `default_versions()`: the newest version of the
installed registry with both a cpu and a gpu image, and its newest Python version.
"""

from __future__ import annotations

import dataclasses
import functools
import re
import warnings
from typing import Any

from ddpjob import official_sdk
from ddpjob.errors import UserInputError

PYTORCH = "pytorch"
HUGGINGFACE = "huggingface"
#: Repositories of SageMaker's training DLCs that run a `sagemaker_program` through the toolkit.
DLC_REPOSITORIES = ("pytorch-training", "huggingface-pytorch-training", "pytorch-smp",
                    "pytorch-trcomp-training")
# <account>.dkr.ecr.<region>.amazonaws.com[.cn]/<repository>(:<tag>|@<digest>)
_DLC = re.compile(
    r"^\d{12}\.dkr\.ecr\.[a-z0-9-]+\.amazonaws\.com(\.cn)?/(?P<repo>[^:@]+)"
    r"(:(?P<tag>[\w.-]+)$|@)")
_GPU_FAMILIES = ("p", "g")
_NEEDED_FOR = "image_uri not given: picking SageMaker's container (or pass image_uri=...)"
#: Instance families the SDK's rule treats apart: Graviton (an arm64 image) and p2 (refused from
#: PyTorch 1.13); for these the SDK's own function decides.
_SDK_FAMILIES = ("p2", "m6g", "m6gd", "c6g", "c6gd", "c6gn", "c7g", "r6g", "r6gd")
#: What a version entry of the registry may hold for the rule here; any other key: the SDK decides.
_ENTRY_KEYS = {"py_versions", "registries", "repository", "container_version"}
#: Tag suffixes the SDK adds to PyTorch 1.6 gpu images on p4d or with smdistributed.
_CUDA11_SUFFIXES = {"1.6-gpu-py36": "cu110-ubuntu18.04-v3", "1.6.0-gpu-py36": "cu110-ubuntu18.04",
                    "1.6-gpu-py3": "cu110-ubuntu18.04-v3", "1.6.0-gpu-py3": "cu110-ubuntu18.04"}
#: The Hugging Face gpu tag suffix when the registry names none (the SDK's constant).
_HUGGINGFACE_GPU_SUFFIX = "cu110-ubuntu18.04"


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


def _family(instance_type: str) -> str:
    return instance_type.split(".")[1] if instance_type.count(".") >= 2 else ""


def processor(instance_type: str) -> str:
    """"gpu" for the ml.p*/ml.g* families, "neuron" for trn/inf, else "cpu" (official rule)."""
    family = _family(instance_type)
    if family.startswith(("trn", "inf")):
        return "neuron"
    return "gpu" if family.startswith(_GPU_FAMILIES) else "cpu"


@dataclasses.dataclass(frozen=True)
class ImageRequest:
    """What picks a training DLC: framework and versions, instance type, region, distribution."""

    framework: str
    framework_version: str | None  # None: `default_versions()` (PyTorch only)
    py_version: str | None  # None: the newest the version has
    instance_type: str
    region: str
    distribution: dict[str, Any] | None = None
    pytorch_version: str | None = None  # Hugging Face only: the PyTorch under transformers
    compiler_config: Any = None  # the official TrainingCompilerConfig: its `-trcomp-` container


def _training_config(framework: str) -> dict[str, Any]:
    return official_sdk.require(_NEEDED_FOR).config(framework)["training"]


def _newest_py_version(py_versions: list[str]) -> str:
    """The newest of `py_versions` such as ["py39", "py310"]."""
    return max(py_versions, key=lambda name: (int(name[2:3] or 0), int(name[3:] or 0)))


@functools.lru_cache(maxsize=1)
def default_versions() -> tuple[str, str]:
    """`(framework_version, py_version)` of a PyTorch job that names none: the newest version of
    the installed registry with both a cpu and a gpu training image, its newest Python."""
    config = _training_config(PYTORCH)
    both = [version for version, entry in config["versions"].items()
            if {"cpu", "gpu"} <= set(config.get("processors") or entry.get("processors", []))]
    version = max(both, key=lambda v: tuple(int(part) for part in re.findall(r"\d+", v)))
    return version, _newest_py_version(config["versions"][version]["py_versions"])


def _one_of(value: str, available: list[str], what: str) -> None:
    if value not in available:
        raise UserInputError(f"{what} {value!r} has no SageMaker training container; "
                             f"available: {', '.join(available)}")


def _version_entry(request: ImageRequest, version: str) -> dict[str, Any]:
    config = _training_config(request.framework)
    aliases = config.get("version_aliases", {})
    versions = list(config["versions"])
    argument = "transformers_version" if request.framework == HUGGINGFACE else \
        "framework_version"
    _one_of(version, versions + [a for a in aliases if aliases[a] in versions], argument)
    entry = config["versions"][aliases.get(version, version)]
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


def _check(request: ImageRequest, version: str) -> tuple[dict[str, Any], str]:
    """The registry entry and the py_version to use, once everything is checked against it."""
    entry = _version_entry(request, version)
    py_versions = entry.get("py_versions", [])
    py_version = request.py_version or (_newest_py_version(py_versions) if py_versions else "")
    _one_of(py_version, py_versions, f"py_version (framework {version})")
    kind = processor(request.instance_type)
    processors = _training_config(request.framework).get("processors") or \
        entry.get("processors", [])
    if kind not in processors:
        raise UserInputError(
            f"instance_type {request.instance_type!r} needs a {kind} image, but framework "
            f"{version} has {'/'.join(processors)} training images only; "
            f"pick an instance type of those")
    regions = sorted(entry.get("registries", {}))
    if request.region not in regions:
        raise UserInputError(f"region {request.region!r} has no SageMaker training container "
                             f"for framework {version}; available: {', '.join(regions)}")
    return entry, py_version


def _smp(distribution: dict[str, Any] | None) -> bool:
    """SageMaker's model-parallel v2 form: its own container (`pytorch-smp`) and versions."""
    distribution = distribution or {}
    modelparallel = distribution.get("smdistributed", {}).get("modelparallel", {})
    return "torch_distributed" in distribution and modelparallel.get("enabled", True) is True \
        and bool(modelparallel)


def _needs_sdk(request: ImageRequest, version: str, entry: dict[str, Any]) -> bool:
    """Cases the rule here leaves to the SDK: Graviton and p2 instance types, registry keys it
    does not know, and a Hugging Face version alias (v2 tags the alias, v3 what it stands for)."""
    aliased = request.framework == HUGGINGFACE and \
        version in _training_config(HUGGINGFACE).get("version_aliases", {})
    return _family(request.instance_type) in _SDK_FAMILIES or not set(entry) <= _ENTRY_KEYS \
        or aliased


@functools.lru_cache(maxsize=8)
def _ecr_hostname(region: str) -> str:
    """ECR's host name in `region` from botocore's endpoint data, as the SDK resolves it."""
    import botocore.loaders
    import botocore.regions

    resolver = botocore.regions.EndpointResolver(
        botocore.loaders.create_loader().load_data("endpoints"))
    endpoint = resolver.construct_endpoint("ecr", region) or {}
    return endpoint.get("hostname") or f"ecr.{region}.amazonaws.com"


def _tag(request: ImageRequest, version: str, entry: dict[str, Any], py_version: str) -> str:
    """`<version>-<processor>-<python>[-<suffix>]`, Hugging Face's version being
    `<pytorch>-transformers<transformers>`."""
    kind = processor(request.instance_type)
    suffix = entry.get("container_version", {}).get(kind)
    if request.framework == HUGGINGFACE:
        version = f"{request.pytorch_version}-transformers{version}"
        suffix = suffix or (_HUGGINGFACE_GPU_SUFFIX if kind == "gpu" else None)
    tag = "-".join(part for part in (version, kind, py_version) if part)
    distribution = request.distribution or {}
    if _family(request.instance_type) == "p4d" or "smdistributed" in distribution:
        suffix = suffix or _CUDA11_SUFFIXES.get(tag)
    return f"{tag}-{suffix}" if suffix else tag


def _sdk_image_uri(request: ImageRequest, version: str, py_version: str | None) -> str:
    image_uris = official_sdk.module("image_uris", _NEEDED_FOR)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return image_uris.get_training_image_uri(
                request.region, request.framework, version, py_version,
                distribution=request.distribution, pytorch_version=request.pytorch_version,
                instance_type=request.instance_type, compiler_config=request.compiler_config)
    except ValueError as error:
        raise UserInputError("no SageMaker training container: " + " ".join(str(error).split())
                             ) from None


def training_image_uri(request: ImageRequest) -> str:
    """The DLC URI the official SDK would pick, or one-line UserInputError listing options."""
    version = request.framework_version
    if version is None:
        version, default_py = default_versions()
        request = dataclasses.replace(request, py_version=request.py_version or default_py)
    if _smp(request.distribution) and not request.py_version:
        raise UserInputError("py_version is required with smdistributed modelparallel "
                             "(e.g. 'py311')")
    if _smp(request.distribution) or request.compiler_config is not None:
        # their own containers (pytorch-smp, the Training Compiler's), checked by the SDK itself
        return _sdk_image_uri(request, version, request.py_version)
    entry, py_version = _check(request, version)
    if _needs_sdk(request, version, entry):
        return _sdk_image_uri(request, version, py_version)
    repository = f"{entry['repository']}:{_tag(request, version, entry, py_version)}"
    return f"{entry['registries'][request.region]}.dkr.{_ecr_hostname(request.region)}/" \
           f"{repository}"
