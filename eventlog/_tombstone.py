"""Tombstones: what the live log keeps of a stream moved into an archive file.

The types a store needs to commit an archive (``eventlog/_archive.py`` writes the
file and drives it): the tombstone row, the ``log.archived`` body recorded in
:data:`MAINTENANCE_STREAM`, and the pure helpers every store shares.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence

import msgspec

from ._checkpoint import CheckpointHead
from ._errors import ImportFormatError
from ._hashchain import blob_digest
from ._jsonl import named_digests
from ._types import Event, EventStore, NewEvent

MAINTENANCE_STREAM = "log/maintenance"
"""The stream of the log's own maintenance: one ``log.archived`` event per archive."""

ARCHIVED_TYPE = "log.archived"

_ENCODER = msgspec.json.Encoder(order="sorted")


class Tombstone(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """What the live log keeps of an archived stream."""

    stream: str
    length: int
    head_hash: str
    checkpoint: str
    """The id of the archive's signed checkpoint (sha256 of its statement)."""


class Archived(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """The body of ``log.archived``: who archived what, into which checkpoint."""

    by: str
    before: int
    checkpoint: str
    file: str
    tombstones: str
    """Digest of the blob holding the tombstone list (JSON, sorted by stream)."""
    groups: int
    streams: int
    events: int
    skipped: int


class ScanMark(msgspec.Struct, frozen=True, kw_only=True):
    """The reference scan done before the commit, without the writers' lock: every
    event at a position up to ``position`` outside the archived heads was read. Inside
    the lock only later positions need reading, unless an archive committed since
    (``maintenance``, the head of :data:`MAINTENANCE_STREAM` before the scan, moved):
    kept from when deleting the last events let new ones take their positions again
    (``log.archived`` now takes the position after them)."""

    position: int
    maintenance: tuple[int, str] | None


class ArchiveCommit(msgspec.Struct, frozen=True, kw_only=True):
    """What a store commits in one transaction (see :meth:`SqliteStore.commit_archive`)."""

    heads: tuple[CheckpointHead, ...]
    checkpoint: str
    by: str
    before: int
    file: str
    recorded_at: int
    blobs: tuple[str, ...] = ()
    """The blobs the archived events name (all carried by the archive file) that no
    other event named when the log was scanned before the commit: those that still no
    event left in the live log names are removed in the same transaction."""
    scanned: ScanMark | None = None
    """How far that scan outside the lock went; None: scan everything inside it."""


class ArchiveOutcome(msgspec.Struct, frozen=True, kw_only=True):
    """What a commit did: the groups (catalog keys, or streams) archived and skipped."""

    archived: tuple[str, ...]
    skipped: tuple[str, ...]
    tombstones: tuple[Tombstone, ...]
    events: int
    blobs: int = 0
    """Blobs removed from the live log (named by archived events only)."""
    blob_bytes: int = 0


_TOMBSTONES = msgspec.json.Decoder(list[Tombstone])
_ARCHIVED = msgspec.json.Decoder(Archived)


def decode_archived(body: bytes) -> Archived:
    return _ARCHIVED.decode(body)


def decode_tombstones(data: bytes) -> list[Tombstone]:
    return _TOMBSTONES.decode(data)


def is_archived_event(event: Event) -> bool:
    """Whether ``event`` is a ``log.archived`` of the log's maintenance stream."""
    return event.stream == MAINTENANCE_STREAM and event.type == ARCHIVED_TYPE


async def listed_tombstones(store: EventStore, archived: Event) -> list[Tombstone]:
    """The tombstones a ``log.archived`` event lists, in the blob its body names.
    Raises ``msgspec.MsgspecError`` for a body or list that does not decode and
    :class:`BlobNotFoundError` for a list that is not in the log."""
    digest = decode_archived(archived.body).tombstones
    return decode_tombstones(await store.get_blob(digest))


def group_heads(
    heads: Iterable[CheckpointHead], key: Callable[[str], str | None] | None
) -> dict[str, list[CheckpointHead]]:
    """Heads by the group they are archived with: a catalog row (a session and its
    lease stream) when a projection names one, else the stream alone."""
    groups: dict[str, list[CheckpointHead]] = {}
    for h in heads:
        k = (key(h.stream) if key is not None else None) or h.stream
        groups.setdefault(k, []).append(h)
    return groups


def archived_event(commit: ArchiveCommit, outcome: ArchiveOutcome) -> tuple[NewEvent, bytes]:
    """The ``log.archived`` event of a commit and the tombstone list blob it names."""
    stones = outcome.tombstones
    blob = _ENCODER.encode(sorted(stones, key=lambda t: t.stream))
    body = Archived(
        by=commit.by,
        before=commit.before,
        checkpoint=commit.checkpoint,
        file=commit.file,
        tombstones=blob_digest(blob),
        groups=len(outcome.archived),
        streams=len(stones),
        events=outcome.events,
        skipped=len(outcome.skipped),
    )
    event = NewEvent(type=ARCHIVED_TYPE, body=_ENCODER.encode(body), recorded_at=commit.recorded_at)
    return event, blob


def archived_stream(source: str, stream: str) -> ImportFormatError:
    """An import would bring back an archived stream beside its tombstone."""
    return ImportFormatError(
        f"{source}: stream {stream!r} was archived from this log (it has a tombstone), so "
        "it cannot come back beside it; nothing was imported - import the archive into a "
        "new database to read it there"
    )


def others(projection: object, key: str, heads: Sequence[CheckpointHead]) -> list[str]:
    """The streams the catalog row ``key`` gathers (a projection's optional
    ``streams(key)``) that the archive did not choose: if one exists now (a lease taken
    and let go since), archiving the rest would orphan it, so the group is skipped."""
    streams = getattr(projection, "streams", None)
    if streams is None:
        return []
    chosen = {h.stream for h in heads}
    return [s for s in streams(key) if s not in chosen]


def sort_out(
    commit: ArchiveCommit,
    projection: object | None,
    *,
    head: Callable[[str], tuple[int, str] | None],
    held: Callable[[str], bool],
    remove: Callable[[str, list[str]], None],
) -> ArchiveOutcome:
    """(Inside a store's archive transaction) decide each group: archived when each of
    its streams still ends at the chosen ``(seq, hash)`` (``head``), no other stream of
    its catalog row exists and nobody ``held`` its lease (then ``remove(key, streams)``
    deletes the streams, their snapshots and the row), else skipped whole."""
    key_of = getattr(projection, "key", None)
    archived: list[str] = []
    skipped: list[str] = []
    stones: list[Tombstone] = []
    for key, heads in sorted(group_heads(commit.heads, key_of).items()):
        if (
            any(head(h.stream) != (h.seq, h.hash) for h in heads)
            or any(head(s) is not None for s in others(projection, key, heads))
            or held(key)
        ):
            skipped.append(key)
            continue
        remove(key, [h.stream for h in heads])
        archived.append(key)
        stones += [
            Tombstone(stream=h.stream, length=h.seq + 1, head_hash=h.hash,
                      checkpoint=commit.checkpoint)
            for h in heads
        ]  # fmt: skip
    return ArchiveOutcome(
        archived=tuple(archived),
        skipped=tuple(skipped),
        tombstones=tuple(stones),
        events=sum(t.length for t in stones),
    )


def unreferenced(candidates: Iterable[str], bodies: Iterable[bytes]) -> list[str]:
    """(Inside a store's archive transaction, under its writers' lock) the
    ``candidates`` no body of ``bodies`` names: every event and snapshot still in the
    live log, read from the tables themselves (never from a cache), so a blob an append
    committed before this transaction names is kept, and an append after it stores the
    blobs it names again (appends carry their blobs: ``AppendRequest.blobs``)."""
    left = set(candidates)
    for body in bodies:
        if not left:
            break
        left.difference_update(named_digests(body))
    return sorted(left)


def incremental(commit: ArchiveCommit, head: Callable[[str], tuple[int, str] | None]) -> bool:
    """(Inside the lock, before the commit's own ``log.archived``) whether the scan done
    before still holds, so only positions after its mark need reading."""
    return commit.scanned is not None and head(MAINTENANCE_STREAM) == commit.scanned.maintenance


def still_live(commit: ArchiveCommit, outcome: ArchiveOutcome) -> list[str]:
    """The chosen streams a commit did not archive (their groups were skipped): the
    scan before left their events out, so the one inside the lock reads them whole."""
    gone = {t.stream for t in outcome.tombstones}
    return sorted({h.stream for h in commit.heads} - gone)


def with_blobs(outcome: ArchiveOutcome, removed: Iterable[int]) -> ArchiveOutcome:
    """``outcome`` counting the removed blobs (their sizes in bytes)."""
    sizes = list(removed)
    return msgspec.structs.replace(outcome, blobs=len(sizes), blob_bytes=sum(sizes))
