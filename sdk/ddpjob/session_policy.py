"""What a session decides for the jobs it runs, answered from its backend's policy value
(`backends.Backend`: instance types, image, role, URI schemes, polling) and the one thing a
session must say itself, `default_output_path` (mixed into `BaseSession`; pure: nothing here
creates or sends anything).
"""

from __future__ import annotations

import abc
from typing import TYPE_CHECKING, TypeVar

from ddpjob_runtime.shared import storage

from ddpjob.errors import UserInputError

if TYPE_CHECKING:  # pragma: no cover
    from ddpjob.backends import Backend
    from ddpjob.config import Config

_Session = TypeVar("_Session", bound="SessionPolicy")


class SessionPolicy(abc.ABC):
    """A session's policy: its backend's value, and its default output folder."""

    @property
    @abc.abstractmethod
    def backend(self) -> Backend:
        """The backend's policy: its line of the registry (`ddpjob.backends`), which a backend
        gives as a class attribute (`backend = backends.LOCAL`)."""

    @abc.abstractmethod
    def default_output_path(self) -> str:
        """Where outputs go when the estimator names no `output_path` (a folder URI). Pure: a
        default bucket is created only when a job that uses it is submitted."""

    @classmethod
    def from_config(cls: type[_Session], config: Config) -> _Session:
        """The session a config file describes (the CLI's); a backend that takes nothing from
        the file is made with no arguments."""
        return cls()

    @property
    def where(self) -> str:
        """Where this session's jobs are, for messages."""
        return f"{self.backend.label} jobs"

    @property
    def region_name(self) -> str | None:
        """The AWS region the session talks to, when there is one."""
        return None

    def resolve_role(self, role: str | None) -> str:
        """The RoleArn of a job given the estimator's `role` (UserInputError when required)."""
        return self.backend.resolve_role(role)

    def input_prefix(self, job_name: str) -> str | None:
        """Where local input data of `job_name` is uploaded: `<default output>/<job>/input`;
        None: the hosts read it in place."""
        if self.backend.inputs_in_place:
            return None
        return storage.join(self.default_output_path(), job_name, "input")

    def check_location(self, uri: str, argument: str) -> str:
        """`uri` as this backend's requests name it; UserInputError unless its hosts can reach
        the folder URI `uri`."""
        schemes = self.backend.storage_schemes
        if ("s3" if uri.startswith("s3://") else "file") not in schemes:
            allowed = " or ".join(f"{s}://" for s in sorted(schemes))
            raise UserInputError(f"{argument} {uri!r}: {self.backend.label} jobs need an "
                                 f"{allowed} URI")
        return uri
