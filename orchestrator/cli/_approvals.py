"""``skillog approvals``, ``skillog approve`` and ``skillog deny``: the human in the loop,
from any process. A decision is an event in the session's log; ``skillog resume``
continues the session."""

from __future__ import annotations

import argparse
import getpass
import time

import msgspec
import trio

from eventlog import inert_json, open_sqlite_store, visible

from .._approvals import decide_approval, pending_approvals
from .._catalog import SESSIONS
from .._session_list import age, when
from .._views import AUDIT_VIEWS
from ._session import add_db


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_db(parser)
    if parser.prog.split()[-1] == "approvals":
        parser.add_argument("session", nargs="?", help="only this session's requests")
        parser.add_argument("--json", action="store_true", help="one JSON object per line")
        return
    parser.add_argument("session", help="the session id (see `skillog approvals`)")
    parser.add_argument("call", help="the call id of the pending request")
    parser.add_argument("--reason", help="why (recorded with the decision)")
    parser.add_argument(
        "--by", default=None, help="who decides (recorded; default: the OS user name)"
    )
    verb = parser.prog.split()[-1]
    parser.add_argument(
        "--remember",
        metavar="skill|pattern:RULE",
        help=f"{verb} for the rest of the session too: 'skill' (every call of this "
        "skill as loaded now) or 'pattern:RULE' (the calls of this skill, or of host "
        "tools, that one allowed-tools rule matches; it must match this call), e.g. "
        "--remember 'pattern:Bash(python3 scripts/x.py:*)' (docs/policy.md)",
    )


def run(args: argparse.Namespace) -> int:
    if args.command == "approvals":
        return trio.run(_list, args)
    return trio.run(_decide, args)


async def _list(args: argparse.Namespace) -> int:
    async with open_sqlite_store(args.db, readonly=True) as store:
        pending = await pending_approvals(store, args.session)
    if args.json:
        for item in pending:
            print(inert_json(msgspec.json.encode(item).decode()))
        return 0
    if not pending:
        print("no pending approval requests")
        return 0
    now = time.time_ns()
    for p in pending:
        who = f"{p.skill} ({p.tier})" if p.skill else "host tool"
        ago = age(now - p.requested_at)
        expiry = f", expires {when(p.expires_at)} UTC" if p.expires_at is not None else ""
        print(visible(f"{p.session_id} {p.call_id}  {p.tool} for {who}, {ago} ago{expiry}"))
        print(f"    {visible(p.action[:200])}")
    print(
        f"\n{len(pending)} pending; decide with `skillog approve|deny SESSION CALL` "
        "(--remember skill|pattern:RULE: for the rest of the session)"
    )
    return 0


async def _decide(args: argparse.Namespace) -> int:
    approved = args.command == "approve"
    async with open_sqlite_store(args.db, migrations=[AUDIT_VIEWS], projection=SESSIONS) as store:
        decision = await decide_approval(
            store,
            args.session,
            args.call,
            approved=approved,
            decided_by=args.by or getpass.getuser(),
            reason=args.reason,
            remember=args.remember,
        )
    verdict = "approved" if decision.approved else "denied"
    if args.remember and decision.decided_by != "expired":
        verdict += f" and remembered ({args.remember})"
    print(
        visible(
            f"{verdict} call {args.call} of session {args.session} (by {decision.decided_by}); "
            f"continue it with `skillog resume {args.session} --db {args.db}`"
        )
    )
    return 0
