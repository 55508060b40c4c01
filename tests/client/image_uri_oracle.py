"""Oracle: ddpjob's training image URIs against the installed official SDK's own function.

For every PyTorch training version (and alias) x Python version x processor of the installed
registry (v2 or v3), a few regions, p4d and smdistributed (which change some tags), and every
Hugging Face transformers x PyTorch x Python version on gpu, `ddpjob.image_uris.
training_image_uri` must equal the SDK's `get_training_image_uri`, or both must refuse. Run in
the environment whose SDK is the judge; prints one JSON object. The SDK's botocore endpoint data,
which it parses anew for every URI, is parsed once here (the same data; a hundred times faster)::

    python tests/client/image_uri_oracle.py
"""

from __future__ import annotations

import functools
import json
import logging
import warnings
from collections.abc import Iterator
from typing import Any

from ddpjob import official_sdk
from ddpjob.errors import UserInputError
from ddpjob.image_uris import HUGGINGFACE, PYTORCH, ImageRequest, training_image_uri

#: Regions on different accounts and partitions (aws, aws-cn, an isolated one, a late one).
REGIONS = ("us-east-1", "af-south-1", "cn-north-1", "us-iso-east-1", "il-central-1")
#: (instance type, distribution): cpu, gpu, p4d, and smdistributed (p4d and smdistributed
#: auto-select some tag suffixes).
SMDDP = {"smdistributed": {"dataparallel": {"enabled": True}}}
SHAPES = (("ml.m5.xlarge", None), ("ml.g5.xlarge", None), ("ml.p4d.24xlarge", None),
          ("ml.g5.xlarge", SMDDP))


def _versions(config: dict[str, Any]) -> list[str]:
    return list(config["versions"]) + list(config.get("version_aliases", {}))


def pytorch_cases(sdk: official_sdk.OfficialSdk) -> Iterator[ImageRequest]:
    """Every PyTorch training version x py_version x shape, in the first region, and the
    cpu and gpu shapes in every region."""
    config = sdk.config(PYTORCH)["training"]
    for version in _versions(config):
        entry = config["versions"][config.get("version_aliases", {}).get(version, version)]
        for py_version in entry["py_versions"]:
            for region in REGIONS:
                shapes = SHAPES if region == REGIONS[0] else SHAPES[:2]
                for instance_type, distribution in shapes:
                    yield ImageRequest(PYTORCH, version, py_version, instance_type, region,
                                       distribution)


def huggingface_cases(sdk: official_sdk.OfficialSdk) -> Iterator[ImageRequest]:
    """Every Hugging Face transformers x PyTorch (and their aliases) x py_version, on gpu in
    two regions and on cpu (which has none) in one."""
    config = sdk.config(HUGGINGFACE)["training"]
    for version in _versions(config):
        entry = config["versions"][config.get("version_aliases", {}).get(version, version)]
        aliases = entry.get("version_aliases", {})
        for key in [k for k in [*entry, *aliases] if k.startswith("pytorch")]:
            for py_version in entry[aliases.get(key, key)]["py_versions"]:
                for instance_type, region in (("ml.g5.xlarge", REGIONS[0]),
                                              ("ml.g5.xlarge", REGIONS[1]),
                                              ("ml.m5.xlarge", REGIONS[0])):
                    yield ImageRequest(HUGGINGFACE, version, py_version, instance_type, region,
                                       pytorch_version=key[len("pytorch"):])


def _official(image_uris: Any, request: ImageRequest) -> str:
    try:
        return image_uris.get_training_image_uri(
            request.region, request.framework, request.framework_version, request.py_version,
            distribution=request.distribution, pytorch_version=request.pytorch_version,
            instance_type=request.instance_type)
    except ValueError:
        return "refused"


def _ours(request: ImageRequest) -> str:
    try:
        return training_image_uri(request)
    except UserInputError:
        return "refused"


def main() -> None:
    """Compare every case and print the SDK, the count and the mismatches as JSON."""
    logging.disable(logging.INFO)
    warnings.simplefilter("ignore")
    sdk = official_sdk.installed()
    assert sdk is not None, "no official SDK in this environment"
    image_uris = sdk.module("image_uris")
    resolver = image_uris.utils._botocore_resolver
    image_uris.utils._botocore_resolver = functools.lru_cache(maxsize=1)(resolver)
    compared, refused, mismatches, uris = 0, 0, [], set()
    for request in [*pytorch_cases(sdk), *huggingface_cases(sdk)]:
        ours, official = _ours(request), _official(image_uris, request)
        compared += 1
        uris.add(official)
        refused += official == "refused"
        if ours != official:
            mismatches.append({"request": repr(request), "ours": ours, "official": official})
    print(json.dumps({"major": sdk.major, "version": sdk.version, "compared": compared,
                      "distinct": len(uris) - (refused > 0), "refused": refused,
                      "mismatches": mismatches[:20], "mismatch_count": len(mismatches)}))


if __name__ == "__main__":
    main()
