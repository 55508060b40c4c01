"""`git_config`: the code comes from a Git repository, cloned when the job is planned.

As the official SDK's `git_utils.git_clone_repo`: `{"repo": url, "branch": ..., "commit": ...}`
(plus `username`/`password` or `token` for HTTPS) is cloned into a temporary folder; `source_dir`,
`entry_point` and `dependencies` are then paths inside the clone. The credentials never reach
the clone's files (see `_remote`), and `packaging` never packs a `.git`: the job gets the
checked-out files only.
"""

from __future__ import annotations

import base64
import os
import subprocess
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlsplit, urlunsplit

from ddpjob.errors import UserInputError

KEYS = ("repo", "branch", "commit", "2FA_enabled", "username", "password", "token")


def check(git_config: object) -> dict[str, Any] | None:
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


def _remote(config: Mapping[str, Any]) -> tuple[str, dict[str, str]]:
    """The repository URL without credentials, and the environment that makes git send them.

    Credentials (`token`, `username`/`password`, or written into an `https://` URL) travel as
    an HTTP header set through `GIT_CONFIG_*` variables (git >= 2.31) for that host only: never
    on a command line, in the clone's `.git/config` or its reflog, or in an error message.
    """
    url = config["repo"]
    parts = urlsplit(url)
    if parts.scheme != "https":
        return url, {}
    netloc = parts.netloc.rpartition("@")[2]
    user, password = unquote(parts.username or ""), unquote(parts.password or "")
    if config.get("token"):
        user, password = config["token"], ""
    elif config.get("username"):
        user, password = config["username"], config.get("password", "")
    if not user:
        return url, {}
    basic = base64.b64encode(f"{user}:{password}".encode()).decode()
    n = int(os.environ.get("GIT_CONFIG_COUNT") or 0)  # after the user's own, if any
    return urlunsplit(parts._replace(netloc=netloc)), {
        "GIT_CONFIG_COUNT": str(n + 1),
        f"GIT_CONFIG_KEY_{n}": f"http.https://{netloc}/.extraHeader",
        f"GIT_CONFIG_VALUE_{n}": f"Authorization: Basic {basic}",
    }


def _git(*args: str, cwd: str | None = None, env: Mapping[str, str] | None = None) -> None:
    env = {**os.environ, "GIT_TERMINAL_PROMPT": "0", **(env or {})}  # fail, never ask
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
    url, env = _remote(config)
    _git("clone", *branch, url, str(folder), env=env)
    if config.get("commit"):
        _git("checkout", config["commit"], cwd=str(folder))
    return Clone(holder, folder)
