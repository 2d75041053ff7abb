"""``skillog replay``: prove a session's prompts from its log, re-drive it, audit it.

Exit codes: 0 every request (and the re-drive) matches; 1 the first divergence, with a
diff (or the re-drive's first differing event); 2 the log cannot be replayed (a missing
session, a broken chain or checkpoint, a missing or altered blob, a damaged export, an
event type from a newer version), with a message naming the session, seq and problem.
With ``--html`` a broken log is a failed check in the report written: 0 the verdict
holds, 1 it does not, 2 nothing to report on (no such session, an unwritable path).
"""

from __future__ import annotations

import argparse
import functools
import importlib.metadata
import sys

import msgspec
import trio

from eventlog import (
    DB_HELP,
    EventStore,
    SkillogError,
    VerifyReport,
    default_db,
    inert_json,
    visible,
    write_file,
)
from eventlog._cli import add_trust_arguments, report_json, tofu_notice, trusted_keys
from eventlog._progress import Progress

from ._audit import audit_session
from ._errors import BrokenLogError, UnverifiedLogError
from ._fork import check_fork_link, fork_session
from ._html import render_html
from ._prove import ReplayReport, TurnCheck, replay_session
from ._recording import archived_checkpoint, load_recording, open_log, verify_recording
from ._redrive import RedriveReport, redrive
from ._request import RecordedRequests
from ._reuse import PrefixReuse, prefix_reuse
from ._skills import Drift, drift
from ._timeline import render_timeline, timeline


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Register the ``replay`` arguments on ``parser``."""
    parser.add_argument("session", help="the session id (see `skillog sessions`)")
    source = parser.add_mutually_exclusive_group()
    source.add_argument("--db", help=f"{DB_HELP}; opened read-only")
    source.add_argument("--jsonl", help="replay from a JSON Lines export instead of a database")
    parser.add_argument(
        "--archive",
        metavar="FILE",
        help="replay from an archive written by `skillog log archive`: its chains and its "
        "signed checkpoint (signer: --key, or --tofu) are verified first; with --db the "
        "live log's tombstone of the session must match it",
    )
    add_trust_arguments(parser)  # --checkpoint: verify the whole log against it first
    parser.add_argument(
        "--against-disk",
        nargs="+",
        metavar="DIR",
        help="also report drift: each skill the session used vs the same-named skill "
        "found under these directories now",
    )
    parser.add_argument(
        "--redrive",
        action="store_true",
        help="also run the current runtime code against the recorded model responses and "
        "effects, and compare every event it produces with the recording",
    )
    parser.add_argument(
        "--timeline",
        action="store_true",
        help="print the audit timeline (activations, reads, scripts, denials, approvals, "
        "model calls) instead of replaying",
    )
    parser.add_argument(
        "--json",
        action="store_true",
        help="one JSON document: the proof (session, events, ok, request_bytes, turns with "
        "their hashes and ok, divergence, fork, drift, redrive, and verdict: what `log "
        "verify --json` says of this session; only session, ok and verdict when it does "
        "not verify), or with --timeline the timeline (session, entries)",
    )
    parser.add_argument(
        "--html",
        metavar="FILE",
        help="write the audit report to FILE: one self-contained HTML page with the "
        "verdict (every check, failed ones included), the timeline and every prompt; "
        "exits 1 when the verdict fails",
    )
    parser.add_argument(
        "--fork-at",
        type=int,
        metavar="SEQ",
        help="start a new session in --db whose log begins with this session's events up "
        "to SEQ; prints its id",
    )


def run(args: argparse.Namespace) -> int:
    """Run ``skillog replay``; returns the exit code."""
    problem = _conflict(args)
    if problem:
        print(f"skillog replay: error: {problem}", file=sys.stderr)
        return 2
    try:
        code: int = trio.run(_replay, args)
    except BrokenLogError:
        raise
    except SkillogError as e:  # the store or the file itself: say which session we tried
        raise BrokenLogError(args.session, None, str(e)) from e
    return code


def _conflict(args: argparse.Namespace) -> str | None:
    if args.json and (args.html or args.fork_at is not None):
        return "--json goes with the proof or --timeline, not --html or --fork-at"
    modes = [m for m in ("timeline", "fork_at", "html") if getattr(args, m) not in (None, False)]
    if len(modes) > 1 or (modes and modes != ["html"] and (args.redrive or args.against_disk)):
        return (
            "--timeline, --fork-at and --html are views of their own; give one (--timeline "
            "and --fork-at without --redrive or --against-disk)"
        )
    if args.archive and (args.jsonl or args.checkpoint or args.fork_at is not None):
        return (
            "--archive carries its own signed checkpoint: give it without --jsonl and "
            "--checkpoint (and without --fork-at: import the archive first)"
        )
    if args.fork_at is not None and args.jsonl:
        return (
            "--fork-at writes the new session into a database: import the export first "
            "(`skillog log import`) and use --db"
        )
    return None


async def _replay(args: argparse.Namespace) -> int:
    db = None if args.jsonl or args.archive else (args.db or default_db())
    writable = args.fork_at is not None
    keys, tofu = trusted_keys(args)
    signed = None
    if args.archive:
        signed = [await archived_checkpoint(args.archive, args.session, keys, tofu, args.db)]
    async with open_log(
        db=db, jsonl=args.jsonl, archive=args.archive, writable=writable, session=args.session
    ) as store:
        if args.html:
            return await _write_report(store, args, keys, tofu)
        try:
            verdict = await verify_recording(
                store,
                args.session,
                checkpoint=args.checkpoint,
                signed=signed,
                keys=keys,
                tofu=tofu,
            )
        except UnverifiedLogError as e:
            try:  # an event this code cannot read says more (upgrade skillog) than a rule
                await load_recording(store, args.session)
            except BrokenLogError as unreadable:
                e.add_note(str(unreadable))
            return _print_unverified(args, e)
        recording = await load_recording(store, args.session)
        (sys.stderr if args.json else sys.stdout).write(tofu_notice(verdict.tofu_key))
        if args.timeline:
            entries = timeline(recording)
            if args.json:
                doc = {"session": args.session, "entries": entries}
                sys.stdout.write(inert_json(msgspec.json.encode(doc).decode()) + "\n")
            else:
                for line in render_timeline(entries):
                    print(visible(line))
            return 0
        if args.fork_at is not None:
            new_id = await fork_session(store, recording, args.fork_at)
            print(new_id)
            print(
                f"forked from {visible(args.session)} at seq {args.fork_at} "
                f"({args.fork_at + 1} events copied); continue it with "
                f"`skillog resume {new_id} --db {visible(str(db))}`",
                file=sys.stderr,
            )
            return 0
        link = await check_fork_link(store, recording)
        if link is not None:
            if link.ok is False:
                raise BrokenLogError(args.session, 0, f"session.forked: {link.detail}")
            if not args.json:
                print(
                    visible(
                        link.detail
                        if link.ok
                        else f"fork of {link.parent}@{link.at_seq}: {link.detail}"
                    )
                )
        progress = Progress("events proved", len(recording), enabled=not args.json)
        try:
            recorded = RecordedRequests()
            report = await replay_session(store, recording, recorded=recorded, progress=progress)
        finally:
            progress.close()
        reuse = prefix_reuse(recording, recorded)
        drifted = await drift(recording, args.against_disk) if args.against_disk else None
        result = await redrive(store, recording) if args.redrive else None
        code = 0 if report.ok and (result is None or result.ok) else 1
        if args.json:
            doc = {
                **msgspec.to_builtins(report),
                "ok": report.ok,
                "verdict": report_json(verdict, grammar=True),
                "turns": [{**msgspec.to_builtins(t), "ok": t.ok} for t in report.turns],
                "fork": None if link is None else msgspec.to_builtins(link),
                "drift": None if drifted is None else msgspec.to_builtins(drifted),
                "redrive": None if result is None else msgspec.to_builtins(result),
                "prefix_reuse": msgspec.to_builtins(reuse),
            }
            sys.stdout.write(inert_json(msgspec.json.encode(doc).decode()) + "\n")
            return code
        _print_report(report, checkpoint=args.checkpoint is not None, archive=bool(args.archive))
        _print_reuse(reuse)
        if drifted is not None:
            _print_drift(drifted)
        if result is not None:
            _print_redrive(result)
        return code


async def _write_report(
    store: EventStore, args: argparse.Namespace, keys: frozenset[str], tofu: bool
) -> int:
    """``--html``: audit, write the page, print the verdict's rows; 1 when it fails."""
    audit = await audit_session(
        store,
        args.session,
        checkpoint=args.checkpoint,
        keys=keys,
        tofu=tofu,
        against_disk=args.against_disk,
        redrive=args.redrive,
    )
    version = importlib.metadata.version("skillog")
    page = render_html(audit, generator=f"skillog {version}")
    data = page.encode()
    await trio.to_thread.run_sync(
        functools.partial(write_file, args.html, data, what="report", option="--html")
    )
    for check in audit.checks:
        print(f"{check.mark} {check.name:<10} {visible(check.details)}")
    verdict = "proven" if audit.ok else "NOT PROVEN"
    print(f"verdict: {verdict}; report written to {visible(str(args.html))} ({len(data):,} bytes)")
    return 0 if audit.ok else 1


def _print_unverified(args: argparse.Namespace, error: UnverifiedLogError) -> int:
    """The verdict does not hold: every fault (as ``log verify`` lists them), exit 2."""
    report: VerifyReport = error.report
    if args.json:
        doc = {"session": args.session, "ok": False, "verdict": report_json(report, grammar=True)}
        sys.stdout.write(inert_json(msgspec.json.encode(doc).decode()) + "\n")
    else:
        # Nothing proven, nothing on stdout: one line names the first fault and the
        # kinds of the others (``log verify`` lists them all).
        notes = "".join(f"; {note}" for note in getattr(error, "__notes__", ()))
        line = visible(f"skillog replay: error: {error}{notes}")
        sys.stderr.write(f"{tofu_notice(report.tofu_key)}{line}\n")
    return 2


def _print_report(report: ReplayReport, *, checkpoint: bool, archive: bool = False) -> None:
    verified = "chain and checkpoint verified" if checkpoint else "chain verified"
    if archive:
        verified = "archive chain and signed checkpoint verified"
    print(f"session {visible(report.session)}: {report.events} events, {verified}")
    for turn in report.turns:
        print(visible(_turn_line(turn)))
    if report.divergence is not None:
        d = report.divergence
        print()
        print(
            f"first divergence at turn {d.turn} (seq {d.seq}): recorded request "
            f"{d.request_hash[:16]}, re-rendered {d.rerendered_hash[:16]}"
        )
        print(visible(d.diff, lines=True))
        print()
    matched = sum(t.ok for t in report.turns)
    total = len(report.turns)
    if report.ok:
        print(
            f"{total} turns: every request reproduced byte for byte "
            f"({report.request_bytes:,} request bytes re-rendered)"
        )
    else:
        assert report.divergence is not None
        print(
            f"{total} turns: {matched} match, {total - matched} differ; first divergence at "
            f"turn {report.divergence.turn} (seq {report.divergence.seq})"
        )


def _print_reuse(reuse: PrefixReuse) -> None:
    if reuse.mean is None or reuse.min is None:
        return
    breaks = ", ".join(
        f"turn {b.turn} ({b.where}{', compacted' if b.compacted else ''})" for b in reuse.breaks
    )
    print(
        f"prefix reuse (bytes repeated from the previous request, in cache order): mean "
        f"{reuse.mean:.1%}, min {reuse.min:.1%}; "
        + (f"{len(reuse.breaks)} breaks: {breaks}" if reuse.breaks else "no breaks")
    )


def _turn_line(turn: TurnCheck) -> str:
    skills = " ".join(f"{name}@{h[:12]}" for name, h in turn.skills) or "(no skills)"
    mark = "✓" if turn.ok else f"✗ re-rendered {turn.rerendered_hash[:12]}"
    return (
        f"turn {turn.turn:>3}  seq {turn.seq:>5}  {skills:<40}  "
        f"request {turn.request_hash[:12]}  {mark}"
    )


def _print_drift(entries: list[Drift]) -> None:
    print()
    print("drift against disk:")
    for d in entries:
        line = f"  {d.name:<24} sha256:{d.recorded_hash[:12]}  {d.status:<10}"
        if d.status == "changed":
            assert d.disk_hash is not None
            files = ", ".join(f"{c.change} {c.path}" for c in d.changes)
            line += f" now sha256:{d.disk_hash[:12]} at {d.path}: {files}"
        elif d.status == "same":
            line += f" at {d.path}"
        elif d.status == "unreadable":
            line += f" at {d.path}: {d.problem}"
        print(visible(line))


def _print_redrive(result: RedriveReport) -> None:
    print()
    if result.divergence is None:
        note = "" if result.complete else " (the recording never ended; compared up to its end)"
        print(f"re-drive: the current code reproduces all {result.compared} events ✓{note}")
    else:
        print(f"re-drive ✗ {visible(str(result.divergence))}")
