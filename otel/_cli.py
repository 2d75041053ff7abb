"""``skillog otel``: export recorded sessions as traces, and summarize their metrics.

Exit codes: 0 success; 2 the database, a session, the state file or the endpoint could
not be used (the message says which and what to do); 130 interrupted.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import msgspec
import trio

from eventlog import (
    DB_HELP,
    EventStore,
    default_db,
    describe_db,
    inert_json,
    load_archive,
    load_trusted_keys,
    open_store,
    visible,
)
from eventlog._progress import Progress
from orchestrator import verdict

from ._errors import OtelError
from ._export import ExportOptions, export_sessions, follow_export, summarize_log
from ._otlp import otlp_exporter, traces_url
from ._state import default_state_path, load_state
from ._summary import render_text, to_json


def _positive(value: str) -> float:
    try:
        number = float(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{value!r} is not a number") from None
    if not number > 0:
        raise argparse.ArgumentTypeError(f"{value!r} must be greater than 0")
    return number


def _count(value: str) -> int:
    if not value.isdigit():
        raise argparse.ArgumentTypeError(f"{value!r} is not a whole number >= 0")
    return int(value)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Register ``export`` and ``metrics``."""
    sub = parser.add_subparsers(dest="otel_command", metavar="ACTION", required=True)

    export = sub.add_parser(
        "export",
        help="send sessions' spans to an OTLP/HTTP endpoint",
        description=(
            "Send the spans of recorded sessions to an OTLP/HTTP (protobuf) endpoint, with "
            "the recorded timestamps and ids derived from the log, so exporting twice (or "
            "after live export) gives the same ids. Verifies each session's hash chain "
            "first. Progress is saved, so a failed export resumes where it stopped."
        ),
    )
    export.add_argument("sessions", nargs="*", metavar="SESSION", help="session ids to export")
    export.add_argument(
        "--all", action="store_true", help="every finished session not yet exported"
    )
    export.add_argument(
        "--follow",
        action="store_true",
        help="keep running: tail the log and export each session when it ends",
    )
    export.add_argument(
        "--endpoint",
        metavar="URL",
        help="OTLP/HTTP base URL; spans go to URL/v1/traces (default: "
        "$OTEL_EXPORTER_OTLP_TRACES_ENDPOINT, $OTEL_EXPORTER_OTLP_ENDPOINT or "
        "http://localhost:4318)",
    )
    export.add_argument(
        "--content",
        action="store_true",
        help="include prompts, responses and tool arguments/results (off by default: "
        "they may hold sensitive data)",
    )
    export.add_argument(
        "--timeout",
        type=_positive,
        default=10.0,
        metavar="SECONDS",
        help="bound on each export attempt (default 10)",
    )
    export.add_argument(
        "--retries",
        type=_count,
        default=3,
        metavar="N",
        help="extra attempts per batch, with exponential backoff from 0.5 s (default 3)",
    )
    export.add_argument(
        "--state",
        type=Path,
        metavar="PATH",
        help="export progress file (default: DB.otel-state.json)",
    )
    export.add_argument(
        "--json",
        action="store_true",
        help="print the report as JSON: sessions, spans, already_exported, open_sessions, "
        "endpoint (with --follow: one {session, spans} object per line)",
    )
    export.add_argument("--db", default=default_db(), help=DB_HELP)
    export.add_argument(
        "--archive",
        metavar="FILE",
        help="export archived sessions from an archive written by `skillog log archive` "
        "instead of --db: the whole file and its signed checkpoint (signer: --key, or "
        "--tofu) are verified first; the same spans and ids as from the live log "
        "(progress: FILE.otel-state.json unless --state)",
    )
    export.add_argument(
        "--key",
        type=Path,
        metavar="FILE",
        help="with --archive: the checkpoint signer's public key (PEM) or a trusted-keys file",
    )
    export.add_argument(
        "--tofu",
        action="store_true",
        help="with --archive: trust the key the archive names (proves nothing against "
        "whoever could rewrite the file)",
    )

    metrics = sub.add_parser(
        "metrics",
        help="summarize skill and session metrics from the log",
        description=(
            "Count activations, activation failures, resource reads, script runs and "
            "failures, policy denials, model calls and tokens, per session and per skill."
        ),
    )
    metrics.add_argument("sessions", nargs="*", metavar="SESSION", help="session ids")
    metrics.add_argument("--all", action="store_true", help="every session in the log")
    metrics.add_argument("--json", action="store_true", help="print JSON instead of text")
    metrics.add_argument("--db", default=default_db(), help=DB_HELP)


def _selection(args: argparse.Namespace) -> list[str] | None:
    if args.sessions and args.all:
        raise OtelError("give session ids or --all, not both")
    if not args.sessions and not args.all and not getattr(args, "follow", False):
        raise OtelError("name the sessions to use, or pass --all")
    return args.sessions or None


async def _export(args: argparse.Namespace) -> int:
    sessions = _selection(args)
    if args.follow and sessions:
        raise OtelError("--follow exports every session as it ends; do not name sessions")
    if args.archive is None and (args.key is not None or args.tofu):
        raise OtelError("--key and --tofu are for --archive (the archive's signed checkpoint)")
    if args.archive is not None and args.follow:
        raise OtelError("--follow tails a live log; an archive does not change: drop --follow")
    url = traces_url(args.endpoint)
    state_path = args.state or default_state_path(args.archive or args.db)
    state = load_state(state_path)
    options = ExportOptions(
        content=args.content, retries=args.retries, state_path=state_path, endpoint=url
    )
    exporter = otlp_exporter(url, timeout_s=args.timeout)
    try:
        async with _source(args) as store:
            if args.follow:
                if not args.json:
                    where = describe_db(args.db)
                    print(f"following {where}; exporting sessions to {url} as they end")

                def exported(session: str, spans: int) -> None:
                    line = f"exported session {visible(session)} ({spans} spans)"
                    if args.json:
                        doc = {"session": session, "spans": spans}
                        line = inert_json(msgspec.json.encode(doc).decode())
                    print(line, flush=True)

                await follow_export(
                    store, exporter, state=state, options=options, on_export=exported
                )
                return 0
            progress = Progress("sessions read", len(sessions or ()), enabled=not args.json)
            try:
                report = await export_sessions(
                    store,
                    exporter,
                    sessions=sessions,
                    state=state,
                    options=options,
                    progress=progress,
                )
            finally:
                progress.close()
    finally:
        exporter.shutdown()
    if args.json:
        doc = {**msgspec.structs.asdict(report), "endpoint": url}
        print(inert_json(msgspec.json.encode(doc).decode()))
        return 0
    line = f"exported {report.sessions} sessions ({report.spans} spans) to {url}"
    if report.already_exported:
        line += f"; {report.already_exported} already exported"
    if report.open_sessions:
        waiting = visible(", ".join(report.open_sessions))
        line += f"; {len(report.open_sessions)} not ended yet: {waiting}"
    print(line)
    return 0


@asynccontextmanager
async def _source(args: argparse.Namespace) -> AsyncIterator[EventStore]:
    """The store to export from: the live log, or the archive ``--archive`` loaded
    into memory once the verdict on it (every chain, the grammar, every blob, the
    signed heads against the trusted key) holds."""
    if args.archive is None:
        async with open_store(args.db, readonly=True) as store:
            yield store
        return
    if args.key is None and not args.tofu:
        raise OtelError(
            f"--archive {args.archive}: no trusted key for its signed checkpoint; pass --key "
            "FILE (the signer's public key or a trusted-keys file), or --tofu to trust the "
            "key the archive names"
        )
    keys = load_trusted_keys(args.key) if args.key is not None else frozenset()
    store, cp = await load_archive(args.archive)
    report = await verdict(store, checkpoints=[cp], keys=keys, tofu=args.tofu)
    if not report.ok:
        raise OtelError(
            f"--archive {args.archive}: does not verify ({visible(str(report.faults[0]))}); "
            "nothing was exported"
        )
    yield store


async def _metrics(args: argparse.Namespace) -> int:
    sessions = _selection(args)
    async with open_store(args.db, readonly=True) as store:
        summary = await summarize_log(store, sessions)
    if args.json:
        sys.stdout.write(inert_json(to_json(summary).decode()) + "\n")
    else:
        sys.stdout.write(render_text(summary))
    return 0


def run(args: argparse.Namespace) -> int:
    """Run ``skillog otel ACTION``; library errors reach the dispatcher as SkillogError."""
    action = _export if args.otel_command == "export" else _metrics
    return trio.run(action, args)
