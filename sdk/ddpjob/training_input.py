"""`TrainingInput`: one input channel's settings, with the official SDK's signature and config.

    from ddpjob import TrainingInput
    estimator.fit({"train": TrainingInput("s3://bucket/train", distribution="ShardedByS3Key")})

`config` is the channel as CreateTrainingJob takes it (without its name), built as
`sagemaker.inputs.TrainingInput` builds it. `s3_data` may also be a local path or file:// URI:
used in place by local jobs, uploaded before a SageMaker job starts (like a plain path).
"""

from __future__ import annotations

import os
from typing import Any

from ddpjob.errors import UserInputError

S3_DATA_TYPES = ("S3Prefix", "ManifestFile", "AugmentedManifestFile", "Converse")
DISTRIBUTIONS = ("FullyReplicated", "ShardedByS3Key")
INPUT_MODES = ("File", "Pipe", "FastFile")
COMPRESSIONS = ("None", "Gzip")


def _one_of(value: Any, allowed: tuple[str, ...], argument: str) -> None:
    if value is not None and value not in allowed:
        raise UserInputError(f"TrainingInput {argument} must be one of {', '.join(allowed)}, "
                             f"got {value!r}")


class TrainingInput:
    """An input channel: where its data is and how SageMaker hands it to every host."""

    def __init__(
        self,
        s3_data: str | os.PathLike,
        distribution: str | None = None,
        compression: str | None = None,
        content_type: str | None = None,
        record_wrapping: str | None = None,
        s3_data_type: str = "S3Prefix",
        instance_groups: list[str] | None = None,
        input_mode: str | None = None,
        attribute_names: list[str] | None = None,
        target_attribute_name: str | None = None,
        shuffle_config: object = None,
    ):
        """Arguments as in `sagemaker.inputs.TrainingInput` (checked here, one line each)."""
        if not isinstance(s3_data, (str, os.PathLike)) or not os.fspath(s3_data):
            raise UserInputError(f"TrainingInput s3_data must be a URI or a path, got "
                                 f"{s3_data!r}")
        _one_of(distribution, DISTRIBUTIONS, "distribution")
        _one_of(compression, COMPRESSIONS, "compression")
        _one_of(s3_data_type, S3_DATA_TYPES, "s3_data_type")
        _one_of(input_mode, INPUT_MODES, "input_mode")
        _one_of(record_wrapping, ("None", "RecordIO"), "record_wrapping")
        self.s3_data = os.fspath(s3_data)
        source: dict[str, Any] = {"S3DataType": s3_data_type, "S3Uri": self.s3_data}
        if not (target_attribute_name or distribution):
            distribution = "FullyReplicated"
        if distribution is not None:
            source["S3DataDistributionType"] = distribution
        if attribute_names is not None:
            source["AttributeNames"] = list(attribute_names)
        if instance_groups is not None:
            source["InstanceGroupNames"] = list(instance_groups)
        self.config: dict[str, Any] = {"DataSource": {"S3DataSource": source}}
        optional = {"CompressionType": compression, "ContentType": content_type,
                    "RecordWrapperType": record_wrapping, "InputMode": input_mode,
                    "TargetAttributeName": target_attribute_name}
        self.config.update({key: value for key, value in optional.items() if value is not None})
        if shuffle_config is not None:
            self.config["ShuffleConfig"] = {"Seed": getattr(shuffle_config, "seed",
                                                            shuffle_config)}

    def __repr__(self) -> str:
        return f"TrainingInput({self.config!r})"
