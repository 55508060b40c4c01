"""`git_config`: the code comes from a Git repository, cloned when the job is planned.

As the official SDK's `git_utils.git_clone_repo`: `{"repo": url, "branch": ..., "commit": ...}`
(plus `username`/`password` or `token` for HTTPS) is cloned into a temporary folder; `source_dir`,
`entry_point` and `dependencies` are then paths inside the clone.
"""

from __future__ import annotations

import os
import subprocess
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlsplit, urlunsplit

from ddpjob.errors import UserInputError

KEYS = ("repo", "branch", "commit", "2FA_enabled", "username", "password", "token")


def check(git_config: Any) -> dict[str, Any] | None:
    """None, or the config with its keys checked (no I/O)."""
    if git_config is None:
        return None
    if not isinstance(git_config, Mapping) or not isinstance(git_config.get("repo"), str):
        raise UserInputError("git_config must be a dict with at least 'repo': <git URL>")
    unknown = sorted(set(git_config) - set(KEYS))
    if unknown:
        raise UserInputError(f"git_config has unknown key {unknown[0]!r}; allowed: "
                             f"{', '.join(KEYS)}")
    for key in ("branch", "commit", "username", "password", "token"):
        if key in git_config and not isinstance(git_config[key], str):
            raise UserInputError(f"git_config[{key!r}] must be a string")
    return dict(git_config)


def _url(config: Mapping[str, Any]) -> str:
    url = config["repo"]
    parts = urlsplit(url)
    if parts.scheme != "https" or not (config.get("token") or config.get("username")):
        return url
    user = config.get("token") or f"{quote(config['username'])}:{quote(config.get('password', ''))}"
    return urlunsplit(parts._replace(netloc=f"{user}@{parts.netloc}"))


def _git(*args: str, cwd: str | None = None) -> None:
    env = {**os.environ, "GIT_TERMINAL_PROMPT": "0"}  # fail instead of asking for a password
    result = subprocess.run(["git", *args], cwd=cwd, env=env, capture_output=True, text=True)
    if result.returncode != 0:
        detail = " ".join((result.stderr or result.stdout).split())[:300]
        raise UserInputError(f"git_config: git {args[0]} failed: {detail}")


@dataclass
class Clone:
    """A checked-out repository; `folder` lives as long as this object."""

    holder: tempfile.TemporaryDirectory
    folder: Path

    def path(self, relative: str | os.PathLike | None) -> str | None:
        """`relative` inside the clone (None stays None); `..` may not leave it."""
        if relative is None:
            return None
        resolved = (self.folder / relative).resolve()
        if not resolved.is_relative_to(self.folder.resolve()):
            raise UserInputError(f"git_config: {os.fspath(relative)!r} is outside the "
                                 f"repository")
        return str(resolved)


def clone(config: Mapping[str, Any]) -> Clone:
    """Clone `config['repo']` and check out its branch and commit."""
    holder = tempfile.TemporaryDirectory(prefix="ddpjob-git-")
    folder = Path(holder.name, "repo")
    branch = ["--branch", config["branch"]] if config.get("branch") else []
    _git("clone", *branch, _url(config), str(folder))
    if config.get("commit"):
        _git("checkout", config["commit"], cwd=str(folder))
    return Clone(holder, folder)
