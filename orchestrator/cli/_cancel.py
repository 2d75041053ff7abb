"""``skillog cancel``: end a session as ``cancelled`` from any process, as the
service's cancel does (``orchestrator._cancel``): each open call resolved by its effect
class, calls the model asked for that never started closed as such, then
``session.ended``. A session another driver holds a live lease on is refused: stop that
driver (or cancel through the service whose worker drives it)."""

from __future__ import annotations

import argparse
import getpass

import trio

from eventlog import visible

from .._cancel import cancel_session
from .._catalog import open_log
from ._session import add_db


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_db(parser)
    parser.add_argument("session", help="the session id (see `skillog sessions`)")
    parser.add_argument("--reason", default="", help="why (recorded with the end)")
    parser.add_argument(
        "--by", default=None, help="who cancels (recorded; default: the OS user name)"
    )


def run(args: argparse.Namespace) -> int:
    return trio.run(_cancel, args)


async def _cancel(args: argparse.Namespace) -> int:
    async with open_log(args.db) as store:
        ended = await cancel_session(
            store, args.session, by=args.by or getpass.getuser(), reason=args.reason
        )
    print(visible(f"cancelled session {args.session}: {ended.error}"))
    return 0
