"""Retention: whole streams moved into a signed archive file, a tombstone left behind.

Chains are per stream (docs/log-format.md): no event of one stream hashes another's,
so removing a stream *whole* leaves every other chain intact, and nothing needs
re-hashing. What a bare deletion would lose is the proof that the stream existed and
how it ended; that is what the archive and the tombstones keep:

- The **archive file** is a JSON Lines export (``_jsonl``: header, one line per event
  with the blobs it names, end line) of the archived streams, each up to the head it
  had when it was chosen. Its end line carries a **signed checkpoint** over exactly
  those heads (``_checkpoint``; ``{"end": {"checkpoint": {...}, "events": N}}``), so
  the file proves itself: every line hashes and chains from genesis, and the signed
  heads say where each chain ends. ``log import`` reads it like any export.
- The live log keeps one **tombstone** per archived stream (``eventlog_tombstones``:
  stream, length, head hash, the archive checkpoint's id) and one ``log.archived``
  event in the stream :data:`MAINTENANCE_STREAM` saying who archived what, when and
  how many, with the digest of the tombstone list (a blob). The tombstones are a
  projection of those events: ``verify`` checks the table equals them, that no
  tombstoned stream still has events, and accepts a signed head of an archived
  stream when its tombstone continues it; ``make_checkpoint`` signs tombstoned heads
  so later checkpoints still extend the earlier ones.

Crash safety: the file is written whole (``output_file``: temporary file, fsync,
link into place) before the log changes; then one transaction deletes the streams,
writes their tombstones and the event. A crash between the two leaves a complete file
and an unchanged log; running the same command again finds the file, checks it still
matches the log, and only commits. A group (a session and its lease stream) whose
head moved since it was chosen is skipped as a whole, never half archived. A run killed
while writing leaves its temporary file; the next run removes it (unlocked: its
writer is dead) before anything else.

Blobs: the file carries every blob its events name, so the same transaction removes
from the live log those no event or snapshot left there names: a scan of the log
before the commit (:func:`scan_references`, no lock), then of what came after it under
the writers' lock (``unreferenced``), so a racing append is either seen or stores the
blobs it carries again after; docs/log-format.md, "Blobs".
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from pathlib import Path

import msgspec
import trio
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from ._checkpoint import (
    CHECKPOINT_VERSION,
    Checkpoint,
    CheckpointHead,
    Statement,
    check_chain,
    public_hex,
)
from ._errors import EventLogError, ImportFormatError
from ._hashchain import GENESIS_HASH
from ._jsonl import HEADER, import_jsonl, line_with_blobs, named_digests
from ._memory import MemoryStore
from ._output import output_file, remove_stale_temporaries
from ._tombstone import MAINTENANCE_STREAM, ArchiveCommit, ArchiveOutcome, ScanMark
from ._types import EventStore

_ENCODER = msgspec.json.Encoder(order="sorted")


class ArchiveError(EventLogError):
    """An archive that cannot be written, read or trusted."""


class ArchiveResult(msgspec.Struct, frozen=True, kw_only=True):
    """What :func:`archive` did; ``already`` when the file's archive was committed
    before (a rerun)."""

    file: str
    checkpoint: str
    archived: tuple[str, ...]
    skipped: tuple[str, ...]
    streams: int
    events: int
    already: bool = False
    blobs: int = 0
    """Blobs removed from the live log: named only by archived events (the file has them)."""
    blob_bytes: int = 0
    stale: tuple[str, ...] = ()
    """Temporary files of interrupted runs for the same ``out``, removed first."""


async def write_archive(
    store: EventStore,
    heads: Sequence[CheckpointHead],
    out: Path,
    key: Ed25519PrivateKey,
    *,
    clock: Callable[[], int],
    sent: set[str] | None = None,
) -> Checkpoint:
    """Write the archive file of ``heads`` (each stream up to its head) to ``out``,
    whole or not at all, never replacing a file; returns its signed checkpoint. The
    digests of the blobs the file carries are added to ``sent``."""
    statement = Statement(
        version=CHECKPOINT_VERSION,
        created_at=clock(),
        prev=GENESIS_HASH,
        key=public_hex(key.public_key()),
        heads=tuple(sorted(heads, key=lambda h: h.stream)),
    )
    cp = Checkpoint(
        **msgspec.structs.asdict(statement), sig=key.sign(_ENCODER.encode(statement)).hex()
    )
    sent = set() if sent is None else sent
    count = 0
    with output_file(out, what="archive file", option="--out", mode=0o600, exclusive=True) as f:
        chunk: list[bytes] = [HEADER]
        for head in cp.heads:
            n, last = 0, None
            async for event in store.read(head.stream, to_seq=head.seq + 1):
                chunk.append(await line_with_blobs(store, event, sent))
                n, last = n + 1, event.hash
                if len(chunk) >= 1024:
                    await trio.to_thread.run_sync(f.writelines, chunk)
                    chunk = []
            if n != head.seq + 1 or last != head.hash:
                raise ArchiveError(
                    f"stream {head.stream!r} changed while it was being archived (it has "
                    f"{n} events, not {head.seq + 1}); nothing was archived - run it again"
                )
            count += n
        end = {"end": {"checkpoint": msgspec.to_builtins(cp), "events": count}}
        chunk.append(_ENCODER.encode(end) + b"\n")
        await trio.to_thread.run_sync(f.writelines, chunk)
    return cp


async def scan_references(
    store: EventStore, heads: Sequence[CheckpointHead], candidates: set[str]
) -> tuple[ScanMark, set[str]]:
    """The reference scan before the commit, without the writers' lock (appends go on):
    which ``candidates`` an event outside the archived ``heads`` names, and how far the
    scan went, so the commit reads only what came after under the lock."""
    last = await store.head(MAINTENANCE_STREAM)  # before the scan: see ScanMark
    maintenance = None if last is None else (last.seq, last.hash)
    archived = {h.stream: h.seq for h in heads}
    named: set[str] = set()
    position = 0
    async for event in store.read_all():
        position = max(position, event.position)
        if event.seq > archived.get(event.stream, -1):
            named.update(named_digests(event.body) & candidates)
    return ScanMark(position=position, maintenance=maintenance), named


async def load_archive(path: str | os.PathLike[str]) -> tuple[MemoryStore, Checkpoint]:
    """The archive at ``path`` loaded into memory (every line hashed and chained, every
    blob checked, the end line's count) and its checkpoint, not yet checked against a
    key (``verify(store, checkpoints=[cp], keys=...)`` does that)."""
    store = MemoryStore()
    try:
        report = await import_jsonl(store, os.fspath(path))
    except ImportFormatError as e:
        raise ArchiveError(f"archive {path}: {e}") from e
    if report.checkpoint is None:
        raise ArchiveError(
            f"archive {path}: no signed checkpoint in its end line: it is an export, not an "
            "archive written by `skillog log archive`"
        )
    return store, report.checkpoint


async def archive(
    store: EventStore,
    heads: Sequence[CheckpointHead],
    *,
    out: Path,
    key: Ed25519PrivateKey,
    by: str,
    before: int,
    clock: Callable[[], int],
) -> ArchiveResult:
    """Archive the streams at ``heads`` into ``out`` and leave tombstones (see the
    module docstring). When ``out`` exists it must be an archive of this log: already
    committed (nothing to do), or written by a run that stopped before committing (the
    commit is done now, ``heads`` ignored)."""
    commit_archive = getattr(store, "commit_archive", None)
    if commit_archive is None:
        raise ArchiveError("this store cannot archive")
    stale = await trio.to_thread.run_sync(remove_stale_temporaries, out)
    already = await trio.to_thread.run_sync(out.exists)
    blobs: set[str] = set()
    if already:
        loaded, cp = await load_archive(out)
        blobs.update([d async for d, _ in loaded.read_blobs()])
        problem = check_chain([cp], {public_hex(key.public_key())})
        if problem:
            raise ArchiveError(
                f"archive file {out}: already exists and is not this key's archive "
                f"({problem}); choose a new --out"
            )
        stones = {t.stream: t for t in await store.tombstones([h.stream for h in cp.heads])}  # type: ignore[attr-defined]
        if stones and all(t.checkpoint == cp.id for t in stones.values()):
            return ArchiveResult(
                file=str(out), checkpoint=cp.id, archived=(), skipped=(), streams=len(stones),
                events=sum(t.length for t in stones.values()), already=True, stale=stale,
            )  # fmt: skip
        if stones:
            raise ArchiveError(
                f"archive file {out}: already exists and its streams were archived into "
                "another archive; choose a new --out"
            )
        heads = cp.heads
    elif not heads:
        return ArchiveResult(file=str(out), checkpoint="", archived=(), skipped=(), streams=0,
                             events=0, stale=stale)  # fmt: skip
    else:
        cp = await write_archive(store, heads, out, key, clock=clock, sent=blobs)
    mark, named = await scan_references(store, cp.heads, blobs)
    commit = ArchiveCommit(
        heads=cp.heads, checkpoint=cp.id, by=by, before=before, file=out.name,
        recorded_at=clock(), blobs=tuple(sorted(blobs - named)), scanned=mark,
    )  # fmt: skip
    outcome: ArchiveOutcome = await commit_archive(commit)
    if already and not outcome.archived:
        raise ArchiveError(
            f"archive file {out}: already exists and none of its streams match this log; "
            "choose a new --out"
        )
    return ArchiveResult(
        file=str(out),
        checkpoint=cp.id,
        archived=outcome.archived,
        skipped=outcome.skipped,
        streams=len(outcome.tombstones),
        events=outcome.events,
        blobs=outcome.blobs,
        blob_bytes=outcome.blob_bytes,
        stale=stale,
    )
