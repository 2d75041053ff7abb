"""The PostgreSQL event store: one writer thread, pooled readers, LISTEN/NOTIFY.

psycopg 3's sync driver runs where it cannot block the trio loop: the writer's
connection in its own thread (group commit, like the SQLite store), readers in trio's
worker threads. ``follow`` needs no thread: it waits with ``trio.lowlevel.wait_readable``
on the socket of a connection that LISTENs (docs/design-notes.md says why not psycopg's
async connection).
"""

from __future__ import annotations

import re
import threading
from collections.abc import AsyncIterator, Awaitable, Callable, Collection, Sequence
from contextlib import asynccontextmanager
from typing import Any, BinaryIO, TypeVar

import outcome
import psycopg
import trio

from . import _postgres_catalog as catalog
from ._catalog import CatalogRow, Claim, Listing, Projection
from ._errors import BlobNotFoundError, DatabaseFormatError, ReadOnlyDatabaseError, StoreError
from ._hashchain import (
    GENESIS_HASH,
    blob_digest,
    check_blobs,
    check_int,
    check_name,
    check_new_events,
    in_log,
)
from ._jsonl import ImportReport, import_lines
from ._postgres_db import CHANNEL, check_readable, connect, migrate, redact, translate, where
from ._postgres_writer import PgWriter, heads_of, insert_blobs, insert_events, lock_for_append
from ._postgres_writer import notify as notify_followers
from ._snapshot import Snapshot
from ._tombstone import ArchiveCommit, ArchiveOutcome, Tombstone, archived_stream
from ._types import Event, Head, NewEvent, StreamInfo, closing
from ._verify import ChainCheck
from ._writer import AppendRequest, CallRequest, Request

__all__ = ["PostgresStore", "open_postgres_store", "redact"]

T = TypeVar("T")
BATCH = 2000
#: Rows per round trip when streaming events (read, read_all, follow, verify): a fold of a long
#: stream costs one query and one thread hop per READ_BATCH rows, fetched in binary.
READ_BATCH = 20_000
_COLS = "stream, seq, position, type, recorded_at, body, prev_hash, hash"
#: :func:`in_log` in PostgreSQL's SQL (the column types already make seq an integer and
#: stream text without NUL); queries that name a valid stream need only ``seq >= 0``.
IN_LOG = r"seq >= 0 AND char_length(stream) BETWEEN 1 AND 256 AND stream !~ '[\x01-\x1f\x7f]'"
Conn = psycopg.Connection[Any]


def _events(rows: list[Any]) -> list[Event]:
    return [
        Event(
            stream=r[0],
            seq=r[1],
            position=r[2],
            type=r[3],
            recorded_at=r[4],
            body=r[5],
            prev_hash=r[6],
            hash=r[7],
        )
        for r in rows
    ]


def _fetch_binary(conn: Conn, sql: str, params: tuple[object, ...]) -> list[Any]:
    """Rows of ``sql`` in PostgreSQL's binary format: integers and bytea arrive as they
    are stored, not as decimal and hex text to parse (a third of a fold's time)."""
    with conn.cursor(binary=True) as cursor:
        return cursor.execute(sql.encode(), params).fetchall()


class _Fetch:
    """``fn()`` running in a worker thread from now on; ``await result()`` for its
    value (or exception). Unlike ``trio.to_thread.run_sync`` nobody waits for it while
    it runs, so a reader can fetch a batch while its caller works on the last one."""

    def __init__(self, fn: Callable[[], list[Any]]) -> None:
        self.done = trio.Event()
        self._outcome: outcome.Outcome[list[Any]] | None = None
        token = trio.lowlevel.current_trio_token()

        def deliver(result: outcome.Outcome[list[Any]]) -> None:
            self._outcome = result
            token.run_sync_soon(self.done.set)

        trio.lowlevel.start_thread_soon(fn, deliver)

    async def result(self) -> list[Any]:
        await self.done.wait()
        assert self._outcome is not None
        return self._outcome.unwrap()


class PostgresStore:
    """An :class:`EventStore` in a PostgreSQL database; get one from
    :func:`open_postgres_store`.

    Appends go to the writer thread and are group-committed; ``append`` returns after
    COMMIT (durable as the server's ``synchronous_commit`` promises: by default, after
    the WAL is flushed). Any number of processes may write one database: the table lock
    orders them and ``UNIQUE (stream, seq)`` makes a fork impossible. ``follow`` wakes on
    NOTIFY from any writer, no polling.
    """

    def __init__(
        self, dsn: str, *, readonly: bool, connect_timeout: float, reconnect_timeout: float = 10.0
    ) -> None:
        self.dsn = dsn
        self.where = where(dsn)
        self.readonly = readonly
        self._connect_timeout = connect_timeout
        self._reconnect_timeout = reconnect_timeout
        self._writer: PgWriter | None = None
        self.projection: Projection | None = None
        self._idle: list[Conn] = []
        self._lock = threading.Lock()

    # -- plumbing -------------------------------------------------------------------

    def _connect(self, role: str) -> Conn:
        return connect(self.dsn, role=role, connect_timeout=self._connect_timeout)

    def _reader(self) -> Conn:
        conn = self._connect("reader")
        # A reader never writes, whatever the caller's SQL.
        conn.execute(b"SET default_transaction_read_only = on")
        return conn

    async def _submit(self, request: Request) -> Any:
        if self._writer is None:
            raise ReadOnlyDatabaseError(
                f"{self.where}: opened read-only; open it without readonly=True to write"
            )
        return await self._writer.submit(request)

    def _take(self) -> tuple[Conn, bool]:
        """An idle reader out of the pool, or a new one (then ``True``: fresh)."""
        with self._lock:
            conn = self._idle.pop() if self._idle else None
        return (self._reader(), True) if conn is None else (conn, False)

    def _with_reader(self, fn: Callable[[Conn], T], doing: str) -> T:
        """``fn(conn)`` on an idle reader; once more on a new connection if the first
        one turns out to be dead (a server restart since it was last used)."""
        for attempt in (1, 2):
            conn, fresh = self._take()
            try:
                return fn(conn)
            except psycopg.Error as e:
                if not conn.broken:
                    raise translate(e, self.dsn, doing) from e
                conn.close()
                if attempt == 2 or fresh:
                    raise translate(e, self.dsn, doing) from e
            finally:
                if not conn.closed:
                    with self._lock:
                        self._idle.append(conn)
        raise AssertionError("unreachable")  # pragma: no cover

    async def _read(self, fn: Callable[[Conn], T], doing: str) -> T:
        return await trio.to_thread.run_sync(self._with_reader, fn, doing)

    def _close_readers(self) -> None:
        with self._lock:
            idle, self._idle = self._idle, []
        for conn in idle:
            conn.close()

    # -- writing --------------------------------------------------------------------

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
        ``on_durable`` runs in the writer thread as the commit returns."""
        check_new_events(stream, events, expected_seq)
        check_blobs(blobs)
        request = AppendRequest(
            stream=stream,
            events=tuple(events),
            expected_seq=expected_seq,
            blobs=tuple(blobs),
            on_durable=on_durable,
        )
        result: tuple[Event, ...] = await self._submit(request)
        return result

    async def put_blob(self, data: bytes) -> str:
        """Store ``data`` once under its sha256 (group-committed like appends)."""
        check_blobs([data])
        await self._submit(AppendRequest(blobs=(data,)))
        return await trio.to_thread.run_sync(blob_digest, data)

    async def call_in_writer(self, fn: Callable[[Conn], T], *, doing: str = "writing") -> T:
        """Run ``fn(conn)`` in the writer thread inside one transaction (other appends
        wait); for bulk work that must commit atomically."""
        result: T = await self._submit(CallRequest(fn=fn, doing=doing))
        return result

    async def import_lines(
        self, f: BinaryIO, source: str, progress: Callable[[int], None] | None
    ) -> ImportReport:
        """Import a JSON Lines export in one transaction (see :func:`import_jsonl`)."""

        writer = self._writer

        def run(conn: Conn) -> ImportReport:
            def insert(events: list[Event]) -> None:
                insert_events(conn, events)
                if writer is not None:
                    writer.project(events)

            last = lock_for_append(conn)
            report, blobs, position = import_lines(
                f,
                source,
                head_of=lambda s: import_head(conn, source, s),
                first_position=last + 1,
                insert=insert,
                progress=progress,
            )
            insert_blobs(conn, blobs)
            if position > last + 1:
                notify_followers(conn)
            return report

        return await self.call_in_writer(run, doing="importing")

    async def save_snapshot(self, snapshot: Snapshot) -> None:
        """Store ``snapshot``, replacing the previous one of its stream and name."""
        check_name("snapshot name", snapshot.name)

        def save(conn: Conn) -> None:
            conn.execute(
                b"INSERT INTO eventlog_snapshots (stream, name, seq, hash, state) "
                b"VALUES (%s, %s, %s, %s, %s) ON CONFLICT (stream, name) DO UPDATE SET "
                b"seq = EXCLUDED.seq, hash = EXCLUDED.hash, state = EXCLUDED.state",
                (snapshot.stream, snapshot.name, snapshot.seq, snapshot.hash, snapshot.state),
            )

        await self.call_in_writer(save, doing="saving a snapshot")

    # -- reading --------------------------------------------------------------------

    async def load_snapshot(self, stream: str, name: str) -> Snapshot | None:
        """The stored snapshot of ``stream`` named ``name``, if any."""

        def load(conn: Conn) -> Snapshot | None:
            row = conn.execute(
                b"SELECT seq, hash, state FROM eventlog_snapshots WHERE stream = %s AND name = %s",
                (stream, name),
            ).fetchone()
            if row is None:
                return None
            return Snapshot(stream=stream, name=name, seq=row[0], hash=row[1], state=row[2])

        return await self._read(load, "loading a snapshot")

    async def head(self, stream: str) -> Head | None:
        """The last event's seq and hash, or None for a stream with no events."""

        def head(conn: Conn) -> Head | None:
            row = conn.execute(
                b"SELECT seq, hash FROM events WHERE stream = %s AND seq >= 0 "
                b"ORDER BY seq DESC LIMIT 1",
                (stream,),
            ).fetchone()
            return None if row is None else Head(seq=row[0], hash=row[1])

        if not in_log(stream, 0):
            return None
        return await self._read(head, f"reading the head of stream {stream!r}")

    async def read(
        self, stream: str, *, from_seq: int = 0, to_seq: int | None = None
    ) -> AsyncIterator[Event]:
        """Events of ``stream`` with ``from_seq <= seq < to_seq``, in seq order."""
        check_int("from_seq", from_seq)
        end = check_int("to_seq", to_seq) if to_seq is not None else 2**63 - 1
        if not in_log(stream, 0):
            return
        sql = f"SELECT {_COLS} FROM events WHERE stream = %s AND seq >= %s AND seq < %s "
        sql += "ORDER BY seq"
        doing = f"reading stream {stream!r}"
        async with closing(self._stream(sql, (stream, from_seq, end), doing)) as batches:
            async for rows in batches:
                for event in _events(rows):
                    yield event

    async def read_all(self, *, from_position: int = 0) -> AsyncIterator[Event]:
        """Every event with ``position >= from_position``, in position order."""
        check_int("from_position", from_position)
        sql = f"SELECT {_COLS} FROM events WHERE position >= %s AND {IN_LOG} ORDER BY position"
        async with closing(self._stream(sql, (from_position,), "reading all events")) as batches:
            async for rows in batches:
                for event in _events(rows):
                    yield event

    async def _stream(
        self, sql: str, params: tuple[object, ...], doing: str
    ) -> AsyncIterator[list[Any]]:
        """The rows of ``sql`` in batches of READ_BATCH, from one server-side cursor in
        one read-only transaction (one snapshot; no re-planning or re-sorting per batch,
        whatever the planner's statistics say), fetched in binary. The next batch is
        fetched while the caller works on this one (the server reads and sends rows
        while Python decodes: a fold pays the slower of the two, not their sum). The
        reader goes back to the pool when the iteration ends, however it ends."""

        def open_cursor(conn: Conn) -> psycopg.ServerCursor[Any]:
            conn.execute(b"BEGIN READ ONLY")
            cursor = conn.cursor("skillog_read", binary=True)
            cursor.execute(sql.encode(), params)
            return cursor

        conn, cursor = await trio.to_thread.run_sync(self._checkout, open_cursor, doing)

        def fetch() -> list[Any]:
            return self._on(conn, lambda c: cursor.fetchmany(READ_BATCH), doing)

        fetching: _Fetch | None = _Fetch(fetch)
        try:
            while fetching is not None:
                rows = await fetching.result()
                fetching = None
                if len(rows) == READ_BATCH:
                    fetching = _Fetch(fetch)
                if rows:
                    yield rows
        finally:
            with trio.CancelScope(shield=True):
                if fetching is not None:
                    await fetching.done.wait()
                await trio.to_thread.run_sync(self._checkin, conn, cursor)

    def _checkout(self, fn: Callable[[Conn], T], doing: str) -> tuple[Conn, T]:
        """An idle reader taken out of the pool, and ``fn(conn)``'s result; once more on
        a new connection if the pooled one turns out to be dead."""
        for attempt in (1, 2):
            conn, fresh = self._take()
            try:
                return conn, fn(conn)
            except psycopg.Error as e:
                broken = conn.broken
                self._checkin(conn, None)
                if not broken or attempt == 2 or fresh:
                    raise translate(e, self.dsn, doing) from e
        raise AssertionError("unreachable")  # pragma: no cover

    def _on(self, conn: Conn, fn: Callable[[Conn], T], doing: str) -> T:
        try:
            return fn(conn)
        except psycopg.Error as e:
            raise translate(e, self.dsn, doing) from e

    def _checkin(self, conn: Conn, cursor: psycopg.ServerCursor[Any] | None) -> None:
        """End ``conn``'s transaction and give it back to the pool (or close it)."""
        try:
            if cursor is not None:
                cursor.close()
            conn.execute(b"ROLLBACK")
        except psycopg.Error:
            conn.close()
        if not conn.closed:
            with self._lock:
                self._idle.append(conn)

    async def _fetch_from(self, position: int) -> list[Any]:
        sql = f"SELECT {_COLS} FROM events WHERE position >= %s AND {IN_LOG} "
        sql += "ORDER BY position LIMIT %s"
        return await self._read(
            lambda c: _fetch_binary(c, sql, (position, READ_BATCH)), "reading all events"
        )

    async def follow(self, *, from_position: int = 0) -> AsyncIterator[Event]:
        """Like :meth:`read_all`, then yields events as they commit, until cancelled.

        Woken by the NOTIFY of every append transaction, from any process. The LISTEN
        starts before the first read, so a commit between a read and the wait is never
        missed; a lost listening connection is reopened and the log re-read.
        """
        check_int("from_position", from_position)
        listener: Conn | None = None
        try:
            position = from_position
            while True:
                if listener is None:
                    listener = await self._relisten()
                rows = await self._fetch_from(position)
                for event in _events(rows):
                    yield event
                if rows:
                    position = rows[-1][2] + 1
                if len(rows) < READ_BATCH and not await _notified(listener):
                    listener.close()
                    listener = None
                    await trio.sleep(0.2)  # the server is restarting: reconnect shortly
        finally:
            if listener is not None:
                listener.close()

    def _listen(self, channel: str = CHANNEL) -> Conn:
        conn = self._connect("follower")
        conn.execute(f"LISTEN {channel}".encode())
        return conn

    @asynccontextmanager
    async def wakeups(self) -> AsyncIterator[Callable[[], Awaitable[bool]]]:
        """A wait for the next transaction that makes a catalog row runnable
        (``LISTEN``): it returns True when one committed, False when the listening
        connection was lost (then the caller polls)."""
        conn = await trio.to_thread.run_sync(self._listen, catalog.RUNNABLE)
        lost = False

        async def wait() -> bool:
            nonlocal lost
            if lost:
                await trio.sleep_forever()
            lost = not await _notified(conn)
            return not lost

        try:
            yield wait
        finally:
            conn.close()

    # -- side channels: notifications nobody stores --------------------------------

    @asynccontextmanager
    async def notifier(
        self, channel: str
    ) -> AsyncIterator[Callable[[Sequence[str]], Awaitable[None]]]:
        """For the block, a send of ``NOTIFY channel, payload`` per payload on a
        connection of its own: delivered to whoever LISTENs on ``channel`` now, stored
        nowhere (for what the log does not hold, e.g. previews of streamed answers).
        PostgreSQL refuses a payload of 8000 bytes or more (``StoreError``)."""
        check_channel(channel)
        conn = await trio.to_thread.run_sync(self._connect, "notifier")

        def send_now(payloads: Sequence[str]) -> None:
            for payload in payloads:
                conn.execute(b"SELECT pg_notify(%s, %s)", (channel, payload))

        async def send(payloads: Sequence[str]) -> None:
            try:
                await trio.to_thread.run_sync(send_now, list(payloads))
            except psycopg.Error as e:
                raise translate(e, self.dsn, f"notifying {channel}") from e

        try:
            yield send
        finally:
            conn.close()

    @asynccontextmanager
    async def notifications(
        self, channel: str
    ) -> AsyncIterator[Callable[[], Awaitable[list[str] | None]]]:
        """For the block, ``LISTEN channel``: a wait for the next notifications that
        returns their payloads, or None when the connection was lost."""
        check_channel(channel)
        conn = await trio.to_thread.run_sync(self._listen, channel)

        async def receive() -> list[str] | None:
            pgconn = conn.pgconn
            while True:
                try:
                    pgconn.consume_input()
                except psycopg.Error:
                    return None
                got = []
                while (note := pgconn.notifies()) is not None:
                    got.append(note.extra.decode())
                if got:
                    return got
                if pgconn.status != psycopg.pq.ConnStatus.OK:
                    return None  # pragma: no cover - consume_input reports it first
                await trio.lowlevel.wait_readable(pgconn.socket)

        try:
            yield receive
        finally:
            conn.close()

    async def _relisten(self) -> Conn:
        """A LISTENing connection. While the server restarts (connections refused), it
        is tried again for up to the store's reconnect timeout, as the writer does."""
        deadline = trio.current_time() + self._reconnect_timeout
        while True:
            try:
                return await trio.to_thread.run_sync(self._listen)
            except DatabaseFormatError:
                raise  # not a restart: nothing to wait for
            except StoreError:
                if trio.current_time() >= deadline:
                    raise
                await trio.sleep(0.2)

    async def check_chains(
        self, checks: Sequence[ChainCheck], progress: Callable[[int], None] | None = None
    ) -> None:
        """Feed each check its stream's stored rows in seq order, all in one worker
        thread hop and one read-only transaction: the streams' rows come from one
        server-side cursor ordered by (stream, seq), so a log of many short sessions
        pays a few round trips per call, not per stream."""
        sql = (
            b"SELECT stream, seq, type, recorded_at, body, prev_hash, hash FROM events "
            b"WHERE stream = ANY(%s::text[]) AND seq >= 0 ORDER BY stream, seq"
        )
        by_stream = {check.stream: check for check in checks}
        assert len(by_stream) == len(checks), "one check per stream"

        def feed(stream: str, rows: list[Any]) -> None:
            check = by_stream[stream]
            if check.fault is None and check.feed(rows) is None and progress is not None:
                progress(len(rows))

        def run(conn: Conn) -> None:
            conn.execute(b"BEGIN READ ONLY")
            try:
                # A server-side cursor, as _stream: one plan, whatever the statistics say.
                with conn.cursor("skillog_verify", binary=True) as cursor:
                    cursor.execute(sql, (list(by_stream),))
                    while batch := cursor.fetchmany(READ_BATCH):
                        stream, rows = batch[0][0], list[Any]()
                        for row in batch:
                            if row[0] != stream:
                                feed(stream, rows)
                                stream, rows = row[0], []
                            rows.append(row[1:])
                        feed(stream, rows)
            finally:
                conn.execute(b"ROLLBACK")

        what = f"stream {checks[0].stream!r}" if len(checks) == 1 else f"{len(checks)} streams"
        await self._read(run, f"verifying {what}")

    async def row_count(self, stream: str | None = None) -> int:
        """Every row of the events table (of ``stream``), in the log or not (verify
        compares counts)."""
        sql = b"SELECT count(*) FROM events"
        params: tuple[str, ...] = ()
        if stream is not None:
            sql, params = sql + b" WHERE stream = %s", (stream,)

        def count(conn: Conn) -> int:
            row = conn.execute(sql, params).fetchone()
            return int(row[0]) if row else 0

        return await self._read(count, "counting events")

    async def read_strays(
        self, stream: str | None = None
    ) -> AsyncIterator[tuple[int, object, object]]:
        """``(position, stream, seq)`` of every row (of ``stream``) outside the log, as
        stored."""
        only = "" if stream is None else "stream = %s AND "
        sql = (
            f"SELECT position, stream, seq FROM events WHERE {only}position > %s "
            f"AND NOT ({IN_LOG}) ORDER BY position LIMIT %s"
        ).encode()
        scope = () if stream is None else (stream,)
        after = -(2**63)
        while True:

            def fetch(c: Conn, a: int = after) -> list[Any]:
                return c.execute(sql, (*scope, a, BATCH)).fetchall()

            rows = await self._read(fetch, "looking for rows outside the log")
            for position, name, seq in rows:
                yield position, name, seq
            if len(rows) < BATCH:
                return
            after = rows[-1][0]

    async def last_position(self) -> int:
        """The highest position in the database (0 when empty); a cheap progress total."""

        def last(conn: Conn) -> int:
            row = conn.execute(b"SELECT COALESCE(MAX(position), 0) FROM events").fetchone()
            return int(row[0]) if row else 0

        return await self._read(last, "reading the last position")

    async def streams(self) -> list[StreamInfo]:
        """One summary per stream, ordered by stream id (a skip-scan: no full scan)."""

        def streams(conn: Conn) -> list[StreamInfo]:
            rows = conn.execute(
                b"""WITH RECURSIVE s(stream) AS (
                    SELECT MIN(stream) FROM events
                    UNION ALL
                    SELECT (SELECT MIN(stream) FROM events WHERE stream > s.stream)
                    FROM s WHERE s.stream IS NOT NULL
                )
                SELECT s.stream, h.seq, h.hash, f.recorded_at, h.recorded_at FROM s
                CROSS JOIN LATERAL (SELECT seq, hash, recorded_at FROM events e
                    WHERE e.stream = s.stream AND seq >= 0 ORDER BY seq DESC LIMIT 1) h
                CROSS JOIN LATERAL (SELECT recorded_at FROM events e
                    WHERE e.stream = s.stream AND seq >= 0 ORDER BY seq LIMIT 1) f
                WHERE s.stream IS NOT NULL ORDER BY s.stream"""
            ).fetchall()
            return [
                StreamInfo(
                    stream=r[0],
                    length=int(r[1]) + 1,
                    head_hash=r[2],
                    first_recorded_at=r[3],
                    last_recorded_at=r[4],
                )
                for r in rows
                if in_log(r[0], r[1])
            ]

        return await self._read(streams, "listing streams")

    async def get_blob(self, digest: str) -> bytes:
        """The bytes stored under ``digest``; :class:`BlobNotFoundError` if absent."""

        def get(conn: Conn) -> bytes | None:
            row = conn.execute(b"SELECT data FROM blobs WHERE digest = %s", (digest,)).fetchone()
            return None if row is None else bytes(row[0])

        data = await self._read(get, f"reading blob {digest}") if isinstance(digest, str) else None
        if data is None:
            raise BlobNotFoundError(str(digest))
        return data

    async def has_blob(self, digest: str) -> bool:
        """Whether a blob with this digest is stored."""
        if not isinstance(digest, str):
            return False

        def has(conn: Conn) -> bool:
            sql = b"SELECT 1 FROM blobs WHERE digest = %s"
            return conn.execute(sql, (digest,)).fetchone() is not None

        return await self._read(has, f"looking up blob {digest}")

    async def read_blobs(self) -> AsyncIterator[tuple[str, bytes]]:
        """Every stored ``(digest, data)`` as stored, in digest order, a batch at a time."""
        sql = b"SELECT digest, data FROM blobs WHERE digest > %s ORDER BY digest LIMIT %s"
        after = ""
        while True:

            def fetch(c: Conn, a: str = after) -> list[Any]:
                return c.execute(sql, (a, BATCH)).fetchall()

            rows = await self._read(fetch, "reading blobs")
            for digest, data in rows:
                yield digest, data
            if len(rows) < BATCH:
                return
            after = rows[-1][0]

    # -- the catalog (eventlog/_catalog.py) ---------------------------------------

    async def catalog_built(self, version: str | None = None) -> bool:
        """Whether the catalog is current: built by a projection of ``version``
        (default: this store's projection's; with neither, any) and kept since."""
        want = version or (self.projection.version if self.projection else None)

        def check(conn: Conn) -> bool:
            built = catalog.built(conn)
            return built is not None and want in (None, built)

        return await self._read(check, "reading the catalog")

    async def list_catalog(self, listing: Listing) -> list[CatalogRow]:
        return await self._read(lambda c: catalog.select(c, listing), "listing the catalog")

    async def catalog_row(self, key: str) -> CatalogRow | None:
        def one(conn: Conn) -> CatalogRow | None:
            sql = f"SELECT {catalog.COLUMNS} FROM eventlog_catalog WHERE key = %s"
            row = conn.execute(sql.encode(), (key,)).fetchone()
            return None if row is None else catalog.to_row(row)

        return await self._read(one, "reading the catalog")

    async def read_catalog(self) -> list[CatalogRow]:
        def every(conn: Conn) -> list[CatalogRow]:
            sql = f"SELECT {catalog.COLUMNS} FROM eventlog_catalog ORDER BY key"
            return [catalog.to_row(r) for r in conn.execute(sql.encode()).fetchall()]

        return await self._read(every, "reading the catalog")

    async def catalog_snapshot(
        self, key: str, streams: Sequence[str]
    ) -> tuple[CatalogRow | None, list[Event]]:
        """The catalog row ``key`` and the events of ``streams`` (each in seq order),
        read in one REPEATABLE READ transaction: one snapshot of the log, whatever
        writers commit meanwhile (what verify re-checks a differing row against)."""
        row_sql = f"SELECT {catalog.COLUMNS} FROM eventlog_catalog WHERE key = %s".encode()
        sql = f"SELECT {_COLS} FROM events WHERE stream = %s AND seq >= 0 ORDER BY seq"

        def read(conn: Conn) -> tuple[CatalogRow | None, list[Event]]:
            conn.execute(b"BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY")
            try:
                found = conn.execute(row_sql, (key,)).fetchone()
                rows = [r for s in streams if in_log(s, 0)
                        for r in _fetch_binary(conn, sql, (s,))]  # fmt: skip
            finally:
                if not conn.broken:
                    conn.execute(b"ROLLBACK")
            return (None if found is None else catalog.to_row(found)), _events(rows)

        return await self._read(read, f"reading the catalog row {key!r} with its streams")

    async def claim(self, claim: Claim) -> list[Event]:
        """Claim free claimable rows (``FOR UPDATE SKIP LOCKED``, see :class:`Claim`)."""
        writer = self._writer
        if writer is None or writer.projection is None:
            raise StoreError(f"{self.where}: claims need a store opened with a projection")
        return await self.call_in_writer(lambda conn: writer.claim(conn, claim), doing="claiming")

    async def renew(self, key: str, holder: str, until: int) -> bool:
        """A heartbeat: an UPDATE of the row, allowed only to its holder."""
        return await self.call_in_writer(
            lambda conn: catalog.renew(conn, key, holder, until), doing="renewing a lease"
        )

    async def reindex(self) -> int:
        writer = self._writer
        if writer is None or writer.projection is None:
            raise StoreError(f"{self.where}: reindex needs a store opened with a projection")
        return await self.call_in_writer(writer.build_catalog, doing="rebuilding the catalog")

    # -- retention (eventlog/_archive.py) -------------------------------------------

    async def commit_archive(self, commit: ArchiveCommit) -> ArchiveOutcome:
        """Remove the archived streams, leave their tombstones and record it, in one
        transaction (see :func:`eventlog._archive.archive`)."""
        writer = self._writer
        if writer is None:
            raise ReadOnlyDatabaseError(f"{self.where}: opened read-only")
        return await self.call_in_writer(lambda conn: writer.archive(conn, commit),
                                         doing="archiving")  # fmt: skip

    async def tombstones(self, streams: Collection[str] | None = None) -> list[Tombstone]:
        """The tombstones of archived streams (of ``streams``), by stream."""

        def read(conn: Conn) -> list[Tombstone]:
            if conn.execute(b"SELECT to_regclass('eventlog_tombstones')").fetchone() == (None,):
                return []
            sql = b"SELECT stream, length, head_hash, checkpoint FROM eventlog_tombstones"
            if streams is None:
                rows = conn.execute(sql + b" ORDER BY stream").fetchall()
            else:
                where = b" WHERE stream = ANY(%s::text[]) ORDER BY stream"
                rows = conn.execute(sql + where, (sorted(set(streams)),)).fetchall()
            return [
                Tombstone(stream=r[0], length=int(r[1]), head_hash=r[2], checkpoint=r[3])
                for r in rows
            ]

        return await self._read(read, "reading the tombstones")

    # -- lifecycle ------------------------------------------------------------------

    async def _serve_writer(
        self,
        reconnect_timeout: float,
        *,
        task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED,
    ) -> None:
        token = trio.lowlevel.current_trio_token()

        def started(writer: PgWriter) -> None:
            self._writer = writer
            task_status.started()

        def body() -> None:
            def connect_writer() -> Conn:
                return self._connect("writer")

            writer = PgWriter(
                connect_writer,
                self.dsn,
                self.where,
                token,
                lambda: None,
                reconnect_timeout=reconnect_timeout,
                projection=self.projection,
            )
            try:
                migrate(writer._conn, self.dsn)
                projection = self.projection
                if projection is not None:
                    conn = writer._conn
                    if catalog.built(conn) != projection.version:
                        # A log from before the catalog: fold it once, before any append.
                        writer._transaction(lambda: writer.build_catalog(conn))
                    else:
                        conn.rollback()  # the check's implicit transaction
            except BaseException:
                writer.close()
                raise
            trio.from_thread.run_sync(started, writer)
            writer.run()

        await trio.to_thread.run_sync(body)


def check_channel(channel: str) -> None:
    if not re.fullmatch(r"[a-z_][a-z0-9_]{0,62}", channel):
        raise StoreError(f"{channel!r} is not a notification channel name (a-z, 0-9, _)")


def import_head(conn: Conn, source: str, stream: str) -> tuple[int, str]:
    """The head an imported stream continues; an archived stream is refused."""
    head = heads_of(conn, [stream]).get(stream)
    if head is not None:
        return head
    archived = b"SELECT 1 FROM eventlog_tombstones WHERE stream = %s"
    if conn.execute(archived, (stream,)).fetchone():
        raise archived_stream(source, stream)
    return (0, GENESIS_HASH)


async def _notified(conn: Conn) -> bool:
    """Wait for a notification on a LISTENing connection: True when one (or more)
    arrived, False when the connection was lost."""
    pgconn = conn.pgconn
    while True:
        try:
            pgconn.consume_input()
        except psycopg.Error:
            return False
        got = False
        while pgconn.notifies() is not None:
            got = True
        if got:
            return True
        if pgconn.status != psycopg.pq.ConnStatus.OK:
            return False  # pragma: no cover - consume_input reports it first
        await trio.lowlevel.wait_readable(pgconn.socket)


@asynccontextmanager
async def open_postgres_store(
    dsn: str,
    *,
    readonly: bool = False,
    connect_timeout: float = 10.0,
    reconnect_timeout: float = 10.0,
    projection: Projection | None = None,
) -> AsyncIterator[PostgresStore]:
    """Open (creating and migrating the schema if needed) the event log in the
    PostgreSQL database ``dsn`` (``postgresql://USER:PASSWORD@HOST:PORT/DBNAME`` or
    ``key=value`` form; libpq's environment variables and ~/.pgpass apply).

    ``readonly=True`` never writes (not even the schema) and needs an existing log of
    this version. A connection that cannot be made within ``connect_timeout`` seconds
    raises :class:`StoreError` naming the DSN without its password. A writer that loses
    its connection reconnects for up to ``reconnect_timeout`` seconds and finishes the
    batch it was committing (exactly once). The writer thread runs as a service in a
    nursery for the duration of the block.
    """
    store = PostgresStore(
        dsn,
        readonly=readonly,
        connect_timeout=connect_timeout,
        reconnect_timeout=reconnect_timeout,
    )
    store.projection = projection
    try:
        if readonly:

            def probe(conn: Conn) -> None:
                check_readable(conn, dsn)

            await store._read(probe, "opening")
            yield store
            return
        try:
            async with trio.open_nursery() as nursery:
                await nursery.start(store._serve_writer, reconnect_timeout)
                try:
                    yield store
                finally:
                    if store._writer is not None:
                        store._writer.stop()
        except BaseExceptionGroup as group:
            # The nursery only holds the writer service; callers want the error itself.
            if len(group.exceptions) == 1:
                raise group.exceptions[0] from group.exceptions[0].__cause__
            raise
    finally:
        store._close_readers()
