"""The SQLite event store: one writer thread, pooled reader connections."""

from __future__ import annotations

import errno
import itertools
import os
import sqlite3
import threading
from collections import deque
from collections.abc import AsyncIterator, Callable, Collection, Iterator, Sequence
from contextlib import asynccontextmanager, contextmanager
from pathlib import Path
from typing import Any, BinaryIO, TypeVar

import trio
from sqlite_utils.migrations import Migrations

from . import _sqlite_catalog as catalog
from ._catalog import CatalogRow, Claim, Listing, Projection
from ._errors import BlobNotFoundError, ReadOnlyDatabaseError, StoreError
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
from ._output import OutputError, os_error_message
from ._snapshot import Snapshot
from ._sqlite_db import (
    IN_LOG,
    SEQ_IN_LOG,
    SYNCHRONOUS,
    check_file,
    check_readable,
    connect,
    create_private,
    immediate,
    migrate,
    remove_if_empty,
    translate,
)
from ._sqlite_writer import HEAD, INSERT_BLOB, INSERT_EVENT, Writer
from ._tombstone import ArchiveCommit, ArchiveOutcome, Tombstone, archived_stream
from ._types import Event, Head, NewEvent, StreamInfo
from ._verify import ChainCheck
from ._writer import AppendRequest, CallRequest, Request

T = TypeVar("T")
BATCH = 2000
MAX_IDLE_READERS = 4
"""Reader connections kept open between reads. A burst opens more (one per thread
reading at once, up to trio's thread limit), closed when it is over: each holds a page
cache, so keeping every one made a long-running server's memory creep upwards."""
RECENT_COMMITS = 4096
"""The latest events this process committed that ``follow`` serves from memory: a
follower woken by a commit here takes them with no read (a thread hop, which waited
for the GIL behind every other thread of a busy server: ``skillog serve``'s tail)."""
_COLS = "stream, seq, position, type, recorded_at, body, prev_hash, hash"


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


def _stored(kind: str, raw: bytes | None) -> object:
    """A column value read as ``typeof(x), CAST(x AS BLOB)``: text that is not UTF-8
    cannot make the reading fail."""
    if raw is None:
        return None
    if kind == "integer":
        return int(raw)
    if kind == "real":
        return float(raw)
    if kind == "text":
        return raw.decode(errors="replace")
    return bytes(raw)


def _row(e: Event) -> tuple[object, ...]:
    return (e.stream, e.seq, e.position, e.type, e.recorded_at, e.body, e.prev_hash, e.hash)


class SqliteStore:
    """An :class:`EventStore` on one SQLite file; get one from :func:`open_sqlite_store`.

    Appends go to the database's writer thread and are group-committed; ``append``
    returns after COMMIT (with ``synchronous=FULL``, after the WAL is fsynced). Reads use
    their own connections in worker threads and fetch in batches, so memory stays flat
    in the stream length. ``follow`` also sees events written by other processes (it
    polls every ``poll_interval`` seconds when nothing is appended in this process).
    """

    def __init__(
        self, path: Path, *, readonly: bool, busy_timeout: float, poll_interval: float
    ) -> None:
        self.path = path
        self.readonly = readonly
        self._busy_timeout = busy_timeout
        self._poll_interval = poll_interval
        self._writer: Writer | None = None
        self.projection: Projection | None = None
        self._idle: list[sqlite3.Connection] = []
        self._lock = threading.Lock()
        self._appended = trio.Event()
        # The latest events committed by this process's writer, positions contiguous
        # (a gap, another process's commit or a bulk write, starts it again): no other
        # row can sit between two of them, so a follower inside this run needs no read.
        self._recent: deque[Event] = deque(maxlen=RECENT_COMMITS)
        self._external = 0  # wake_followers() calls: another process may have committed
        self._listeners: list[Callable[[list[Event]], None]] = []

    # -- plumbing -------------------------------------------------------------------

    def _committed(self) -> None:
        self._appended.set()
        self._appended = trio.Event()

    def _took(self, events: list[Event]) -> None:
        """The writer's batch committed ``events`` (in the trio thread, in position
        order, before its wake-up): keep them for :meth:`follow`."""
        recent = self._recent
        for event in events:
            if recent and event.position != recent[-1].position + 1:
                recent.clear()
            recent.append(event)
        for listener in self._listeners:
            listener(events)

    @contextmanager
    def listening(self, listener: Callable[[list[Event]], None]) -> Iterator[None]:
        """While inside, ``listener`` is called in the trio thread with the events each
        commit of this process made, in position order, as the commit is delivered:
        before any :meth:`follow` wakes (one scheduler pass sooner), and never for
        other processes' commits (a follow sees those). It must not block."""
        self._listeners.append(listener)
        try:
            yield
        finally:
            self._listeners.remove(listener)

    def _held_from(self, position: int) -> list[Event] | None:
        """The events from ``position`` on when :attr:`_recent` holds all there are as
        far as this process knows (``[]``: none since), else None: read the file."""
        recent = self._recent
        if not recent or not recent[0].position <= position <= recent[-1].position + 1:
            return None
        return list(itertools.islice(recent, position - recent[0].position, None))

    def wake_followers(self) -> None:
        """Make every :meth:`follow` look for new events now, as a commit in this
        process does: a follower that wants other processes' commits sooner than
        ``poll_interval`` calls it at the pace it wants (``skillog serve``'s tail, while
        someone follows a session)."""
        self._external += 1
        self._committed()

    async def _submit(self, request: Request) -> Any:
        if self._writer is None:
            raise ReadOnlyDatabaseError(
                f"database {self.path}: opened read-only; open it without readonly=True to write"
            )
        return await self._writer.submit(request)

    def _with_reader(self, fn: Callable[[sqlite3.Connection], T], doing: str) -> T:
        with self._lock:
            conn = self._idle.pop() if self._idle else None
        if conn is None:
            conn = connect(self.path, readonly=True, busy_timeout=self._busy_timeout)
        try:
            return fn(conn)
        except sqlite3.Error as e:
            raise translate(e, self.path, doing) from e
        finally:
            with self._lock:
                keep = len(self._idle) < MAX_IDLE_READERS
                if keep:
                    self._idle.append(conn)
            if not keep:  # a burst of reads is over: memory goes back to what is kept
                conn.close()

    async def _read(self, fn: Callable[[sqlite3.Connection], T], doing: str) -> T:
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

    async def call_in_writer(
        self, fn: Callable[[sqlite3.Connection], T], *, doing: str = "writing"
    ) -> T:
        """Run ``fn(conn)`` in the writer thread inside one IMMEDIATE transaction.

        For bulk work (imports) that must commit atomically; other appends wait.
        """
        result: T = await self._submit(CallRequest(fn=fn, doing=doing))
        self._recent.clear()  # its rows are not in the run (a gap would say so too)
        self._committed()
        return result

    async def import_lines(
        self, f: BinaryIO, source: str, progress: Callable[[int], None] | None
    ) -> ImportReport:
        """Import a JSON Lines export in one transaction (see :func:`import_jsonl`)."""
        writer = self._writer

        def run(conn: sqlite3.Connection) -> ImportReport:
            def head_of(stream: str) -> tuple[int, str]:
                row = conn.execute(HEAD, (stream,)).fetchone()
                if row is None:
                    archived = "SELECT 1 FROM eventlog_tombstones WHERE stream = ?"
                    if conn.execute(archived, (stream,)).fetchone():
                        raise archived_stream(source, stream)
                return (0, GENESIS_HASH) if row is None else (int(row[0]) + 1, str(row[1]))

            def insert(events: list[Event]) -> None:
                conn.executemany(INSERT_EVENT, (_row(e) for e in events))
                if writer is not None:
                    writer.project(events)

            sql = "SELECT COALESCE(MAX(position), 0) + 1 FROM events"
            (position,) = conn.execute(sql).fetchone()
            report, blobs, _ = import_lines(
                f,
                source,
                head_of=head_of,
                first_position=position,
                insert=insert,
                progress=progress,
            )
            conn.executemany(INSERT_BLOB, blobs.items())
            return report

        return await self.call_in_writer(run, doing="importing")

    async def save_snapshot(self, snapshot: Snapshot) -> None:
        """Store ``snapshot``, replacing the previous one of its stream and name."""
        check_name("snapshot name", snapshot.name)

        def save(conn: sqlite3.Connection) -> None:
            conn.execute(
                "INSERT OR REPLACE INTO eventlog_snapshots (stream, name, seq, hash, state) "
                "VALUES (?, ?, ?, ?, ?)",
                (snapshot.stream, snapshot.name, snapshot.seq, snapshot.hash, snapshot.state),
            )

        await self.call_in_writer(save, doing="saving a snapshot")

    # -- reading --------------------------------------------------------------------

    async def load_snapshot(self, stream: str, name: str) -> Snapshot | None:
        """The stored snapshot of ``stream`` named ``name``, if any."""

        def load(conn: sqlite3.Connection) -> Snapshot | None:
            row = conn.execute(
                "SELECT seq, hash, state FROM eventlog_snapshots WHERE stream = ? AND name = ?",
                (stream, name),
            ).fetchone()
            if row is None:
                return None
            return Snapshot(stream=stream, name=name, seq=row[0], hash=row[1], state=row[2])

        return await self._read(load, "loading a snapshot")

    async def head(self, stream: str) -> Head | None:
        """The last event's seq and hash, or None for a stream with no events."""

        def head(conn: sqlite3.Connection) -> Head | None:
            row = conn.execute(HEAD, (stream,)).fetchone()
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
        sql = f"SELECT {_COLS} FROM events WHERE stream = ? AND seq >= ? AND seq < ? "
        sql += f"AND {SEQ_IN_LOG} ORDER BY seq LIMIT ?"
        doing = f"reading stream {stream!r}"
        seq = from_seq
        while True:
            params = (stream, seq, end, BATCH)

            def fetch(c: sqlite3.Connection, p: tuple[object, ...] = params) -> list[Any]:
                return c.execute(sql, p).fetchall()

            rows = await self._read(fetch, doing)
            for event in _events(rows):
                yield event
            if len(rows) < BATCH:
                return
            seq = rows[-1][1] + 1

    async def read_all(self, *, from_position: int = 0) -> AsyncIterator[Event]:
        """Every event with ``position >= from_position``, in position order."""
        check_int("from_position", from_position)
        position = from_position
        while True:
            rows = await self._fetch_from(position)
            for event in _events(rows):
                yield event
            if len(rows) < BATCH:
                return
            position = rows[-1][2] + 1

    async def _fetch_from(self, position: int) -> list[Any]:
        sql = f"SELECT {_COLS} FROM events WHERE position >= ? AND {IN_LOG} "
        sql += "ORDER BY position LIMIT ?"
        return await self._read(
            lambda c: c.execute(sql, (position, BATCH)).fetchall(), "reading all events"
        )

    async def follow(self, *, from_position: int = 0) -> AsyncIterator[Event]:
        """Like :meth:`read_all`, then yields events as they commit, until cancelled.

        Commits in this process wake it at once, with their events (no read of the
        file); commits by other processes are seen within ``poll_interval`` seconds, or
        at the next :meth:`wake_followers`.
        """
        check_int("from_position", from_position)
        position = from_position
        read = True  # the file, not only what this process committed
        while True:
            appended, external = self._appended, self._external
            held = None if read else self._held_from(position)
            if held is None:
                events = _events(await self._fetch_from(position))
                more = len(events) == BATCH
            else:
                events, more = held, False
            for event in events:
                yield event
            if events:
                position = events[-1].position + 1
            read = more
            if not more:
                with trio.move_on_after(self._poll_interval):
                    await appended.wait()
                # Woken by this process's commit of events: they are held (unless after
                # a gap). Any other wake-up (a timeout, wake_followers, a commit with no
                # event: a blob, a catalog change) reads the file, as every one did.
                recent = self._recent
                read = (
                    not appended.is_set()
                    or self._external != external
                    or not recent
                    or recent[-1].position < position
                )

    async def check_chains(
        self, checks: Sequence[ChainCheck], progress: Callable[[int], None] | None = None
    ) -> None:
        """Feed each check its stream's stored rows in seq order, all in one worker
        thread hop (a log of many short sessions pays one hop per batch of streams, not
        per stream).

        The hashing runs next to the fetch (no Event objects, no per-event await), which
        is what makes verify fast; memory stays at one batch.
        """
        sql = (
            "SELECT seq, type, recorded_at, body, prev_hash, hash FROM events "
            f"WHERE stream = ? AND seq >= ? AND {SEQ_IN_LOG} ORDER BY seq LIMIT ?"
        )

        def one(conn: sqlite3.Connection, check: ChainCheck) -> None:
            seq = 0
            while True:
                rows = conn.execute(sql, (check.stream, seq, BATCH * 4)).fetchall()
                if check.feed(rows) is not None:
                    return
                if progress is not None:
                    progress(len(rows))
                if len(rows) < BATCH * 4:
                    return
                seq = rows[-1][0] + 1

        def run(conn: sqlite3.Connection) -> None:
            for check in checks:
                one(conn, check)

        what = f"stream {checks[0].stream!r}" if len(checks) == 1 else f"{len(checks)} streams"
        await self._read(run, f"verifying {what}")

    async def row_count(self, stream: str | None = None) -> int:
        """Every row of the events table (of ``stream``), in the log or not (verify
        compares counts)."""
        sql = "SELECT COUNT(*) FROM events"
        params: tuple[str, ...] = ()
        if stream is not None:
            sql, params = sql + " WHERE stream = ?", (stream,)

        def count(conn: sqlite3.Connection) -> int:
            return int(conn.execute(sql, params).fetchone()[0])

        return await self._read(count, "counting events")

    async def read_strays(
        self, stream: str | None = None
    ) -> AsyncIterator[tuple[int, object, object]]:
        """``(position, stream, seq)`` of every row (of ``stream``) outside the log, as
        stored."""
        only = "" if stream is None else "stream = ? AND "
        sql = (
            "SELECT position, typeof(stream), CAST(stream AS BLOB), typeof(seq), "
            f"CAST(seq AS BLOB) FROM events WHERE {only}position > ? AND NOT ({IN_LOG}) "
            "ORDER BY position LIMIT ?"
        )
        scope = () if stream is None else (stream,)
        after = -(2**63)
        while True:

            def fetch(c: sqlite3.Connection, a: int = after) -> list[Any]:
                return c.execute(sql, (*scope, a, BATCH)).fetchall()

            rows = await self._read(fetch, "looking for rows outside the log")
            for position, stype, name, qtype, seq in rows:
                yield position, _stored(stype, name), _stored(qtype, seq)
            if len(rows) < BATCH:
                return
            after = rows[-1][0]

    async def snapshot_to(self, out: str | os.PathLike[str]) -> None:
        """Copy the whole database, as of one moment, into the new single file ``out``.

        SQLite's online backup copies every page in one read transaction, so the copy is
        consistent while writers go on; it is written next to ``out`` and renamed into
        place, and never overwrites a file.
        """
        target = Path(out)

        def copy(conn: sqlite3.Connection) -> None:
            if target.exists():
                raise StoreError(f"{target}: already exists; choose a new file name")
            tmp = target.with_name(f".{target.name}.{os.getpid()}.tmp")
            fail = f"snapshot {target}: cannot write"
            try:
                create_private(tmp)  # a copy of the log is as private as the log
                dest = sqlite3.connect(tmp, isolation_level=None)
                try:
                    conn.backup(dest)
                    # One file, no -wal: what an auditor copies is the whole log.
                    dest.execute("PRAGMA journal_mode=DELETE")
                finally:
                    dest.close()
                os.link(tmp, target)  # fails if target appeared meanwhile
            except FileExistsError as e:
                raise StoreError(f"{target}: already exists; choose a new file name") from e
            except OSError as e:
                raise OutputError(f"{fail}: {os_error_message(e, where='OUT.db')}") from e
            except sqlite3.Error as e:
                if e.sqlite_errorcode & 0xFF != 13:  # SQLITE_FULL: the copy's disk is full
                    raise
                full = OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
                raise OutputError(f"{fail}: {os_error_message(full, where='OUT.db')}") from e
            finally:
                tmp.unlink(missing_ok=True)
                tmp.with_name(tmp.name + "-journal").unlink(missing_ok=True)

        await self._read(copy, f"copying the log to {target}")

    async def last_position(self) -> int:
        """The highest position in the database (0 when empty); a cheap progress total."""

        def last(conn: sqlite3.Connection) -> int:
            return int(conn.execute("SELECT COALESCE(MAX(position), 0) FROM events").fetchone()[0])

        return await self._read(last, "reading the last position")

    async def streams(self) -> list[StreamInfo]:
        """One summary per stream, ordered by stream id (a skip-scan: no full scan).

        Only streams with rows in the log (see :func:`in_log`); the length is the head's
        seq + 1, whatever lies below it (verify reports gaps and duplicates)."""

        def streams(conn: sqlite3.Connection) -> list[StreamInfo]:
            rows = conn.execute(
                f"""WITH RECURSIVE s(stream) AS (
                    SELECT MIN(stream) FROM events
                    UNION ALL
                    SELECT (SELECT MIN(stream) FROM events WHERE stream > s.stream)
                    FROM s WHERE s.stream IS NOT NULL
                )
                SELECT s.stream, h.seq, h.hash, h.recorded_at,
                    (SELECT recorded_at FROM events WHERE stream = s.stream AND {SEQ_IN_LOG}
                     ORDER BY seq LIMIT 1)
                FROM s JOIN events h ON h.position = (
                    SELECT position FROM events WHERE stream = s.stream AND {SEQ_IN_LOG}
                    ORDER BY seq DESC LIMIT 1)
                WHERE s.stream IS NOT NULL ORDER BY s.stream"""
            ).fetchall()
            return [
                StreamInfo(
                    stream=r[0],
                    length=r[1] + 1,
                    head_hash=r[2],
                    first_recorded_at=r[4],
                    last_recorded_at=r[3],
                )
                for r in rows
                if in_log(r[0], r[1])
            ]

        return await self._read(streams, "listing streams")

    async def get_blob(self, digest: str) -> bytes:
        """The bytes stored under ``digest``; :class:`BlobNotFoundError` if absent."""

        def get(conn: sqlite3.Connection) -> bytes | None:
            row = conn.execute("SELECT data FROM blobs WHERE digest = ?", (digest,)).fetchone()
            return None if row is None else bytes(row[0])

        data = await self._read(get, f"reading blob {digest}") if isinstance(digest, str) else None
        if data is None:
            raise BlobNotFoundError(str(digest))
        return data

    async def has_blob(self, digest: str) -> bool:
        """Whether a blob with this digest is stored."""
        if not isinstance(digest, str):
            return False

        def has(conn: sqlite3.Connection) -> bool:
            sql = "SELECT 1 FROM blobs WHERE digest = ?"
            return conn.execute(sql, (digest,)).fetchone() is not None

        return await self._read(has, f"looking up blob {digest}")

    async def read_blobs(self) -> AsyncIterator[tuple[str, bytes]]:
        """Every stored ``(digest, data)`` as stored, in rowid order, a batch at a time.

        No type conversion and no filter on the digest: a tampered row (TEXT data, a
        digest that is not hex or not even text) comes out as it is, for :func:`verify`.
        """
        sql = "SELECT rowid, digest, data FROM blobs WHERE rowid > ? ORDER BY rowid LIMIT ?"
        after = 0
        while True:

            def fetch(c: sqlite3.Connection, a: int = after) -> list[Any]:
                return c.execute(sql, (a, BATCH)).fetchall()

            rows = await self._read(fetch, "reading blobs")
            for _, digest, data in rows:
                yield digest, data
            if len(rows) < BATCH:
                return
            after = rows[-1][0]

    # -- the catalog (eventlog/_catalog.py) ---------------------------------------

    async def catalog_built(self, version: str | None = None) -> bool:
        """Whether the catalog is current: built by a projection of ``version``
        (default: this store's projection's; with neither, any) and kept since."""
        want = version or (self.projection.version if self.projection else None)

        def check(conn: sqlite3.Connection) -> bool:
            built = catalog.built(conn)
            return built is not None and want in (None, built)

        return await self._read(check, "reading the catalog")

    async def list_catalog(self, listing: Listing) -> list[CatalogRow]:
        """Rows of the catalog, most recent first (see :class:`Listing`)."""
        return await self._read(lambda c: catalog.select(c, listing), "listing the catalog")

    async def catalog_row(self, key: str) -> CatalogRow | None:
        return await self._read(lambda c: catalog.load(c, key), "reading the catalog")

    async def read_catalog(self) -> list[CatalogRow]:
        """Every row as stored (for verify)."""

        def every(conn: sqlite3.Connection) -> list[CatalogRow]:
            if not catalog.has_table(conn):
                return []
            rows = conn.execute(f"SELECT {catalog.COLUMNS} FROM eventlog_catalog ORDER BY key")
            return [catalog.to_row(r) for r in rows.fetchall()]

        return await self._read(every, "reading the catalog")

    async def catalog_snapshot(
        self, key: str, streams: Sequence[str]
    ) -> tuple[CatalogRow | None, list[Event]]:
        """The catalog row ``key`` and the events of ``streams`` (each in seq order),
        read in one read transaction: one moment of the log, whatever writers commit
        meanwhile (what verify re-checks a differing row against)."""
        sql = f"SELECT {_COLS} FROM events WHERE stream = ? AND {SEQ_IN_LOG} ORDER BY seq"

        def read(conn: sqlite3.Connection) -> tuple[CatalogRow | None, list[Event]]:
            conn.execute("BEGIN")  # WAL: the first read fixes the snapshot for the rest
            try:
                row = catalog.load(conn, key)
                rows = [r for s in streams if in_log(s, 0) for r in conn.execute(sql, (s,))]
            finally:
                conn.execute("ROLLBACK")
            return row, _events(rows)

        return await self._read(read, f"reading the catalog row {key!r} with its streams")

    async def claim(self, claim: Claim) -> list[Event]:
        """Claim free claimable rows in one immediate transaction (see :class:`Claim`);
        the claim events appended."""
        writer = self._writer
        if writer is None or writer.projection is None:
            raise StoreError(f"database {self.path}: claims need a store opened with a projection")
        request = CallRequest(fn=lambda conn: writer.claim(conn, claim), doing="claiming")
        result: list[Event] = await self._submit(request)
        return result

    async def renew(self, key: str, holder: str, until: int) -> bool:
        """A heartbeat: ``holder``'s lease on ``key`` now runs until ``until`` (an
        UPDATE, not an event). False when ``holder`` no longer holds it."""
        request = CallRequest(fn=lambda conn: catalog.renew(conn, key, holder, until),
                              doing="renewing a lease")  # fmt: skip
        result: bool = await self._submit(request)
        return result

    async def reindex(self) -> int:
        """Rebuild the catalog from the log, in one transaction; the number of rows."""
        writer = self._writer
        if writer is None or writer.projection is None:
            raise StoreError(
                f"database {self.path}: reindex needs a store opened with a projection"
            )
        request = CallRequest(fn=writer.build_catalog, doing="rebuilding the catalog")
        result: int = await self._submit(request)
        return result

    # -- retention (eventlog/_archive.py) -------------------------------------------

    async def commit_archive(self, commit: ArchiveCommit) -> ArchiveOutcome:
        """Remove the archived streams, leave their tombstones and record it, in one
        transaction (see :func:`eventlog._archive.archive`)."""
        writer = self._writer
        if writer is None:
            raise ReadOnlyDatabaseError(f"database {self.path}: opened read-only")
        request = CallRequest(fn=lambda conn: writer.archive(conn, commit), doing="archiving")
        result: ArchiveOutcome = await self._submit(request)
        self._recent.clear()  # the archived events left the log: never served again
        self._committed()
        return result

    async def tombstones(self, streams: Collection[str] | None = None) -> list[Tombstone]:
        """The tombstones of archived streams (of ``streams``), by stream."""

        def read(conn: sqlite3.Connection) -> list[Tombstone]:
            sql = (
                "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'eventlog_tombstones'"
            )
            if conn.execute(sql).fetchone() is None:
                return []
            cols = "SELECT stream, length, head_hash, checkpoint FROM eventlog_tombstones"
            if streams is None:
                rows = conn.execute(f"{cols} ORDER BY stream").fetchall()
            else:
                one = f"{cols} WHERE stream = ?"
                found = (conn.execute(one, (s,)).fetchone() for s in sorted(set(streams)))
                rows = [r for r in found if r is not None]
            return [
                Tombstone(stream=r[0], length=r[1], head_hash=r[2], checkpoint=r[3]) for r in rows
            ]

        return await self._read(read, "reading the tombstones")

    # -- lifecycle ------------------------------------------------------------------

    async def _serve_writer(
        self,
        synchronous: str,
        max_pages: int | None,
        domain: Sequence[Migrations],
        *,
        task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED,
    ) -> None:
        token = trio.lowlevel.current_trio_token()

        def started(writer: Writer) -> None:
            self._writer = writer
            task_status.started()

        def body() -> None:
            fresh = not self.path.exists()
            conn: sqlite3.Connection | None = None
            try:
                conn = connect(
                    self.path,
                    readonly=False,
                    synchronous=synchronous,
                    busy_timeout=self._busy_timeout,
                )
                if max_pages is not None:
                    conn.execute(f"PRAGMA max_page_count={int(max_pages)}")
                migrate(conn, self.path, domain)
                writer = Writer(conn, self.path, token, self._committed, self.projection)
                writer.on_events = self._took
                projection = self.projection
                if projection is not None and catalog.built(conn) != projection.version:
                    # A log from before the catalog (or from another projection): fold it
                    # once, in one transaction, before the first append.
                    immediate(conn, self.path, "building the catalog",
                              lambda: writer.build_catalog(conn))  # fmt: skip
            except BaseException:
                if conn is not None:
                    conn.close()
                if fresh:  # e.g. a full disk: no empty database file is left behind
                    remove_if_empty(self.path)
                raise
            trio.from_thread.run_sync(started, writer)
            writer.run()

        await trio.to_thread.run_sync(body)


@asynccontextmanager
async def open_sqlite_store(
    path: str | os.PathLike[str],
    *,
    synchronous: str = "FULL",
    readonly: bool = False,
    busy_timeout: float = 5.0,
    max_pages: int | None = None,
    poll_interval: float = 0.25,
    migrations: Sequence[Migrations] = (),
    projection: Projection | None = None,
) -> AsyncIterator[SqliteStore]:
    """Open (creating and migrating if needed) the event log in the SQLite file ``path``.

    ``synchronous="FULL"`` (default): an append returns after the WAL is fsynced; an
    acknowledged event survives a power loss. ``"NORMAL"``: it survives a process crash,
    but the most recent commits can be lost on power loss (the file stays consistent).
    ``readonly=True`` never writes (not even the schema) and needs an existing log.
    ``busy_timeout`` bounds how long to wait for another process's write lock before
    :class:`DatabaseLockedError`; ``max_pages`` caps the file size (then appends fail with
    :class:`DatabaseFullError`). The writer thread runs as a service in a nursery for
    the duration of the block; unknown tables in the file are left alone.
    ``migrations``: named sqlite-utils migration sets of the domain that uses the log
    (tables or views of its own), applied with the log's own when opened for writing.
    ``projection``: the domain's catalog (eventlog/_catalog.py), kept in every append's
    transaction; built from the log at open when it is not current.
    """
    if synchronous not in SYNCHRONOUS:
        raise StoreError(f"synchronous must be one of {SYNCHRONOUS}, got {synchronous!r}")
    db_path = Path(path)
    await trio.to_thread.run_sync(lambda: check_file(db_path, must_exist=readonly))
    store = SqliteStore(
        db_path, readonly=readonly, busy_timeout=busy_timeout, poll_interval=poll_interval
    )
    store.projection = projection
    try:
        if readonly:

            def probe(conn: sqlite3.Connection) -> None:
                check_readable(conn, db_path)

            await store._read(probe, "opening")
            yield store
            return
        try:
            async with trio.open_nursery() as nursery:
                await nursery.start(store._serve_writer, synchronous, max_pages, migrations)
                try:
                    yield store
                finally:
                    if store._writer is not None:
                        store._writer.stop()
        except BaseExceptionGroup as group:
            # The nursery only holds the writer service; callers want the error itself
            # (a ConcurrencyError, a StoreError), not a group around it.
            if len(group.exceptions) == 1:
                raise group.exceptions[0] from group.exceptions[0].__cause__
            raise
    finally:
        store._close_readers()
