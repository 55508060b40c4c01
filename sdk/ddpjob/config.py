"""The YAML files of the CLI: the defaults file and a job spec, both checked strictly.

The defaults file (`$DDPJOB_CONFIG`, else `~/.ddpjob/config.yaml`)::

    backend: sagemaker                  # or local (the default)
    home: ~/ddpjob-home                 # local jobs' state; relative paths: to this file's folder
    role: arn:aws:iam::123456789012:role/SageMakerRole
    default_bucket: my-bucket           # instead of sagemaker-<region>-<account>
    region: us-east-1
    instance_type: ml.g5.12xlarge       # used when a run names none and it fits the backend
    tags: {team: ml}                    # or [{Key: team, Value: ml}]; a run's own tags win

A job spec holds the estimator's keyword arguments plus `inputs` and `job_name`; relative paths
in it (source_dir, entry_point without a source_dir, dependencies, inputs, checkpoint_s3_uri,
output_path, code_location) are relative to its folder.
"""

from __future__ import annotations

import difflib
import os
import re
from collections.abc import Collection, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ddpjob_runtime.shared import storage

from ddpjob import arguments, backends
from ddpjob.errors import UserInputError

DEFAULT_CONFIG_PATH = Path("~/.ddpjob/config.yaml")

# key -> (accepted types, what the error says is allowed)
_CONFIG_KEYS: dict[str, tuple[tuple[type, ...], str]] = {
    "backend": ((str,), backends.NAMES_ALLOWED),
    "home": ((str,), "a folder path"),
    "role": ((str,), "an IAM role ARN such as 'arn:aws:iam::<account>:role/<name>'"),
    "default_bucket": ((str,), "an S3 bucket name"),
    "region": ((str,), "an AWS region name such as 'us-east-1'"),
    "instance_type": ((str,), backends.INSTANCE_TYPES_ALLOWED),
    "tags": ((dict, list), "a mapping of tag keys to values, or a list of {Key: ..., Value: ...}"),
}
_REGION = re.compile(r"^[a-z]{2}(-[a-z]+)+-\d+$")
_SCHEME = re.compile(r"^[a-zA-Z][a-zA-Z0-9+.-]*:")

# Keys a job spec may hold: the estimator's arguments (its table's rows included) plus what
# fit() takes.
SPEC_ESTIMATOR_KEYS = arguments.SPEC_KEYS
SPEC_FIT_KEYS = frozenset({"inputs", "job_name"})
# Spec keys of the session that runs the job: a local job's rehearsed interruptions.
SPEC_SESSION_KEYS = frozenset({"interruptions"})
# Spec keys that name a folder or a URI: a plain relative path is relative to the spec.
_SPEC_LOCATIONS = ("inputs", "checkpoint_s3_uri", "output_path", "code_location")
# Spec keys the CLI merges with flags or config defaults, so their shape is checked on reading.
_SPEC_SHAPES: dict[str, tuple[tuple[type, ...], str]] = {
    "hyperparameters": ((dict,), "a mapping of names to values"),
    "distribution": ((dict,), "a mapping such as {torch_distributed: {enabled: true}}"),
    "inputs": ((str, dict), "a URI or a mapping of channel names to URIs"),
    "tags": ((dict, list), "a mapping of tag keys to values, or a list of {Key: ..., Value: ...}"),
    "job_name": ((str,), "a job name (letters, digits and hyphens)"),
    "dependencies": ((list,), "a list of folder paths"),
    "interruptions": ((list,), "a list of mappings (after_s, within_s, seed, host, notice)"),
}


@dataclass(frozen=True)
class Config:
    """Defaults for every CLI command, read from `~/.ddpjob/config.yaml` (or `DDPJOB_CONFIG`)."""

    backend: str = backends.LOCAL.name
    home: str | None = None
    role: str | None = None
    default_bucket: str | None = None
    region: str | None = None
    instance_type: str | None = None
    tags: dict[str, str] = field(default_factory=dict)
    path: Path | None = None  # the file these defaults came from, None when there was none


def _read_yaml_mapping(path: Path, what: str) -> dict[str, Any]:
    import yaml

    from ddpjob import yamlfile

    try:
        text = path.read_text()
    except OSError as exc:
        raise UserInputError(f"{what} {path}: cannot read it ({exc.strerror})") from None
    except UnicodeDecodeError:
        raise UserInputError(f"{what} {path}: not a text (UTF-8) file") from None
    try:
        data = yamlfile.safe_load(text, f"{what} {path}")
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}" if mark is not None else ""
        raise UserInputError(f"{what} {path}: not valid YAML{where}") from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise UserInputError(f"{what} {path}: must be a mapping of keys to values")
    return data


def _tags_dict(tags: Any, where: str) -> dict[str, str]:
    """`{key: value}` from a mapping or a list of `{Key, Value}`; UserInputError otherwise."""
    if isinstance(tags, list):
        pairs = []
        for tag in tags:
            if not (isinstance(tag, dict) and set(tag) == {"Key", "Value"}):
                raise UserInputError(f"{where}: each entry of tags must be {{Key: ..., Value: "
                                     f"...}}, got {tag!r}")
            pairs.append((tag["Key"], tag["Value"]))
    else:
        pairs = list(tags.items())
    if not all(isinstance(k, str) and k and isinstance(v, str) for k, v in pairs):
        raise UserInputError(f"{where}: tags must map non-empty strings to strings (quote "
                             f"numbers and booleans)")
    return dict(pairs)


def _check_config_value(key: str, value: str, where: str) -> None:
    if key == "backend" and value not in backends.NAMES:
        raise UserInputError(f"{where}: backend must be {backends.NAMES_ALLOWED}, not {value!r}")
    if key == "instance_type" and backend_of(value) is None:
        raise UserInputError(f"{where}: instance_type {value!r} is not allowed: use "
                             f"{backends.INSTANCE_TYPES_ALLOWED}")
    if key == "default_bucket" and not storage.is_bucket_name(value):
        raise UserInputError(f"{where}: default_bucket {value!r} is not an S3 bucket name "
                             f"({storage.BUCKET_RULES})")
    if key == "region" and not _REGION.match(value):
        raise UserInputError(f"{where}: region {value!r} is not an AWS region name such as "
                             f"'us-east-1'")
    if key == "role":
        try:
            backends.SAGEMAKER.check_role(value)
        except UserInputError as exc:
            raise UserInputError(f"{where}: {exc}") from None


def load_config(path: str | os.PathLike | None = None) -> Config:
    """Read the defaults file; a missing default file means no defaults, a named one must exist."""
    named = path or os.environ.get("DDPJOB_CONFIG")
    config_path = Path(named or DEFAULT_CONFIG_PATH).expanduser()
    if not named and not config_path.exists():
        return Config()
    where = f"config file {config_path}"
    data = _read_yaml_mapping(config_path, "config file")
    for key, value in data.items():
        if key not in _CONFIG_KEYS:
            raise _unknown_key(where, key, _CONFIG_KEYS)
        types, allowed_text = _CONFIG_KEYS[key]
        if not isinstance(value, types) or (isinstance(value, str) and not value.strip()):
            raise UserInputError(f"{where}: {key} must be {allowed_text}, got {value!r}")
        if isinstance(value, str):
            _check_config_value(key, value, where)
    if "tags" in data:
        data["tags"] = _tags_dict(data["tags"], where)
    if "home" in data:  # relative to the config file, not to wherever the command runs
        data["home"] = str(config_path.parent / Path(data["home"]).expanduser())
    return Config(**data, path=config_path)


def _unknown_key(where: str, key: object, known: Collection[str]) -> UserInputError:
    """A misspelt or shortened key gets its likely meaning (`bucket`: `default_bucket`);
    anything else the list of what is allowed."""
    text = str(key)
    containing = [name for name in known if text in name]
    close = containing if len(containing) == 1 else difflib.get_close_matches(text, known, n=1)
    if close:
        return UserInputError(f"{where}: unknown key {key!r} (did you mean {close[0]!r}?)")
    return UserInputError(f"{where}: unknown key {key!r}; allowed: {', '.join(sorted(known))}")


def load_spec(path: str | os.PathLike) -> dict[str, Any]:
    """Read a job spec: the estimator's keyword arguments plus `inputs` and `job_name`."""
    spec_path = Path(path).expanduser()
    data = _read_yaml_mapping(spec_path, "job spec")
    known = SPEC_ESTIMATOR_KEYS | SPEC_FIT_KEYS | SPEC_SESSION_KEYS
    unknown = sorted(set(data) - known, key=str)
    if unknown:
        raise _unknown_key(f"job spec {spec_path}", unknown[0], known)
    for key, (types, allowed_text) in _SPEC_SHAPES.items():
        if data.get(key) is not None and not isinstance(data[key], types):
            raise UserInputError(f"job spec {spec_path}: {key} must be {allowed_text}, got "
                                 f"{data[key]!r}")
    # Relative paths in a spec are relative to the spec's folder, as in docker-compose files.
    base = spec_path.parent
    for key in set(_SPEC_LOCATIONS) & set(data):
        data[key] = _relative_to(base, data[key])
    if isinstance(data.get("inputs"), dict):
        data["inputs"] = {name: _relative_to(base, uri) for name, uri in data["inputs"].items()}
    if data.get("git_config") is not None:
        return data  # code paths are inside the repository, cloned at submission
    if data.get("source_dir") is not None:
        data["source_dir"] = _relative_to(base, data["source_dir"])
    elif "entry_point" in data:
        data["entry_point"] = _relative_to(base, data["entry_point"])
    if data.get("dependencies"):
        data["dependencies"] = [_relative_to(base, dep) for dep in data["dependencies"]]
    return data


def _relative_to(base: Path, value: Any) -> Any:
    """A plain path (~ expanded) as an absolute path, relative ones taken from `base`; a URI
    (`s3://...`, `file://...`, or a mistyped `s3:/...`, refused later as a URI) or a non-string
    as it is."""
    if not isinstance(value, str) or _SCHEME.match(value):
        return value
    return str((base / Path(value).expanduser()).resolve())


def backend_of(instance_type: object) -> str | None:
    """The name of the backend an instance type runs on, or None for no valid type."""
    backend = backends.for_instance_type(instance_type)
    return backend and backend.name


def resolve_backend(flag: str | None, instance_type: object,
                    config: Config) -> tuple[str, object]:
    """The backend and instance type of a run.

    The backend is `--backend` (`flag`), else the one the instance type implies, else the config
    file's. A run that names no instance type gets the config file's when it fits that backend,
    else 'local' on the local backend; SageMaker jobs need one. A flag that contradicts the
    instance type is an error, not a silent choice.
    """
    if instance_type is None:
        backend = flag or config.backend
        if config.instance_type is not None and backend_of(config.instance_type) == backend:
            return backend, config.instance_type
        if backends.named(backend).default_instance_type:
            return backend, backends.named(backend).default_instance_type
        raise UserInputError(
            "an instance type is required for SageMaker jobs: pass --instance-type (e.g. "
            "ml.g5.12xlarge), or set instance_type in the job spec or in the config file")
    implied = backend_of(instance_type)
    if flag and implied and flag != implied:
        raise UserInputError(f"--backend {flag} cannot run instance type {instance_type!r}: "
                             f"use {backends.named(flag).allowed}, or --backend {implied}")
    return implied or flag or config.backend, instance_type


def merge_defaults(kwargs: Mapping[str, Any], config: Config) -> dict[str, Any]:
    """Fill the role the user left out from the config file, and merge its tags under the
    user's (a mapping or a list of `{Key, Value}`; on the same key the user's tag wins)."""
    merged = dict(kwargs)
    if config.role and not merged.get("role"):
        merged["role"] = config.role
    user_tags = merged.get("tags") or {}
    if config.tags and isinstance(user_tags, Mapping):
        merged["tags"] = {**config.tags, **user_tags}
    elif config.tags and isinstance(user_tags, list):  # [{"Key": ..., "Value": ...}, ...]
        given = {tag.get("Key") for tag in user_tags if isinstance(tag, Mapping)}
        merged["tags"] = [{"Key": key, "Value": value} for key, value in config.tags.items()
                          if key not in given] + user_tags
    return merged
