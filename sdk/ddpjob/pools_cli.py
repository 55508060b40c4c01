"""`ddpjob pools list|stop [NAME|--all]`: the local home's warm pools (the backend is imported
only when the command runs)."""

from __future__ import annotations

import argparse

from ddpjob.config import Config
from ddpjob.errors import UserInputError


def add_parser(commands: argparse._SubParsersAction, config_help: str) -> None:
    """The `pools` subcommand."""
    parser = commands.add_parser("pools", help="list or stop the local warm pools",
                                 description="The warm pools that local jobs with "
                                             "keep_alive_period_in_seconds leave.")
    parser.add_argument("pools_command", choices=("list", "stop"))
    parser.add_argument("pool", nargs="?", help="the pool to stop (see `ddpjob pools list`)")
    parser.add_argument("--all", action="store_true", help="stop every pool that has not ended")
    parser.add_argument("--config", help=config_help)


def run(args: argparse.Namespace, config: Config) -> int:
    """List the pools, one a line, or stop the one named (or --all)."""
    from ddpjob.local.session import LocalSession

    session = LocalSession.from_config(config)
    if args.pools_command == "list":
        for pool in session.warm_pools():
            line = (f"{pool['Name']}  {pool['Status']:<10}  {pool['InstanceCount']} x "
                    f"{pool['InstanceType']}  job {pool['Job']}")
            if pool["ExpiresInSeconds"] is not None:
                line += f"  expires in {pool['ExpiresInSeconds']} s"
            print(f"{line}  ({pool['Reason']})" if "Reason" in pool else line)
        return 0
    if bool(args.pool) == args.all:
        raise UserInputError("pools stop: name one pool, or --all")
    names = [args.pool] if args.pool else [
        p["Name"] for p in session.warm_pools() if p["Status"] != "Terminated"]
    for name in names:
        session.stop_warm_pool(name)
        print(f"{name}: stopping")
    return 0
