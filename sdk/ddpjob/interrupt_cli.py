"""`ddpjob interrupt JOB [--host HOST] [--no-notice]`: rehearse what the cloud does to a local
job (docs/spot.md); the backend is imported only when the command runs."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

from ddpjob import backends
from ddpjob.config import Config
from ddpjob.errors import UserInputError

if TYPE_CHECKING:  # pragma: no cover
    from ddpjob.base_session import BaseSession
    from ddpjob.local.session import LocalSession


def add_parser(commands: argparse._SubParsersAction, config_help: str) -> None:
    """The `interrupt` subcommand."""
    parser = commands.add_parser(
        "interrupt", help="interrupt a running local job (a spot reclaim, or a lost host)",
        description="Reclaim a spot job's capacity: SIGTERM, 120 s, SIGKILL, then the job "
                    "restarts from its checkpoints while max_wait allows. --no-notice: lose a "
                    "host of any job (SIGKILL): it fails, or is retried (max_retry_attempts).")
    parser.add_argument("name", metavar="JOB")
    parser.add_argument("--host", help="the host to interrupt, e.g. algo-2 (default: every "
                                       "host; with --no-notice the last host)")
    parser.add_argument("--no-notice", dest="notice", action="store_false",
                        help="lose the host without notice (SIGKILL) instead of a spot reclaim")
    parser.add_argument("--config", help=config_help)


def run(args: argparse.Namespace, config: Config) -> int:
    """Interrupt the job; one line says what was asked."""
    from ddpjob.local.session import LocalSession

    session = LocalSession.from_config(config)
    args.where = session.where
    session.interrupt(args.name, host=args.host, notice=args.notice)
    hosts = args.host or ("every host" if args.notice else "the last host")
    what = "spot interruption" if args.notice else "lost host, no notice"
    print(f"{args.name}: {what} ({hosts}) asked for")
    return 0


def rehearsing(session: BaseSession, items: object, spec: str) -> LocalSession:
    """The session that runs a job spec's `interruptions:` (a local one only)."""
    from ddpjob.local.base import interruptions
    from ddpjob.local.session import LocalSession

    if not isinstance(session, LocalSession):
        raise UserInputError(f"job spec {spec}: interruptions are rehearsed on local jobs only "
                             f"(backend {backends.LOCAL.name}, instance_type "
                             f"{backends.LOCAL.allowed})")
    return LocalSession(session.home, interruptions=interruptions.from_spec(items,
                                                                            f"job spec {spec}"))
