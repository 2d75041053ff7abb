"""``skillog approvals``, ``skillog approve`` and ``skillog deny``: the human in the loop,
from any process. A decision is an event in the session's log; ``skillog resume``
continues the session. ``skillog approvals answer`` answers an MCP server's form
(``_forms``): the waiting session takes the answer from the log."""

from __future__ import annotations

import argparse
import getpass
import time

import msgspec
import trio

from eventlog import inert_json, open_sqlite_store, visible

from .._approvals import decide_approval, pending_approvals
from .._catalog import SESSIONS
from .._fleet import holder
from .._forms import FormAnswerError, PendingForm, answer_form, pending_forms
from .._session_list import age, when
from .._views import AUDIT_VIEWS
from ._session import add_db


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_db(parser)
    if parser.prog.split()[-1] == "approvals":
        parser.add_argument(
            "target",
            nargs="*",
            metavar="SESSION | answer SESSION CALL",
            help="only this session's requests; or `answer SESSION CALL` to answer the "
            "pending MCP form of that call (with --accept --set FIELD=VALUE... or --decline)",
        )
        parser.add_argument("--json", action="store_true", help="one JSON object per line")
        answer = parser.add_argument_group("answering a form (approvals answer SESSION CALL)")
        choice = answer.add_mutually_exclusive_group()
        choice.add_argument("--accept", action="store_true", help="fill in the form")
        choice.add_argument("--decline", action="store_true", help="refuse to fill it in")
        answer.add_argument(
            "--set",
            action="append",
            default=[],
            metavar="FIELD=VALUE",
            help="a field's value (repeat; a multi-select takes VALUE,VALUE)",
        )
        answer.add_argument(
            "--index", type=int, help="which form of the call (when it asked several)"
        )
        answer.add_argument("--by", help="who answers (recorded; default: the OS user name)")
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
    if args.command != "approvals":
        return trio.run(_decide, args)
    target = args.target
    if target[:1] == ["answer"]:
        if len(target) != 3:
            raise FormAnswerError(
                "usage: skillog approvals answer SESSION CALL (--accept --set FIELD=VALUE... "
                "| --decline)"
            )
        return trio.run(_answer, args, target[1], target[2])
    if len(target) > 1:
        raise FormAnswerError(
            "`skillog approvals` takes one session id; to answer a form: "
            "`skillog approvals answer SESSION CALL`"
        )
    if args.accept or args.decline or args.set:
        raise FormAnswerError("--accept, --decline and --set answer a form: `approvals answer`")
    args.session = target[0] if target else None
    return trio.run(_list, args)


async def _answer(args: argparse.Namespace, session: str, call: str) -> int:
    if args.accept == args.decline:
        raise FormAnswerError("say --accept (with --set FIELD=VALUE...) or --decline")
    if args.decline and args.set:
        raise FormAnswerError("a declined form takes no values: drop --set")
    values: dict[str, str] = {}
    for item in args.set:
        name, eq, value = item.partition("=")
        if not eq or not name:
            raise FormAnswerError(f"--set {item[:60]!r}: write FIELD=VALUE")
        if name in values:
            raise FormAnswerError(f"--set names the field {name[:60]!r} twice")
        values[name] = value
    async with open_sqlite_store(args.db, migrations=[AUDIT_VIEWS], projection=SESSIONS) as store:
        answer, _ = await answer_form(
            store,
            session,
            call,
            action="accept" if args.accept else "decline",
            values=values,
            decided_by=args.by or getpass.getuser(),
            index=args.index,
        )
    print(
        visible(
            f"{answer.action.rstrip('e')}ed form {answer.index} of call {call} of session "
            f"{session} (by {answer.decided_by}); the session takes the answer while it "
            "waits, or when the server asks the same form again"
        )
    )
    return 0


def _form_json(form: PendingForm) -> str:
    return inert_json(msgspec.json.encode({"kind": "form", **msgspec.to_builtins(form)}).decode())


def _print_forms(forms: list[PendingForm], now: int) -> None:
    for f in forms:
        ago = age(now - f.requested_at)
        print(
            visible(
                f"{f.session_id} {f.call_id}  form {f.index} from MCP server {f.server}, {ago} ago"
            )
        )
        print(f"    {visible(f.message[:200])}")
        required = set(f.schema.get("required", []))
        for name, field in f.schema.get("properties", {}).items():
            kind = field.get("type", "?")
            choices = field.get("enum") or (field.get("items") or {}).get("enum")
            extra = f" one of {', '.join(map(str, choices))}" if choices else ""
            need = ", required" if name in required else ""
            line = f"    - {str(name)[:80]} ({kind}{need}){extra[:200]}"
            print(visible(line))


async def _list(args: argparse.Namespace) -> int:
    async with open_sqlite_store(args.db, readonly=True) as store:
        pending = await pending_approvals(store, args.session)
        forms = await pending_forms(store, args.session)
    if args.json:
        for item in pending:
            print(inert_json(msgspec.json.encode(item).decode()))
        for form in forms:
            print(_form_json(form))
        return 0
    now = time.time_ns()
    if forms:
        _print_forms(forms, now)
        print(
            f"\n{len(forms)} form(s) pending; answer with `skillog approvals answer SESSION "
            "CALL --accept --set FIELD=VALUE...` or `--decline`\n"
        )
    if not pending:
        print("no pending approval requests")
        return 0
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
        driver = await holder(store, args.session, time.time_ns())
    verdict = "approved" if decision.approved else "denied"
    if args.remember and decision.decided_by != "expired":
        verdict += f" and remembered ({args.remember})"
    print(
        visible(
            f"{verdict} call {args.call} of session {args.session} (by {decision.decided_by}); "
            + (
                f"continue it with `skillog resume {args.session} --db {args.db}`"
                if driver is None
                else f"its driver takes it now ({driver[0]})"
            )
        )
    )
    return 0
