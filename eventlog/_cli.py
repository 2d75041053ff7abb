"""``skillog log ...``: inspect, verify, checkpoint, export and import the event log.

Exit codes: 0 ok; 1 verify found a fault; 2 unusable input (database, file, argument).
"""

from __future__ import annotations

import argparse
import datetime
import getpass
import os
import socket
import sys
import time
from collections.abc import Awaitable, Callable, Collection
from pathlib import Path
from typing import Any, Protocol

import msgspec
import trio

from ._archive import ArchiveError
from ._archive import archive as archive_streams
from ._catalog import Projection
from ._checkpoint import (
    Checkpoint,
    CheckpointHead,
    append_checkpoint,
    generate_key,
    load_private_key,
    load_trusted_keys,
    public_hex,
    read_checkpoints,
)
from ._checkpoint import make_checkpoint as _make_checkpoint
from ._errors import CheckpointError, StoreError
from ._jsonl import encode_line, export_jsonl, import_jsonl
from ._open import DB_HELP, default_db, describe_db, is_postgres_url, open_store, sqlite_path
from ._output import output_file
from ._progress import Progress
from ._sqlite_db import vacuum
from ._terminal import inert_json, visible
from ._types import EventStore
from ._verify import VerifyReport, verify

Selector = Callable[[EventStore, int], Awaitable[list[CheckpointHead]]]
"""The heads ``log archive`` archives: those of the streams of every session that
ended before a time (ns) and nobody drives (the writing program knows what ended)."""


class Checker(Protocol):
    """The verdict ``log verify`` and ``log checkpoint`` ask for: :func:`verify` itself
    by default; the program that writes the log passes its own (skillog's runtime,
    ``orchestrator.verdict``: verify with its grammar and blob references), the same
    function every other reader of the log asks."""

    def __call__(
        self,
        store: EventStore,
        *,
        checkpoints: list[Checkpoint] | None = ...,
        keys: Collection[str] = ...,
        tofu: bool = ...,
        progress: Callable[[int], None] | None = ...,
    ) -> Awaitable[VerifyReport]: ...


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Register the ``log`` subcommands on ``parser``."""
    sub = parser.add_subparsers(dest="log_command", metavar="SUBCOMMAND", required=True)

    def cmd(name: str, help_text: str) -> argparse.ArgumentParser:
        p = sub.add_parser(name, help=help_text, description=help_text)
        if name != "keygen":
            p.add_argument(
                "--db",
                default=default_db(),
                help=DB_HELP,
            )
        return p

    p = cmd("sessions", "list the streams (sessions) with length, times and head hash")
    p.add_argument("--json", action="store_true", help="one JSON object per line")
    p = cmd("show", "print a session's events: envelope and body")
    p.add_argument("session", help="the stream id")
    p.add_argument("--json", action="store_true", help="JSON Lines (the export format)")
    p = cmd("verify", "check every hash chain (and signed checkpoints); exit 1 on a fault")
    add_trust_arguments(p)
    p.add_argument("--json", action="store_true", help="the report as one JSON object")
    p = cmd("checkpoint", "sign every stream head and append it to a checkpoint file")
    p.add_argument("--key", type=Path, required=True, help="Ed25519 private key (PEM)")
    p.add_argument("--out", type=Path, required=True, help="checkpoint file (JSON Lines)")
    p = cmd("keygen", "create an Ed25519 key pair for checkpoints (FILE and FILE.pub)")
    p.add_argument("--out", type=Path, required=True, help="private key file to create")
    p = cmd("export", "write streams as JSON Lines (all events in position order)")
    p.add_argument("streams", nargs="*", metavar="STREAM", help="only these streams")
    p.add_argument(
        "--out",
        type=Path,
        help="output file, - for stdout (the default; it must not be a terminal)",
    )
    p = cmd(
        "snapshot",
        "copy a SQLite log, live or not, into one new self-contained file for auditors",
    )
    p.add_argument("out", type=Path, metavar="OUT.db", help="the file to create (never replaced)")
    p = cmd("import", "import a JSON Lines export; all or nothing")
    p.add_argument("file", type=Path, help="the .jsonl file")
    cmd("reindex", "rebuild the session catalog (an index) from the log, in one transaction")
    p = cmd(
        "archive",
        "move ended sessions whose last event is before DATE into a signed JSON Lines "
        "archive, leaving a tombstone of each in the log",
    )
    p.add_argument(
        "--before",
        required=True,
        metavar="DATE",
        help="YYYY-MM-DD (midnight UTC) or an ISO 8601 time with its offset "
        "(2026-01-31T12:00:00Z): sessions whose last event is earlier are archived",
    )
    p.add_argument(
        "--key", type=Path, required=True, help="Ed25519 private key (PEM) that signs the archive"
    )
    p.add_argument(
        "--out",
        type=Path,
        help="archive file to create (default skillog-archive-DATE.jsonl here); never "
        "replaced: given again after an interrupted run, the run is completed",
    )
    p.add_argument(
        "--vacuum",
        action="store_true",
        help="SQLite: run VACUUM afterwards so the file shrinks (otherwise the freed pages "
        "are reused by later appends and the file keeps its size)",
    )


TRUSTED_KEYS_ENV = "SKILLOG_TRUSTED_KEYS"


def add_trust_arguments(p: argparse.ArgumentParser) -> None:
    """``--checkpoint``, ``--key`` and ``--tofu``: shared by ``log verify`` and ``replay``."""
    p.add_argument("--checkpoint", type=Path, help="signed checkpoint file to verify against")
    p.add_argument(
        "--key",
        dest="trusted_key",
        type=Path,
        help="the checkpoint signer's public key (PEM) or a trusted-keys file (one hex key "
        f"per line); default ${TRUSTED_KEYS_ENV}, else log.trusted_keys in the config file",
    )
    p.add_argument(
        "--tofu",
        action="store_true",
        help="trust on first use: accept the key the checkpoint file names (this proves "
        "nothing against whoever could rewrite that file; the output says so)",
    )


def trusted_keys(args: argparse.Namespace) -> tuple[frozenset[str], bool]:
    """The keys ``--key`` names and whether ``--tofu`` was asked for; a checkpoint with
    neither is refused (a signature by a key nobody chose proves nothing)."""
    if args.trusted_key is not None:
        return load_trusted_keys(args.trusted_key), args.tofu
    if args.checkpoint is not None and not args.tofu:
        raise CheckpointError(
            f"--checkpoint {args.checkpoint}: no trusted key; pass --key FILE (the signer's "
            f"public key or a trusted-keys file; or set ${TRUSTED_KEYS_ENV} or "
            "log.trusted_keys in the config file), or --tofu to trust the key the file names"
        )
    return frozenset(), args.tofu


def tofu_notice(key: str | None) -> str:
    """The line that says a checkpoint key was trusted on first use, not chosen."""
    return (
        f"NOTE: trusted on first use (--tofu): checkpoint key {visible(key or '')}; pin it "
        "with --key "
        "to detect a checkpoint file rewritten with another key\n"
        if key
        else ""
    )


def run(
    args: argparse.Namespace,
    *,
    checker: Checker | None = None,
    projection: Projection | None = None,
    selector: Selector | None = None,
) -> int:
    """Run the ``log`` subcommand in ``args``; returns the exit code. ``verify`` and
    ``checkpoint`` decide with ``checker`` (the writing program's verdict, which adds
    its grammar, blob references and catalog; plain :func:`verify` by default);
    ``reindex`` and ``import`` keep the catalog with ``projection``."""
    handler: Callable[[argparse.Namespace], Any] = _COMMANDS[args.log_command]
    args.checker = checker
    args.projection = projection
    args.selector = selector
    code: int = trio.run(handler, args)
    return code


async def _last_position(store: EventStore) -> int:
    """A progress total: the store's last position, when it can say cheaply."""
    last = getattr(store, "last_position", None)
    return int(await last()) if last is not None else 0


def _time(ns: int) -> str:
    t = datetime.datetime.fromtimestamp(ns / 1e9, tz=datetime.UTC)
    return t.isoformat(timespec="milliseconds").replace("+00:00", "Z")


def _out(data: str) -> None:
    sys.stdout.write(data)


def _json(value: object) -> None:
    """One JSON line; characters JSON leaves raw are escaped (:func:`inert_json`)."""
    _out(inert_json(msgspec.json.encode(value).decode()) + "\n")


async def _sessions(args: argparse.Namespace) -> int:
    async with open_store(args.db, readonly=True) as store:
        infos = await store.streams()
    for s in infos:
        if args.json:
            _json(s)
        else:
            _out(
                f"{visible(s.stream)}\t{s.length} events\t{_time(s.first_recorded_at)} .. "
                f"{_time(s.last_recorded_at)}\thead {s.head_hash[:16]}\n"
            )
    return 0


async def _show(args: argparse.Namespace) -> int:
    async with open_store(args.db, readonly=True) as store:
        if await store.head(args.session) is None:
            raise StoreError(
                f"database {describe_db(args.db)}: no session {args.session!r}; "
                "list them with `skillog log sessions`"
            )
        async for e in store.read(args.session):
            if args.json:
                _out(inert_json(encode_line(e, {}).decode()))
                continue
            try:
                body = inert_json(msgspec.json.encode(msgspec.json.decode(e.body)).decode())
            except msgspec.DecodeError:
                body = f"<{len(e.body)} bytes, not JSON>"
            _out(
                f"#{e.seq} {_time(e.recorded_at)} {visible(e.type)} (position {e.position}, "
                f"hash {e.hash[:16]})\n    {body}\n"
            )
    return 0


async def _verify(args: argparse.Namespace) -> int:
    checkpoints = read_checkpoints(args.checkpoint) if args.checkpoint else None
    keys, tofu = trusted_keys(args)
    async with open_store(args.db, readonly=True) as store:
        progress = Progress("verified", await _last_position(store))
        try:
            report = await (args.checker or verify)(
                store, checkpoints=checkpoints, keys=keys, tofu=tofu, progress=progress
            )
        finally:
            progress.close()
    if args.json:
        _json(report_json(report, grammar=args.checker is not None))
        return 0 if report.ok else 1
    _out(tofu_notice(report.tofu_key))
    if report.fault is not None:
        _out("".join(fault_lines(report)))
        return 1
    signed = f", against {report.checkpoints} signed checkpoint(s)" if checkpoints else ""
    _out(
        f"ok: {report.streams} streams, {report.events} events, {report.blobs} blobs "
        f"intact{signed}\n"
    )
    return 0


def fault_lines(report: VerifyReport) -> list[str]:
    """A ``FAULT ...`` line per fault the report lists, then how many more."""
    lines = [f"FAULT {visible(str(fault))}\n" for fault in report.faults]
    if report.unlisted:
        lines.append(f"... and {report.unlisted} more faults\n")
    return lines


def report_json(report: VerifyReport, *, grammar: bool) -> dict[str, Any]:
    """``log verify --json`` (and ``replay --json``'s ``verdict``): the report, with
    ``ok`` and whether the writing program's grammar was checked."""
    faults = [
        {k: v for k, v in msgspec.structs.asdict(f).items() if v is not None} for f in report.faults
    ]
    return {
        "ok": report.ok,
        "streams": report.streams,
        "events": report.events,
        "blobs": report.blobs,
        "checkpoints": report.checkpoints,
        "grammar": grammar,
        "faults": faults,
        "unlisted": report.unlisted,
        "tofu_key": report.tofu_key,
    }


async def _checkpoint(args: argparse.Namespace) -> int:
    key = load_private_key(args.key)
    own = public_hex(key.public_key())
    if args.out.exists() and not args.out.is_file():
        raise CheckpointError(
            f"checkpoint file {args.out}: not a regular file; the chain in it is read back "
            "and extended, so --out must name a regular file"
        )
    chain = read_checkpoints(args.out) if args.out.exists() else []
    if chain and chain[-1].key != own:
        raise CheckpointError(
            f"checkpoint file {args.out}: signed with another key; use that key or a new file"
        )
    async with open_store(args.db, readonly=True) as store:
        # A signature vouches for what it signs: the log must verify (every chain,
        # every referenced blob present and intact, the grammar) and, as transparency
        # logs define consistency, still hold every head signed before with the same
        # hashes. Signing a log that went backwards would make the rewrite look
        # legitimate; signing one with a deleted blob would vouch for a record that
        # can no longer be shown.
        report = await (args.checker or verify)(store, checkpoints=chain or None, keys={own})
        if report.fault is not None:
            what = (
                f"the log is not an extension of the {len(chain)} checkpoint(s) in {args.out}"
                if chain
                else "the log does not verify"
            )
            raise CheckpointError(
                f"refusing to sign: {what}: {report.fault}"
                + (f" (and {len(report.faults) - 1} more faults)" if report.faults[1:] else "")
                + "; find out what happened to the log (`skillog log verify`) before "
                "signing anything"
            )
        cp = await _make_checkpoint(
            store, key, previous=chain[-1] if chain else None, clock=time.time_ns
        )
    await trio.to_thread.run_sync(append_checkpoint, args.out, cp)
    _out(f"checkpoint {cp.id[:16]}: {len(cp.heads)} stream heads signed -> {args.out}\n")
    return 0


async def _keygen(args: argparse.Namespace) -> int:
    pub = generate_key(args.out)
    _out(f"private key {args.out} (keep it secret), public key {pub}\n")
    return 0


async def _export(args: argparse.Namespace) -> int:
    if str(args.out or "-") == "-" and sys.stdout.isatty():
        # The export is the stored bytes, byte for byte: text a model or a script wrote
        # would reach the terminal raw (docs/security.md, "Terminal output").
        raise StoreError(
            "log export writes the exact stored bytes, which may hold terminal control "
            "characters: give --out FILE, or send it to a file or a pipe (> FILE, | less)"
        )
    async with open_store(args.db, readonly=True) as store:
        for s in args.streams:
            if await store.head(s) is None:
                raise StoreError(f"database {describe_db(args.db)}: no stream {s!r}")
        progress = Progress("exported", await _last_position(store))
        try:
            with output_file(args.out or "-", what="export file", option="--out") as out:
                count = await export_jsonl(
                    store, out, streams=args.streams or None, progress=progress
                )
        finally:
            progress.close()
    print(f"exported {count} events", file=sys.stderr)
    return 0


async def _snapshot(args: argparse.Namespace) -> int:
    async with open_store(args.db, readonly=True) as store:
        copy = getattr(store, "snapshot_to", None)
        if copy is None:
            raise StoreError(
                f"database {describe_db(args.db)}: snapshot copies SQLite logs; for "
                "PostgreSQL use pg_dump, or `skillog log export` for a portable copy"
            )
        await copy(args.out)
    _out(f"snapshot of {describe_db(args.db)} written to {args.out} (one file)\n")
    return 0


async def _reindex(args: argparse.Namespace) -> int:
    if args.projection is None:
        raise StoreError("this program keeps no catalog: nothing to reindex")
    async with open_store(args.db, projection=args.projection) as store:
        rows: int = await store.reindex()  # type: ignore[attr-defined]
    _out(f"catalog of {describe_db(args.db)} rebuilt from the log: {rows} rows\n")
    return 0


async def _import(args: argparse.Namespace) -> int:
    async with open_store(args.db, projection=args.projection) as store:
        progress = Progress("imported", 0)
        try:
            report = await import_jsonl(store, str(args.file), progress=progress)
        finally:
            progress.close()
    _out(
        f"imported {report.events} events in {len(report.streams)} streams ({report.blobs} blobs)\n"
    )
    if not report.complete:
        print(
            f"warning: {args.file} has no export header and end line (written by an older "
            "skillog): the events in it verify, but a cut after a whole line cannot be "
            "ruled out; compare with `skillog log sessions` where it came from",
            file=sys.stderr,
        )
    return 0


def parse_before(text: str) -> int:
    """``--before``: a date (midnight UTC) or an ISO 8601 time with an offset, in the
    past; ns since the epoch. A clear error (exit 2) says what to type otherwise."""
    example = (
        "write YYYY-MM-DD (2026-01-31) or an ISO 8601 time with its offset (2026-01-31T12:00:00Z)"
    )
    try:
        if len(text) == 10:
            day = datetime.date.fromisoformat(text)
            when = datetime.datetime(day.year, day.month, day.day, tzinfo=datetime.UTC)
        else:
            when = datetime.datetime.fromisoformat(text)
    except ValueError as e:
        raise ArchiveError(f"--before {visible(text)!r}: not a date or time; {example}") from e
    if when.tzinfo is None:
        raise ArchiveError(
            f"--before {visible(text)!r}: a time needs its offset (Z for UTC); {example}"
        )
    ns = int(when.timestamp()) * 1_000_000_000 + when.microsecond * 1000
    if ns > time.time_ns():
        raise ArchiveError(
            f"--before {visible(text)!r} is in the future: only sessions that have ended can be "
            "archived; give today's date or an earlier one"
        )
    return ns


def _who() -> str:
    try:
        user = getpass.getuser()
    except (OSError, KeyError):
        user = "?"
    return f"{user}@{socket.gethostname()}"


def _size(db: str) -> int | None:
    if is_postgres_url(db):
        return None
    path = sqlite_path(db)
    return sum(os.path.getsize(p) for p in (path, path + "-wal") if os.path.exists(p))


async def _archive(args: argparse.Namespace) -> int:
    if args.selector is None or args.projection is None:
        raise ArchiveError(
            "this program does not say which sessions have ended: nothing to archive"
        )
    before = parse_before(args.before)
    key = load_private_key(args.key)
    out = args.out or Path(f"skillog-archive-{args.before.replace(':', '')}.jsonl")
    size = _size(args.db)
    async with open_store(args.db, projection=args.projection) as store:
        heads = [] if out.exists() else await args.selector(store, before)
        result = await archive_streams(
            store, heads, out=out, key=key, by=_who(), before=before, clock=time.time_ns
        )
    for name in result.stale:
        _out(f"removed {visible(name)}: a temporary file left by an interrupted archive run\n")
    if result.already:
        _out(
            f"{out}: already archived ({result.streams} streams, {result.events} events, "
            f"checkpoint {result.checkpoint[:16]}); nothing to do\n"
        )
        return 0
    if not result.checkpoint:
        _out(f"no ended session before {args.before}: nothing archived, no file written\n")
        return 0
    skipped = (
        f"; {len(result.skipped)} skipped (they changed while being archived: run again later)"
        if result.skipped
        else ""
    )
    _out(
        f"archived {len(result.archived)} sessions ({result.streams} streams, {result.events} "
        f"events) into {out}, checkpoint {result.checkpoint[:16]}{skipped}\n"
    )
    _out(
        f"removed {result.blobs} blobs ({result.blob_bytes:,} bytes) that only archived "
        "events named (the archive file carries them)\n"
    )
    if size is None and args.vacuum:
        _out(
            "--vacuum is for SQLite: PostgreSQL's autovacuum makes the deleted rows' space "
            "reusable\n"
        )
    if size is not None:
        path = sqlite_path(args.db)
        if args.vacuum:
            await trio.to_thread.run_sync(vacuum, Path(path))
        after = _size(args.db)
        what = (
            "after VACUUM" if args.vacuum else "(freed pages are reused; --vacuum shrinks the file)"
        )
        _out(f"log file {size:,} bytes before, {after:,} bytes {what}\n")
    return 0


_COMMANDS: dict[str, Callable[[argparse.Namespace], Any]] = {
    "sessions": _sessions,
    "show": _show,
    "verify": _verify,
    "checkpoint": _checkpoint,
    "keygen": _keygen,
    "export": _export,
    "snapshot": _snapshot,
    "import": _import,
    "reindex": _reindex,
    "archive": _archive,
}
