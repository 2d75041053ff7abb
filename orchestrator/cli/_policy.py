"""``skillog policy``: the policy a new session would run under (the configuration
file's ``policy:`` section, the profile and ``--policy`` over the defaults), or the one
a session recorded when it started (docs/policy.md)."""

from __future__ import annotations

import argparse

import msgspec
import trio
import yaml

from eventlog import inert_json, open_store, visible

from .._events import PolicyConfig
from ._session import _started, add_db, add_policy_arguments, session_policy


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_db(parser)
    add_policy_arguments(parser)
    parser.add_argument(
        "--session", metavar="ID", help="show the policy this session recorded instead"
    )
    parser.add_argument("--json", action="store_true", help="one JSON object")


def run(args: argparse.Namespace) -> int:
    recorded = args.session is not None
    policy = trio.run(_recorded, args) if recorded else session_policy(args)
    data = msgspec.to_builtins(policy)
    if args.json:
        print(inert_json(msgspec.json.encode(data).decode()))
    else:
        print(visible(yaml.safe_dump({"policy": data}, sort_keys=False), lines=True), end="")
    return 0


async def _recorded(args: argparse.Namespace) -> PolicyConfig:
    async with open_store(args.db, readonly=True) as store:
        return (await _started(store, args.session)).policy
