"""Reading a recorded session: the I/O edge every replay view starts from.

A :class:`Recording` is a session's stored events with their decoded bodies, read once.
Opening, verifying and decoding turn every failure into a :class:`BrokenLogError` that
names the session and seq, so no caller has to know the log's error types.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import AsyncIterator, Collection, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass

from eventlog import (
    ArchiveError,
    BlobNotFoundError,
    Checkpoint,
    CheckpointError,
    Event,
    EventStore,
    ImportFormatError,
    MemoryStore,
    SkillogError,
    VerifyReport,
    import_jsonl,
    load_archive,
    open_store,
    read_checkpoints,
)
from orchestrator import CODEC, PromptRendered, verdict
from orchestrator import Event as Body

from ._errors import BlobError, BrokenLogError, UnverifiedLogError


@dataclass(frozen=True)
class Recording:
    """One session as recorded: ``events[i]`` is stored at seq ``i``, ``bodies[i]`` is
    its decoded body."""

    session: str
    events: tuple[Event, ...]
    bodies: tuple[Body, ...]

    def __len__(self) -> int:
        return len(self.events)


@asynccontextmanager
async def open_log(
    *,
    db: str | os.PathLike[str] | None = None,
    jsonl: str | None = None,
    archive: str | None = None,
    writable: bool = False,
    session: str = "?",
) -> AsyncIterator[EventStore]:
    """The store to replay from: the database ``db`` (a SQLite path or a PostgreSQL URL,
    see :func:`eventlog.open_store`; read-only unless ``writable``)
    or a JSON Lines export ``jsonl`` loaded into memory (every chain in it checked on
    the way in). Unusable input raises a :class:`SkillogError` saying why; a damaged
    export raises :class:`BrokenLogError` for ``session`` (named in the message)."""
    if archive is not None:
        try:
            store, _ = await load_archive(archive)
        except ArchiveError as e:
            raise BrokenLogError(session, None, str(e)) from e
        yield store
        return
    if (db is None) == (jsonl is None):
        raise ValueError("give exactly one of db and jsonl")
    if jsonl is not None:
        store = MemoryStore()
        try:
            await import_jsonl(store, jsonl)
        except ImportFormatError as e:
            raise BrokenLogError(session, None, f"the export cannot be read: {e}") from e
        yield store
        return
    assert db is not None
    async with open_store(db, readonly=not writable) as durable:
        yield durable


async def load_recording(store: EventStore, session: str) -> Recording:
    """Read and decode every event of ``session``.

    Raises :class:`BrokenLogError` when the session is not in the store or an event
    does not decode (an unknown type, a schema version newer than this code)."""
    events = [e async for e in store.read(session)]
    if not events:
        read_tombstones = getattr(store, "tombstones", None)
        stones = await read_tombstones([session]) if read_tombstones is not None else []
        if stones:
            raise BrokenLogError(
                session,
                None,
                f"archived from this log ({stones[0].length} events, archive checkpoint "
                f"{stones[0].checkpoint[:16]}...): replay it from its archive with "
                "`skillog replay SESSION --archive FILE --key KEY --db LOG`",
            )
        raise BrokenLogError(
            session, None, "no such session in this log; `skillog sessions` lists them"
        )
    bodies: list[Body] = []
    for event in events:
        try:
            bodies.append(CODEC.decode(event))
        except SkillogError as e:
            raise BrokenLogError(session, event.seq, f"cannot decode {event.type!r}: {e}") from e
    return Recording(session, tuple(events), tuple(bodies))


async def verify_recording(
    store: EventStore,
    session: str,
    *,
    checkpoint: str | os.PathLike[str] | None = None,
    signed: list[Checkpoint] | None = None,
    keys: Collection[str] = (),
    tofu: bool = False,
) -> VerifyReport:
    """The verdict on ``session`` (:func:`orchestrator.verdict`, the one every reader
    asks): its hash chain from the stored bytes, no row of its stream outside the
    chain, the session grammar, every blob it references present and intact, and with
    a ``checkpoint`` file its signed head (which reveals a truncated tail or a
    consistently rewritten chain); the checkpoints must be signed by one of ``keys``
    (or, with ``tofu``, by the key the file names: the report's ``tofu_key``).
    Returns the report when it holds; raises :class:`UnverifiedLogError` (which
    carries it) when it does not."""
    report = await verdict(
        store,
        session,
        checkpoints=signed if checkpoint is None else read_checkpoints(checkpoint),
        keys=keys,
        tofu=tofu,
    )
    if not report.ok:
        raise UnverifiedLogError(session, report)
    return report


async def archived_checkpoint(
    archive: str,
    session: str,
    keys: Collection[str],
    tofu: bool,
    live: str | None,
) -> Checkpoint:
    """The signed checkpoint of ``archive`` (``skillog log archive``), for the verdict
    to check against the keys the auditor trusts; with the ``live`` log, the session's
    tombstone there must name the same head and checkpoint. Raises
    :class:`BrokenLogError` saying what does not hold."""
    if not keys and not tofu:
        raise CheckpointError(
            f"--archive {archive}: no trusted key for its signed checkpoint; pass --key FILE "
            "(the signer's public key or a trusted-keys file), or --tofu to trust the key "
            "the archive names"
        )
    try:
        archived, cp = await load_archive(archive)
    except ArchiveError as e:
        raise BrokenLogError(session, None, str(e)) from e
    head = await archived.head(session)
    if head is None:
        raise BrokenLogError(session, None, f"not in the archive {archive}")
    if live is None:
        return cp
    async with open_store(live, readonly=True) as store:
        if await store.head(session) is not None:
            raise BrokenLogError(
                session, None, f"still in the live log {live}: it was not archived there"
            )
        found = await store.tombstones([session])  # type: ignore[attr-defined]
    if not found:
        raise BrokenLogError(
            session, None, f"the live log {live} has no tombstone of it: not archived there"
        )
    stone = found[0]
    if (stone.length, stone.head_hash, stone.checkpoint) != (head.seq + 1, head.hash, cp.id):
        raise BrokenLogError(
            session,
            head.seq,
            f"the archive does not match the live log's tombstone: the archive holds "
            f"{head.seq + 1} events ending {head.hash[:16]}... under checkpoint "
            f"{cp.id[:16]}..., the tombstone says {stone.length} ending "
            f"{stone.head_hash[:16]}... under {stone.checkpoint[:16]}...",
        )
    return cp


async def get_checked_blob(
    store: EventStore, digest: str, *, session: str, seq: int, what: str
) -> bytes:
    """The blob ``digest`` (named ``what`` in messages), checked against its digest;
    raises :class:`BlobError` when it is missing or altered."""
    try:
        data = await store.get_blob(digest)
    except BlobNotFoundError as e:
        raise BlobError(
            session,
            seq,
            f"{what}: blob {digest} is missing from the log; export the session with its "
            "blobs (`skillog log export`) or restore the database",
        ) from e
    if hashlib.sha256(data).hexdigest() != digest:
        raise BlobError(
            session, seq, f"{what}: blob {digest} does not match its sha256 (it was altered)"
        )
    return data


def turn_at(bodies: Sequence[Body]) -> list[int]:
    """The turn each event belongs to (0 before the first model call)."""
    turns: list[int] = []
    turn = 0
    for body in bodies:
        if isinstance(body, PromptRendered):
            turn = body.turn
        turns.append(turn)
    return turns
