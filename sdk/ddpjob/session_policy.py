"""What a session decides for the jobs it runs: instance types, image, role, default locations,
where local inputs go, which URI schemes its hosts reach, how often to poll (mixed into
`BaseSession`; pure: nothing here creates or sends anything).
"""

from __future__ import annotations

import abc
from typing import TYPE_CHECKING, TypeVar

from ddpjob.errors import UserInputError

if TYPE_CHECKING:  # pragma: no cover
    from ddpjob.config import Config

_Session = TypeVar("_Session", bound="SessionPolicy")


class SessionPolicy(abc.ABC):
    """A session's policy; each backend's session answers it for its own jobs."""

    #: Seconds between two looks at a job that is being followed.
    poll_seconds: float = 5.0
    #: URI schemes this backend's hosts can read and write ("s3", "file").
    storage_schemes: frozenset[str] = frozenset({"s3"})
    #: What the backend's jobs are called in messages ("SageMaker", "local").
    label: str = "SageMaker"
    #: Whether a job needs a role named by the user (the CLI asks for one before anything runs).
    requires_role: bool = False

    @classmethod  # noqa: B027 - a backend may take any role
    def check_role(cls, role: str) -> None:
        """Raise UserInputError unless this backend's jobs can be given `role`."""

    @classmethod
    @abc.abstractmethod
    def from_config(cls: type[_Session], config: Config) -> _Session:
        """The session a config file describes (the CLI's)."""

    @property
    @abc.abstractmethod
    def where(self) -> str:
        """Where this session's jobs are, for messages."""

    @property
    def region_name(self) -> str | None:
        """The AWS region the session talks to, when there is one."""
        return None

    @abc.abstractmethod
    def check_instance_type(self, instance_type: str) -> None:
        """Raise UserInputError unless this backend runs `instance_type`."""

    @abc.abstractmethod
    def training_image(self, image_uri: str | None) -> str:
        """The TrainingImage of a job given the estimator's `image_uri` (UserInputError when this
        backend needs one and none is given)."""

    @abc.abstractmethod
    def resolve_role(self, role: str | None) -> str:
        """The RoleArn of a job given the estimator's `role` (UserInputError when required)."""

    @abc.abstractmethod
    def default_output_path(self) -> str:
        """Where outputs go when the estimator names no `output_path` (a folder URI). Pure: a
        default bucket is created only when a job that uses it is submitted."""

    @abc.abstractmethod
    def input_prefix(self, job_name: str) -> str | None:
        """Where local input data of `job_name` is uploaded; None: the hosts read it in place."""

    def check_location(self, uri: str, argument: str) -> str:
        """`uri` as this backend's requests name it; UserInputError unless its hosts can reach
        the folder URI `uri`."""
        scheme = "s3" if uri.startswith("s3://") else "file"
        if scheme not in self.storage_schemes:
            allowed = " or ".join(f"{s}://" for s in sorted(self.storage_schemes))
            raise UserInputError(f"{argument} {uri!r}: {self.label} jobs need an {allowed} URI")
        return uri
