"""A small Dockerfile reader for tests: stages, build arguments, and what each RUN executes.

Enough of the Dockerfile reference to ask what an image does rather than how its text reads:
continuation lines and comments, `ARG` scoping (global ARGs feed `FROM`; a stage sees those it
re-declares), `${NAME}` / `$NAME` substitution with build arguments, and RUN's shell form split
into simple commands (`&&`, `||`, `;`, `|`, `if/then/fi`) with shell quoting respected.
"""

from __future__ import annotations

import json
import re
import shlex
from dataclasses import dataclass, field

_VARIABLE = re.compile(r"\$\{(\w+)(?::-([^}]*))?\}|\$(\w+)")
_SEPARATORS = {"&&", "||", ";", "|", "(", ")"}
_SHELL_KEYWORDS = {"if", "then", "else", "elif", "fi", "do", "done", "!"}


def instructions(text: str) -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) in order: comments dropped, continuation lines joined."""
    result, pending = [], ""
    for line in text.splitlines():
        if line.strip().startswith("#") or not line.strip():
            continue
        pending += line.rstrip()
        if pending.endswith("\\"):
            pending = pending[:-1] + " "
            continue
        keyword, _, args = pending.strip().partition(" ")
        result.append((keyword.upper(), " ".join(args.split())))
        pending = ""
    return result


def substitute(text: str, variables: dict[str, str]) -> str:
    """`${NAME}`, `${NAME:-default}` and `$NAME` replaced; unknown names become ''."""
    def value(match: re.Match[str]) -> str:
        name = match.group(1) or match.group(3)
        if variables.get(name):
            return variables[name]
        return match.group(2) or ""

    return _VARIABLE.sub(value, text)


def commands(script: str) -> list[list[str]]:
    """The simple commands of a shell script (or of an exec-form JSON array), each as words."""
    if script.lstrip().startswith("["):
        return [json.loads(script)]
    lexer = shlex.shlex(script, posix=True, punctuation_chars="&|;()")
    lexer.whitespace_split = True
    found: list[list[str]] = [[]]
    for token in lexer:
        if token in _SEPARATORS:
            found.append([])
        elif token in _SHELL_KEYWORDS and not found[-1]:
            continue
        else:
            found[-1].append(token)
    return [words for words in found if words]


@dataclass
class Stage:
    """One build stage: its base image, name, arguments in scope, and its instructions."""

    base: str
    name: str | None
    args: dict[str, str]
    steps: list[tuple[str, str]] = field(default_factory=list)

    def values(self, keyword: str) -> list[str]:
        """The arguments of every `keyword` instruction, build arguments substituted."""
        return [substitute(v, self.args) for k, v in self.steps if k == keyword]

    def env(self) -> dict[str, str]:
        """The ENV variables the stage sets (KEY=VALUE form), in order of declaration."""
        variables: dict[str, str] = {}
        for value in self.values("ENV"):
            for word in shlex.split(value):
                key, _, val = word.partition("=")
                variables[key] = substitute(val, {**self.args, **variables})
        return variables

    def run_commands(self) -> list[list[str]]:
        """Every simple command that the stage's RUN instructions execute."""
        return [c for script in self.values("RUN") for c in commands(script)]

    def copies(self) -> list[tuple[list[str], str]]:
        """`(sources, destination)` of every COPY (flags such as --chown dropped)."""
        result = []
        for value in self.values("COPY"):
            words = [w for w in shlex.split(value) if not w.startswith("--")]
            result.append((words[:-1], words[-1]))
        return result

    def cmd(self) -> list[str] | None:
        """The last CMD in exec form, or None."""
        cmds = self.values("CMD")
        return json.loads(cmds[-1]) if cmds else None


def stages(text: str, **build_args: str) -> list[Stage]:
    """The stages of a Dockerfile, built with `build_args` over the ARG defaults."""
    global_args: dict[str, str] = {}
    result: list[Stage] = []
    for keyword, value in instructions(text):
        if keyword == "ARG":
            name, _, default = value.partition("=")
            scope = result[-1].args if result else global_args
            scope[name] = build_args.get(name, global_args.get(name, default))
        elif keyword == "FROM":
            image, _, name = substitute(value, global_args).partition(" AS ")
            result.append(Stage(image.strip(), name.strip() or None, {}))
        elif result:
            result[-1].steps.append((keyword, value))
        else:
            raise ValueError(f"{keyword} before the first FROM")
    return result


def pip_installs(command_list: list[list[str]]) -> list[tuple[list[str], dict[str, str]]]:
    """`(requirements, options)` of every `pip install` (or `python -m pip install`)."""
    found = []
    for words in command_list:
        if words[:3] in (["python", "-m", "pip"], ["python3", "-m", "pip"]):
            words = ["pip", *words[3:]]
        if words[:1] not in (["pip"], ["pip3"]) or "install" not in words:
            continue
        args = words[words.index("install") + 1:]
        requirements, options, i = [], {}, 0
        while i < len(args):
            if args[i].startswith("--") and "=" in args[i]:
                key, _, val = args[i].partition("=")
                options[key] = val
            elif args[i] in ("--index-url", "-i", "--extra-index-url", "-r", "-c"):
                options[args[i]] = args[i + 1]
                i += 1
            elif args[i].startswith("-"):
                options[args[i]] = ""
            else:
                requirements.append(args[i])
            i += 1
        found.append((requirements, options))
    return found
