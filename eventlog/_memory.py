"""An in-memory event store with the same contract as the SQLite store (for tests)."""

from __future__ import annotations

import bisect
import itertools
from collections.abc import AsyncIterator, Callable, Collection, Sequence

import msgspec
import trio

from ._catalog import CatalogRow, Claim, Listing, Projection, fold_into, matches
from ._errors import BlobNotFoundError, ConcurrencyError
from ._hashchain import (
    GENESIS_HASH,
    blob_digest,
    build_events,
    check_blobs,
    check_int,
    check_name,
    check_new_events,
    in_log,
)
from ._snapshot import Snapshot
from ._tombstone import (
    MAINTENANCE_STREAM,
    ArchiveCommit,
    ArchiveOutcome,
    Tombstone,
    archived_event,
    sort_out,
    unreferenced,
    with_blobs,
)
from ._types import Event, Head, NewEvent, StreamInfo
from ._writer import call_on_durable


class MemoryStore:
    """Keeps everything in process memory; nothing survives the process.

    Same contract as the SQLite store: atomic optimistic appends, hash chains, global
    positions starting at 1, blobs, snapshots and ``follow``; readers show only the rows
    :func:`in_log` accepts, like every store. Must be used from one trio run (it is not
    thread-safe).
    """

    def __init__(self, projection: Projection | None = None) -> None:
        self.projection = projection
        self._catalog: dict[str, CatalogRow] = {}
        # The table, in position order, and an index of the rows in the log: each
        # stream's rows in seq order.
        self._events: list[Event] = []
        self._streams: dict[str, list[Event]] = {}
        self._blobs: dict[str, bytes] = {}
        self._snapshots: dict[tuple[str, str], Snapshot] = {}
        self._tombstones: dict[str, Tombstone] = {}
        self._appended = trio.Event()
        # The next position: never one an archived (removed) event had, so a follow
        # past the log's last events sees what comes after an archive of them.
        self._next_position = 1

    async def append(
        self,
        stream: str,
        events: Sequence[NewEvent],
        *,
        expected_seq: int,
        blobs: Sequence[bytes] = (),
        on_durable: Callable[[], None] | None = None,
    ) -> tuple[Event, ...]:
        """Append ``events`` at ``expected_seq`` (see :class:`EventStore`);
        ``on_durable`` runs as they are stored."""
        check_new_events(stream, events, expected_seq)
        check_blobs(blobs)
        await trio.lowlevel.cancel_shielded_checkpoint()  # never cancelled: the contract
        chain = self._streams.get(stream, [])
        length = chain[-1].seq + 1 if chain else 0
        if expected_seq != length:
            raise ConcurrencyError(stream, expected_seq, length)
        prev = chain[-1].hash if chain else GENESIS_HASH
        new = build_events(stream, prev, expected_seq, self._next_position, events)
        self._next_position += len(new)
        for data in blobs:
            self._blobs.setdefault(blob_digest(data), data)
        self._streams.setdefault(stream, []).extend(new)
        self._events.extend(new)
        self._project(new)
        if on_durable is not None:
            call_on_durable(on_durable)
        self._appended.set()
        self._appended = trio.Event()
        return tuple(new)

    # -- the catalog (eventlog/_catalog.py) ---------------------------------------

    def _project(self, events: Sequence[Event]) -> None:
        if self.projection is not None:
            rows: dict[str, CatalogRow | None] = {}
            changed = fold_into(self.projection, rows, self._catalog.get, events)
            for key in changed:
                row = rows[key]
                if row is not None:
                    self._catalog[key] = row

    async def catalog_built(self, version: str | None = None) -> bool:
        """Whether the catalog is kept (by a projection of ``version``, if given)."""
        return self.projection is not None and version in (None, self.projection.version)

    async def list_catalog(self, listing: Listing) -> list[CatalogRow]:
        await trio.lowlevel.checkpoint()
        rows = [r for r in self._catalog.values() if matches(r, listing)]
        oldest_first = listing.free_at is not None
        rows.sort(key=lambda r: (r.created_at, r.key), reverse=not oldest_first)
        return rows if listing.limit is None else rows[: listing.limit]

    async def catalog_row(self, key: str) -> CatalogRow | None:
        await trio.lowlevel.checkpoint()
        return self._catalog.get(key)

    async def read_catalog(self) -> list[CatalogRow]:
        await trio.lowlevel.checkpoint()
        return sorted(self._catalog.values(), key=lambda r: r.key)

    async def catalog_snapshot(
        self, key: str, streams: Sequence[str]
    ) -> tuple[CatalogRow | None, list[Event]]:
        """The row ``key`` and the events of ``streams``, at one moment (no await
        between the reads)."""
        await trio.lowlevel.checkpoint()
        events = [e for s in streams for e in self._streams.get(s, [])]
        return self._catalog.get(key), events

    async def claim(self, claim: Claim) -> list[Event]:
        """Claim free claimable rows (one task at a time holds the loop: atomic)."""
        free_rows = await self.list_catalog(Listing(limit=claim.limit, free_at=claim.now))
        claimed = []
        for row in free_rows:
            stream = claim.stream_of(row.key)
            chain = self._streams.get(stream, [])
            try:
                (event,) = await self.append(
                    stream,
                    [claim.event_of(row.key)],
                    expected_seq=chain[-1].seq + 1 if chain else 0,
                )
            except ConcurrencyError:
                continue  # another claimant took it first
            claimed.append(event)
        return claimed

    async def renew(self, key: str, holder: str, until: int) -> bool:
        await trio.lowlevel.checkpoint()
        row = self._catalog.get(key)
        if row is None or row.holder != holder:
            return False
        self._catalog[key] = msgspec.structs.replace(row, lease_until=until)
        return True

    async def reindex(self) -> int:
        assert self.projection is not None
        self._catalog = {}
        self._project(self._events)
        return len(self._catalog)

    # -- retention (eventlog/_archive.py) -------------------------------------------

    async def commit_archive(self, commit: ArchiveCommit) -> ArchiveOutcome:
        """Remove the archived streams, leave tombstones, record it (atomic: no await
        between the checks and the changes but the append's own)."""
        projection = self.projection

        def head(stream: str) -> tuple[int, str] | None:
            chain = self._streams.get(stream)
            return (chain[-1].seq, chain[-1].hash) if chain else None

        def held(key: str) -> bool:
            row = self._catalog.get(key) if projection is not None else None
            return row is not None and row.holder is not None

        def remove(key: str, streams: list[str]) -> None:
            for stream in streams:
                positions = {e.position for e in self._streams.pop(stream)}
                self._events = [e for e in self._events if e.position not in positions]
                for name in [k for k in self._snapshots if k[0] == stream]:
                    del self._snapshots[name]
            self._catalog.pop(key, None)

        outcome = sort_out(commit, projection, head=head, held=held, remove=remove)
        stones = outcome.tombstones
        if stones:
            for t in stones:
                self._tombstones[t.stream] = t
            event, blob = archived_event(commit, outcome)
            chain = self._streams.get(MAINTENANCE_STREAM, [])
            await self.append(MAINTENANCE_STREAM, [event], expected_seq=len(chain), blobs=[blob])
            bodies = itertools.chain(
                (e.body for e in self._events), (s.state for s in self._snapshots.values())
            )
            dead = unreferenced(commit.blobs, bodies)
            sizes = [len(self._blobs.pop(d)) for d in dead if d in self._blobs]
            outcome = with_blobs(outcome, sizes)
        return outcome

    async def tombstones(self, streams: Collection[str] | None = None) -> list[Tombstone]:
        await trio.lowlevel.checkpoint()
        names = sorted(self._tombstones if streams is None else set(streams))
        return [self._tombstones[s] for s in names if s in self._tombstones]

    async def head(self, stream: str) -> Head | None:
        """The last event's seq and hash, or None for a stream with no events."""
        await trio.lowlevel.checkpoint()
        chain = self._streams.get(stream)
        return Head(seq=chain[-1].seq, hash=chain[-1].hash) if chain else None

    async def read(
        self, stream: str, *, from_seq: int = 0, to_seq: int | None = None
    ) -> AsyncIterator[Event]:
        """Events of ``stream`` with ``from_seq <= seq < to_seq``, in seq order."""
        check_int("from_seq", from_seq)
        if to_seq is not None:
            check_int("to_seq", to_seq)
        chain = self._streams.get(stream, [])
        i = bisect.bisect_left(chain, from_seq, key=_seq)
        while i < len(chain) and (to_seq is None or chain[i].seq < to_seq):
            yield chain[i]
            i += 1
            if i % 1024 == 0:
                await trio.lowlevel.checkpoint()

    async def read_all(self, *, from_position: int = 0) -> AsyncIterator[Event]:
        """Every event with ``position >= from_position``, in position order."""
        check_int("from_position", from_position)
        i = bisect.bisect_left(self._events, from_position, key=_position)
        while i < len(self._events):
            e = self._events[i]
            if in_log(e.stream, e.seq):
                yield e
            i += 1
            if i % 1024 == 0:
                await trio.lowlevel.checkpoint()

    async def follow(self, *, from_position: int = 0) -> AsyncIterator[Event]:
        """Like :meth:`read_all`, then waits for and yields new events until cancelled."""
        check_int("from_position", from_position)
        position = from_position
        while True:
            appended = self._appended
            # By position, not by index: an archive removes rows before the ones to come.
            i = bisect.bisect_left(self._events, position, key=_position)
            while i < len(self._events):
                e = self._events[i]
                position = e.position + 1
                if in_log(e.stream, e.seq):
                    yield e
                i = bisect.bisect_left(self._events, position, key=_position)
            await appended.wait()

    async def streams(self) -> list[StreamInfo]:
        """One summary per stream, ordered by stream id."""
        await trio.lowlevel.checkpoint()
        return [
            StreamInfo(
                stream=name,
                length=chain[-1].seq + 1,
                head_hash=chain[-1].hash,
                first_recorded_at=chain[0].recorded_at,
                last_recorded_at=chain[-1].recorded_at,
            )
            for name, chain in sorted(self._streams.items())
            if chain
        ]

    async def row_count(self, stream: str | None = None) -> int:
        """Every stored row (of ``stream``), in the log or not (verify compares counts)."""
        await trio.lowlevel.checkpoint()
        if stream is None:
            return len(self._events)
        return sum(1 for e in self._events if e.stream == stream)

    async def read_strays(
        self, stream: str | None = None
    ) -> AsyncIterator[tuple[int, object, object]]:
        """``(position, stream, seq)`` of every row (of ``stream``) outside the log."""
        await trio.lowlevel.checkpoint()
        for e in self._events:
            if not in_log(e.stream, e.seq) and (stream is None or e.stream == stream):
                yield e.position, e.stream, e.seq

    async def put_blob(self, data: bytes) -> str:
        """Store ``data`` once under its sha256 and return the digest."""
        check_blobs([data])
        await trio.lowlevel.checkpoint()
        digest = blob_digest(data)
        self._blobs.setdefault(digest, data)
        return digest

    async def get_blob(self, digest: str) -> bytes:
        """The bytes stored under ``digest``; :class:`BlobNotFoundError` if absent."""
        await trio.lowlevel.checkpoint()
        try:
            return self._blobs[digest]
        except (KeyError, TypeError):
            raise BlobNotFoundError(str(digest)) from None

    async def has_blob(self, digest: str) -> bool:
        """Whether a blob with this digest is stored."""
        await trio.lowlevel.checkpoint()
        return isinstance(digest, str) and digest in self._blobs

    async def read_blobs(self) -> AsyncIterator[tuple[str, bytes]]:
        """Every stored ``(digest, bytes)``, in digest order."""
        for digest in sorted(self._blobs):
            await trio.lowlevel.checkpoint()
            yield digest, self._blobs[digest]

    async def save_snapshot(self, snapshot: Snapshot) -> None:
        """Store ``snapshot``, replacing the previous one of its stream and name."""
        check_name("snapshot name", snapshot.name)
        await trio.lowlevel.checkpoint()
        self._snapshots[(snapshot.stream, snapshot.name)] = snapshot

    async def load_snapshot(self, stream: str, name: str) -> Snapshot | None:
        """The stored snapshot of ``stream`` named ``name``, if any."""
        await trio.lowlevel.checkpoint()
        return self._snapshots.get((stream, name))


def _seq(e: Event) -> int:
    return e.seq


def _position(e: Event) -> int:
    return e.position
