"""The PostgreSQL writer: group commit of queued appends (see :mod:`._writer`).

One batch is one transaction, sent as one pipeline (one round trip): ``LOCK TABLE
events IN EXCLUSIVE MODE`` (writers of all processes take turns, readers are not
blocked), one multi-row INSERT of the events (arrays through ``unnest``) that numbers
them after ``MAX(position)``, one of the blobs, a NOTIFY that wakes every follower, and
COMMIT. The lock is what makes positions increase in commit order.

Each stream's head (length, last hash) is remembered across batches, so the common
append reads nothing first. Memory can go stale (another process appended), and that is
safe: events at a seq that is taken hit ``UNIQUE (stream, seq)``, the batch rolls back,
the memory is dropped and each append is retried on heads read under the lock. A stated
seq that disagrees with the memory is also checked under the lock (one more round trip)
before it is called a conflict.

A lost connection (server restart, a killed backend, a network drop) is recovered here:
reconnect for up to ``reconnect_timeout`` seconds, then find out whether the batch
committed (the last event of an append is at its seq with the hash we computed: the
chain makes that proof exact) and if not, run it again. So a caller gets its events
committed exactly once, or an error; never a half-written batch (one transaction) and
never a fork (the heads are re-read under the lock).
"""

from __future__ import annotations

import contextlib
import itertools
import time
from collections.abc import Callable, Iterator, Sequence
from typing import Any, TypeVar

import msgspec
import psycopg
import trio
from psycopg import errors

from . import _postgres_catalog as catalog
from ._catalog import Claim, Projection, keep_current
from ._errors import ConcurrencyError, EventLogError, StoreError
from ._hashchain import GENESIS_HASH, blob_digest, build_events
from ._postgres_db import CHANNEL, translate
from ._tombstone import (
    MAINTENANCE_STREAM,
    ArchiveCommit,
    ArchiveOutcome,
    archived_event,
    incremental,
    sort_out,
    still_live,
    unreferenced,
    with_blobs,
)
from ._types import Event
from ._writer import AppendRequest, BatchWriter, CallRequest

T = TypeVar("T")
MAX_HEADS = 65_536
#: Attempts of one batch across lost connections before its callers get an error.
ATTEMPTS = 3

INSERT_EVENTS = (
    b"INSERT INTO events (stream, seq, position, type, recorded_at, body, prev_hash, hash) "
    b"SELECT * FROM unnest(%b::text[], %b::int8[], %b::int8[], %b::text[], %b::int8[], "
    b"%b::bytea[], %b::text[], %b::text[])"
)
#: The events numbered after the last position (under the lock); returns that position.
_APPEND = (
    b"WITH m AS (SELECT COALESCE(MAX(position), 0) AS base FROM events), "
    b"ins AS (INSERT INTO events (stream, seq, position, type, recorded_at, body, prev_hash, "
    b"hash) SELECT u.stream, u.seq, m.base + u.ord, u.type, u.recorded_at, u.body, "
    b"u.prev_hash, u.hash FROM m, unnest(%b::text[], %b::int8[], %b::text[], %b::int8[], "
    b"%b::bytea[], %b::text[], %b::text[]) "
    b"WITH ORDINALITY AS u(stream, seq, type, recorded_at, body, prev_hash, hash, ord) "
    b"RETURNING 1) "
    b"SELECT base, (SELECT count(*) FROM ins) FROM m"
)
INSERT_BLOBS = (
    b"INSERT INTO blobs (digest, data) SELECT * FROM unnest(%b::text[], %b::bytea[]) "
    b"ON CONFLICT (digest) DO NOTHING"
)
_HEADS = (
    b"SELECT DISTINCT ON (stream) stream, seq, hash FROM events "
    b"WHERE stream = ANY(%b::text[]) AND seq >= 0 ORDER BY stream, seq DESC"
)


def insert_events(conn: psycopg.Connection[Any], events: Sequence[Event]) -> None:
    """One INSERT of ``events`` (inside the caller's transaction)."""
    if events:
        columns = list(zip(*((e.stream, e.seq, e.position, e.type, e.recorded_at, e.body,
                               e.prev_hash, e.hash) for e in events), strict=True))  # fmt: skip
        conn.execute(INSERT_EVENTS, [list(c) for c in columns])


def insert_blobs(conn: psycopg.Connection[Any], blobs: dict[str, bytes]) -> None:
    if blobs:
        conn.execute(INSERT_BLOBS, (list(blobs), list(blobs.values())))


def drop_blobs(
    conn: psycopg.Connection[Any], candidates: Sequence[str], since: int | None, live: list[str]
) -> list[int]:
    """(In the archive's transaction, under the writers' lock: every append that
    committed before is seen, every later one inserts the blobs it names again) delete
    the ``candidates`` no event or snapshot left in the log names; their sizes. With
    ``since``, events up to that position were scanned before (outside the ``live``
    streams, read whole here)."""
    if not candidates:
        return []

    def bodies(sql: bytes, params: tuple[Any, ...] = ()) -> Iterator[bytes]:
        with conn.cursor(name="skillog_blob_references") as cursor:
            cursor.itersize = 10_000
            cursor.execute(sql, params)
            yield from (bytes(row[0]) for row in cursor)

    events = (
        bodies(b"SELECT body FROM events")
        if since is None
        else bodies(b"SELECT body FROM events WHERE position > %s", (since,))
    )
    dead = unreferenced(
        candidates,
        itertools.chain(
            events,
            bodies(b"SELECT body FROM events WHERE stream = ANY(%s::text[])", (live,)),
            bodies(b"SELECT state FROM eventlog_snapshots"),
        ),
    )
    if not dead:
        return []
    rows = conn.execute(
        b"DELETE FROM blobs WHERE digest = ANY(%s::text[]) RETURNING octet_length(data)", (dead,)
    ).fetchall()
    return [int(row[0]) for row in rows]


def lock_for_append(conn: psycopg.Connection[Any]) -> int:
    """Inside a transaction: take the writers' lock; the last position (0 when empty)."""
    conn.execute(b"LOCK TABLE events IN EXCLUSIVE MODE")
    row = conn.execute(b"SELECT COALESCE(MAX(position), 0) FROM events").fetchone()
    assert row is not None
    return int(row[0])


def heads_of(conn: psycopg.Connection[Any], streams: Sequence[str]) -> dict[str, tuple[int, str]]:
    """(length, last hash) of each stream that has events."""
    rows = conn.execute(_HEADS, (list(streams),)).fetchall()
    return {r[0]: (int(r[1]) + 1, str(r[2])) for r in rows}


def notify(conn: psycopg.Connection[Any]) -> None:
    """Wake the followers when this transaction commits."""
    conn.execute(f"NOTIFY {CHANNEL}".encode())


class PgWriter(BatchWriter):
    """Owns the write connection; :meth:`run` is the thread's body."""

    def __init__(
        self,
        connect: Callable[[], psycopg.Connection[Any]],
        dsn: str,
        where: str,
        token: trio.lowlevel.TrioToken,
        on_commit: Callable[[], None],
        *,
        reconnect_timeout: float,
        projection: Projection | None = None,
    ) -> None:
        super().__init__(where, token, on_commit)
        self._connect = connect
        self._conn = connect()
        self._dsn = dsn
        self._reconnect_timeout = reconnect_timeout
        self._heads: dict[str, tuple[int, str]] = {}
        self.projection = projection
        self._catalog_current: bool | None = None

    def close(self) -> None:
        self._conn.close()

    # -- transactions -----------------------------------------------------------------

    def _transaction(self, fn: Callable[[], T]) -> T:
        """``fn()`` inside BEGIN ... COMMIT; rolled back on any exception."""
        conn = self._conn
        conn.execute(b"BEGIN")
        try:
            result = fn()
            conn.execute(b"COMMIT")
        except BaseException:
            if not conn.broken:
                with contextlib.suppress(psycopg.Error):  # the original error matters
                    conn.execute(b"ROLLBACK")
            raise
        return result

    def _reconnect(self) -> BaseException | None:
        """A new connection within the timeout; the last error if none could be made."""
        self._conn.close()
        deadline = time.monotonic() + self._reconnect_timeout
        while True:
            try:
                self._conn = self._connect()
                return None
            except EventLogError as e:
                if time.monotonic() >= deadline:
                    return e
            time.sleep(0.2)

    def call(self, request: CallRequest) -> None:
        assert request.fn is not None
        fn = request.fn
        # ``fn`` may append (an import): forget the heads whatever happens.
        self._forget()
        try:
            request.result = self._transaction(lambda: fn(self._conn))
        except psycopg.Error as e:
            request.error = translate(e, self._dsn, request.doing)
            request.error.__cause__ = e
            if self._conn.broken:
                self._reconnect()
        except Exception as e:  # delivered to the caller, re-raised there
            request.error = e

    def _forget(self) -> None:
        self._heads.clear()
        self._catalog_current = None

    # -- the catalog ------------------------------------------------------------------

    def project(self, events: Sequence[Event]) -> None:
        """Keep the catalog equal to the fold, in the transaction appending ``events``
        (without the projection, record that it no longer is)."""
        conn = self._conn
        self._catalog_current = keep_current(
            self._catalog_current,
            self.projection,
            events,
            built=lambda: catalog.built(conn) is not None,
            project=lambda projection, new: catalog.project(conn, projection, new),
            mark_stale=lambda: catalog.mark_stale(conn),
        )

    def build_catalog(self, conn: psycopg.Connection[Any]) -> int:
        assert self.projection is not None
        return catalog.rebuild(conn, self.projection)

    def claim(self, conn: psycopg.Connection[Any], claim: Claim) -> list[Event]:
        """(In a transaction) take up to ``claim.limit`` free claimable rows, skipping
        rows another transaction holds; append each one's claim event."""
        last = lock_for_append(conn)
        found = conn.execute(catalog.CLAIMABLE, (claim.now, claim.limit)).fetchall()
        streams = [claim.stream_of(r[0]) for r in found]
        heads = heads_of(conn, streams)
        events: list[Event] = []
        for r, stream in zip(found, streams, strict=True):
            length, prev = heads.get(stream, (0, GENESIS_HASH))
            events += build_events(stream, prev, length, last + 1 + len(events),
                                   [claim.event_of(r[0])])  # fmt: skip
        if events:
            insert_events(conn, events)
            notify(conn)
            self.project(events)
        return events

    def archive(self, conn: psycopg.Connection[Any], commit: ArchiveCommit) -> ArchiveOutcome:
        """(In a transaction, under the writers' lock) remove each group of streams
        whose heads are still the ones archived, leave their tombstones and record
        ``log.archived``; a group that moved (or whose lease is held) is skipped whole."""
        last = lock_for_append(conn)
        projection = self.projection
        chosen = heads_of(conn, [h.stream for h in commit.heads])  # one query for most

        def head(stream: str) -> tuple[int, str] | None:
            found = chosen.get(stream) if stream in chosen else heads_of(conn, [stream]).get(stream)
            return None if found is None else (found[0] - 1, found[1])

        def held(key: str) -> bool:
            sql = b"SELECT 1 FROM eventlog_catalog WHERE key = %s AND holder IS NOT NULL FOR UPDATE"
            return projection is not None and conn.execute(sql, (key,)).fetchone() is not None

        def remove(key: str, streams: list[str]) -> None:
            conn.execute(
                b"DELETE FROM events WHERE stream = ANY(%s::text[]) AND seq >= 0", (streams,)
            )
            conn.execute(
                b"DELETE FROM eventlog_snapshots WHERE stream = ANY(%s::text[])", (streams,)
            )
            if projection is not None:
                conn.execute(b"DELETE FROM eventlog_catalog WHERE key = %s", (key,))

        since = commit.scanned.position if incremental(commit, head) else None  # type: ignore[union-attr]
        outcome = sort_out(commit, projection, head=head, held=held, remove=remove)
        stones = outcome.tombstones
        if stones:
            conn.execute(
                b"INSERT INTO eventlog_tombstones (stream, length, head_hash, checkpoint) "
                b"SELECT * FROM unnest(%s::text[], %s::bigint[], %s::text[], %s::text[])",
                (
                    [t.stream for t in stones],
                    [t.length for t in stones],
                    [t.head_hash for t in stones],
                    [t.checkpoint for t in stones],
                ),
            )
            event, blob = archived_event(commit, outcome)
            length, prev = heads_of(conn, [MAINTENANCE_STREAM]).get(
                MAINTENANCE_STREAM, (0, GENESIS_HASH)
            )
            events = build_events(MAINTENANCE_STREAM, prev, length, last + 1, [event])
            insert_blobs(conn, {blob_digest(blob): blob})
            insert_events(conn, events)
            notify(conn)
            self.project(events)
            live = still_live(commit, outcome)
            outcome = with_blobs(outcome, drop_blobs(conn, commit.blobs, since, live))
        self._forget()
        return outcome

    # -- appends ----------------------------------------------------------------------

    def commit_appends(self, requests: Sequence[AppendRequest]) -> None:
        for _ in range(ATTEMPTS):
            heads: dict[str, tuple[int, str]] = {}
            try:
                self._append(requests, heads)
            except psycopg.Error as e:
                self._forget()
                if self._conn.broken:
                    lost = self._reconnect()
                    if lost is None and self._committed(requests):
                        return
                    if lost is None:
                        continue  # not committed: run the batch again
                    self._fail(requests, e, lost)
                    return
                self._failed(requests, e)
                return
            self._heads.update(heads)
            return
        self._fail(requests, None, None)

    def _failed(self, requests: Sequence[AppendRequest], e: psycopg.Error) -> None:
        """The transaction failed (connection intact): give each caller its outcome."""
        if len(requests) > 1:
            for r in requests:
                self.commit_appends([r])
            return
        (r,) = requests
        r.result = None
        if isinstance(e, errors.UniqueViolation):
            # The unique key caught what the seq check did not (a writer that did not
            # take the lock): report it as the conflict it is.
            r.error = ConcurrencyError(r.stream, r.expected_seq, self._length(r.stream))
        else:
            r.error = translate(e, self._dsn, "appending")
        r.error.__cause__ = e

    def _fail(
        self, requests: Sequence[AppendRequest], e: BaseException | None, lost: BaseException | None
    ) -> None:
        why = f"could not reconnect within {self._reconnect_timeout:g}s ({lost})" if lost else (
            f"the connection was lost {ATTEMPTS} times in a row"
        )  # fmt: skip
        for r in requests:
            r.result = None
            r.error = StoreError(
                f"{self.where}: appending to stream {r.stream!r}: lost the connection to the "
                f"server and {why}; the append may or may not have been committed - re-read "
                "the stream's head before retrying"
            )
            r.error.__cause__ = e or lost

    def _committed(self, requests: Sequence[AppendRequest]) -> bool:
        """After a lost connection: did the batch's transaction commit (all or none)?

        Proof: the last event of an append is stored at its seq with the hash we
        computed (it chains our bodies onto the head we read). If so, each append's
        result gets the positions the server gave.
        """
        built = [r for r in requests if r.result]
        if not built:
            return False  # nothing but blobs: storing them again is harmless
        last: Event = built[0].result[-1]
        sql = b"SELECT position, hash FROM events WHERE stream = %s AND seq >= %s AND seq <= %s "
        try:
            row = self._conn.execute(
                sql + b"AND hash = %s", (last.stream, last.seq, last.seq, last.hash)
            ).fetchone()
            if row is None:
                return False
            for r in built:
                events: tuple[Event, ...] = r.result
                rows = self._conn.execute(
                    sql + b"ORDER BY seq", (r.stream, events[0].seq, events[-1].seq)
                ).fetchall()
                r.result = tuple(
                    msgspec.structs.replace(e, position=p)
                    for e, (p, _) in zip(events, rows, strict=True)
                )
        except psycopg.Error:
            return False  # lost again: the next attempt reconnects and finds out
        return True

    def _length(self, stream: str) -> int:
        try:
            return heads_of(self._conn, [stream]).get(stream, (0, ""))[0]
        except psycopg.Error:  # pragma: no cover - only used to word an error
            return -1

    def _append(self, requests: Sequence[AppendRequest], heads: dict[str, tuple[int, str]]) -> None:
        """One transaction for the batch; fills ``heads`` and each request's outcome."""
        conn = self._conn
        known = self._heads
        if len(known) > MAX_HEADS:
            self._forget()
        check = sorted(
            {
                r.stream
                for r in requests
                if r.events and known.get(r.stream, (-1,))[0] != r.expected_seq
            }
        )
        try:
            with conn.pipeline():
                conn.execute(b"BEGIN")
                conn.execute(b"LOCK TABLE events IN EXCLUSIVE MODE")
                if check:  # heads we do not know, or that disagree: read them under the lock
                    found = heads_of(conn, check)
                    known.update((s, found.get(s, (0, GENESIS_HASH))) for s in check)
                columns = self._build(requests, heads)
                if columns:
                    cursor = conn.execute(_APPEND, columns)
                    notify(conn)
                    self.project([e for r in requests if r.result for e in r.result])
                conn.execute(b"COMMIT")
        except BaseException:
            for r in requests:
                r.result = r.result if conn.broken else None  # kept to prove a commit
            if not conn.broken:
                with contextlib.suppress(psycopg.Error):  # the original error matters
                    conn.execute(b"ROLLBACK")
            raise
        if columns:
            row = cursor.fetchone()
            assert row is not None
            base = int(row[0])
            for r in requests:
                if r.result:
                    r.result = tuple(
                        msgspec.structs.replace(e, position=base + e.position) for e in r.result
                    )

    def _build(
        self, requests: Sequence[AppendRequest], heads: dict[str, tuple[int, str]]
    ) -> list[list[Any]]:
        """Chain each append onto its head; the INSERT's columns (empty: no events).

        Positions are relative (1, 2, ...) until the server numbers them.
        """
        known = self._heads
        position = 1
        rows: list[Event] = []
        blobs: dict[str, bytes] = {}
        for r in requests:
            r.error = r.result = None
            if not r.events:  # a put_blob
                blobs.update((blob_digest(b), b) for b in r.blobs)
                continue
            stream = r.stream
            length, prev = heads.get(stream) or known.get(stream) or (0, GENESIS_HASH)
            if r.expected_seq != length:
                r.error = ConcurrencyError(stream, r.expected_seq, length)
                continue
            events = build_events(stream, prev, length, position, r.events)
            position += len(events)
            heads[stream] = (length + len(events), events[-1].hash)
            rows.extend(events)
            blobs.update((blob_digest(b), b) for b in r.blobs)
            r.result = tuple(events)
        insert_blobs(self._conn, blobs)
        if not rows:
            return []
        return [
            [e.stream for e in rows],
            [e.seq for e in rows],
            [e.type for e in rows],
            [e.recorded_at for e in rows],
            [e.body for e in rows],
            [e.prev_hash for e in rows],
            [e.hash for e in rows],
        ]
