"""The SQLite writer: group commit of queued appends (see :mod:`._writer`).

If the batch's transaction fails as a whole (disk full, I/O error, or the primary key
catching a fork), it is rolled back and its appends are retried one per transaction, so
every caller gets its own outcome.

The writer remembers each stream's head (length, last hash) and the next position as of
its last commit, so a batch costs no lookups. That is only sound while nobody else
writes: each transaction first reads ``PRAGMA data_version`` (it changes when another
connection has committed), and the memory is dropped when it changed, after any
:class:`CallRequest` (which may write events through this connection) and after any
failed transaction.
"""

from __future__ import annotations

import itertools
import sqlite3
from collections.abc import Callable, Sequence
from pathlib import Path

import trio

from . import _sqlite_catalog as catalog
from ._catalog import CatalogRow, Claim, Projection, keep_current
from ._errors import ConcurrencyError, EventLogError, StoreError
from ._hashchain import GENESIS_HASH, blob_digest, build_events
from ._sqlite_db import SEQ_IN_LOG, immediate
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
from ._types import Event, NewEvent
from ._writer import AppendRequest, BatchWriter, CallRequest

#: Heads remembered at most; past this the memory is dropped and refilled on demand.
MAX_HEADS = 65_536

INSERT_EVENT = (
    "INSERT INTO events (stream, seq, position, type, recorded_at, body, prev_hash, hash) "
    "VALUES (?, ?, ?, ?, ?, ?, ?, ?)"
)
INSERT_BLOB = "INSERT OR IGNORE INTO blobs (digest, data) VALUES (?, ?)"
#: A stream's head: the row with the highest seq among those in the log.
HEAD = f"SELECT seq, hash FROM events WHERE stream = ? AND {SEQ_IN_LOG} ORDER BY seq DESC LIMIT 1"


class Writer(BatchWriter):
    """Owns the write connection; :meth:`run` is the thread's body."""

    def __init__(
        self,
        conn: sqlite3.Connection,
        path: Path,
        token: trio.lowlevel.TrioToken,
        on_commit: Callable[[], None],
        projection: Projection | None = None,
    ) -> None:
        super().__init__(f"database {path}", token, on_commit)
        self._conn = conn
        self._path = path
        self.projection = projection
        # Whether the file's catalog claims to be current (None: look in the next
        # transaction): a writer without the projection must say it no longer is.
        self._catalog_current: bool | None = None
        # As of this connection's last commit: stream -> (length, last hash), and the
        # position the next event gets (None: unknown, read it in the next transaction).
        self._heads: dict[str, tuple[int, str]] = {}
        self._rows: dict[str, CatalogRow] = {}  # the catalog's rows this writer wrote
        self._position: int | None = None
        self._data_version = -1

    def close(self) -> None:
        try:
            # Fold the WAL into the main file and empty it, so that the file users and
            # auditors copy (skillog.db alone) holds the whole log. A reader in another
            # process can keep part of the WAL alive; `skillog log snapshot` copies a
            # live log whole.
            self._conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        except sqlite3.Error:
            pass  # nothing is lost: the WAL still holds what the main file does not
        finally:
            self._conn.close()

    def call(self, request: CallRequest) -> None:
        assert request.fn is not None
        fn = request.fn
        # ``fn`` may append through this connection (an import), which data_version
        # does not report: forget the heads whatever happens.
        self._forget()
        try:
            request.result = immediate(
                self._conn, self._path, request.doing, lambda: fn(self._conn)
            )
        except Exception as e:  # delivered to the caller, re-raised there
            request.error = e

    def _forget(self) -> None:
        self._heads.clear()
        self._rows.clear()
        self._position = None
        self._catalog_current = None

    def _check_memory(self) -> int:
        """Inside a write transaction: the next position, forgetting heads if stale."""
        conn = self._conn
        (version,) = conn.execute("PRAGMA data_version").fetchone()
        if version != self._data_version or len(self._heads) + len(self._rows) > MAX_HEADS:
            # Another connection committed since our last transaction (or the memory
            # grew too big): what we remember may be behind the file.
            self._data_version = version
            self._forget()
        if self._position is None:
            sql = "SELECT COALESCE(MAX(position), 0) + 1 FROM events"
            (self._position,) = conn.execute(sql).fetchone()
        return self._position

    def commit_appends(self, requests: Sequence[AppendRequest]) -> None:
        heads: dict[str, tuple[int, str]] = {}
        try:
            position = immediate(
                self._conn, self._path, "appending", lambda: self._insert(requests, heads)
            )
        except Exception as e:
            # Rolled back (or, if COMMIT itself failed, unknown): trust the file again.
            self._forget()
            if not isinstance(e, EventLogError):  # pragma: no cover - a bug, not input
                e = StoreError(f"database {self._path}: appending failed: {e!r}")
            if len(requests) > 1:
                for r in requests:
                    self.commit_appends([r])
                return
            (r,) = requests
            cause = e.__cause__
            if isinstance(cause, sqlite3.IntegrityError):
                # The primary key caught what the seq check did not (another process
                # won a race): report it as the conflict it is.
                head = self._head(r.stream)
                r.error = ConcurrencyError(r.stream, r.expected_seq, head)
                r.error.__cause__ = cause
            else:
                r.error = e
            r.result = None
            return
        # Committed: the batch's heads are the file's heads now.
        self._heads.update(heads)
        self._position = position

    def _head(self, stream: str) -> int:
        try:
            row = self._conn.execute(HEAD, (stream,)).fetchone()
        except sqlite3.Error:  # pragma: no cover - only used to word an error
            return -1
        return 0 if row is None else int(row[0]) + 1

    def _insert(self, requests: Sequence[AppendRequest], heads: dict[str, tuple[int, str]]) -> int:
        """Insert the batch's rows; fills ``heads`` and returns the next position."""
        conn = self._conn
        position = self._check_memory()
        known = self._heads
        rows: list[tuple[object, ...]] = []
        blob_rows: list[tuple[str, bytes]] = []
        for r in requests:
            r.error = r.result = None
            if not r.events:  # a put_blob
                blob_rows.extend((blob_digest(b), b) for b in r.blobs)
                continue
            stream = r.stream
            head = heads.get(stream) or known.get(stream)
            if head is None:
                row = conn.execute(HEAD, (stream,)).fetchone()
                head = (0, GENESIS_HASH) if row is None else (int(row[0]) + 1, str(row[1]))
            length, prev = head
            if r.expected_seq != length:
                r.error = ConcurrencyError(stream, r.expected_seq, length)
                continue
            events: list[Event] = build_events(stream, prev, length, position, r.events)
            position += len(events)
            heads[stream] = (length + len(events), events[-1].hash)
            rows.extend(
                (e.stream, e.seq, e.position, e.type, e.recorded_at, e.body, e.prev_hash, e.hash)
                for e in events
            )
            if r.blobs:
                blob_rows.extend((blob_digest(b), b) for b in r.blobs)
            r.result = tuple(events)
        # executemany: one prepared statement for the whole batch is the hot path.
        conn.executemany(INSERT_EVENT, rows)
        if blob_rows:
            conn.executemany(INSERT_BLOB, blob_rows)
        self._project(requests)
        return position

    def _project(self, requests: Sequence[AppendRequest]) -> None:
        self.project([e for r in requests if r.result for e in r.result])

    def project(self, events: Sequence[Event]) -> None:
        """Keep the catalog equal to the fold, in the transaction appending ``events``
        (without the projection, record that it no longer is)."""
        conn = self._conn
        self._catalog_current = keep_current(
            self._catalog_current,
            self.projection,
            events,
            built=lambda: catalog.built(conn) is not None,
            project=lambda projection, new: catalog.project(conn, projection, new, self._rows),
            mark_stale=lambda: catalog.mark_stale(conn),
        )

    def build_catalog(self, conn: sqlite3.Connection) -> int:
        """(In a write transaction) rebuild the catalog from the log."""
        assert self.projection is not None
        self._catalog_current = True
        return catalog.rebuild(conn, self.projection)

    def claim(self, conn: sqlite3.Connection, claim: Claim) -> list[Event]:
        """(In a write transaction, so no other process claims at once) take up to
        ``claim.limit`` free claimable rows: append each one's claim event."""
        found = conn.execute(catalog.CLAIMABLE, (claim.now, claim.limit)).fetchall()
        requests: list[AppendRequest] = []
        for r in found:
            key = r[0]
            stream = claim.stream_of(key)
            row = conn.execute(HEAD, (stream,)).fetchone()
            events: list[NewEvent] = [claim.event_of(key)]
            requests.append(
                AppendRequest(
                    stream=stream, events=events, expected_seq=0 if row is None else row[0] + 1
                )
            )
        self._catalog_current = True
        self._insert(requests, {})
        self._forget()  # the memory of heads and positions is behind these appends
        return [r.result[0] for r in requests if r.result]

    def archive(self, conn: sqlite3.Connection, commit: ArchiveCommit) -> ArchiveOutcome:
        """(In a write transaction) remove each group of streams whose heads are still
        the ones archived, leave their tombstones and record ``log.archived``; a group
        that moved (or whose lease is held) is skipped whole."""
        projection = self.projection

        def head(stream: str) -> tuple[int, str] | None:
            row = conn.execute(HEAD, (stream,)).fetchone()
            return None if row is None else (int(row[0]), str(row[1]))

        def held(key: str) -> bool:
            row = catalog.load(conn, key) if projection is not None else None
            return row is not None and row.holder is not None

        def remove(key: str, streams: list[str]) -> None:
            for stream in streams:
                conn.execute(f"DELETE FROM events WHERE stream = ? AND {SEQ_IN_LOG}", (stream,))
                conn.execute("DELETE FROM eventlog_snapshots WHERE stream = ?", (stream,))
            if projection is not None:
                conn.execute("DELETE FROM eventlog_catalog WHERE key = ?", (key,))

        since = commit.scanned.position if incremental(commit, head) else None  # type: ignore[union-attr]
        # The next position, taken before the removals: were the archived events the
        # log's last, log.archived would get a position a follow has passed already.
        self._check_memory()
        outcome = sort_out(commit, projection, head=head, held=held, remove=remove)
        stones = outcome.tombstones
        if stones:
            conn.executemany(
                "INSERT INTO eventlog_tombstones (stream, length, head_hash, checkpoint) "
                "VALUES (?, ?, ?, ?)",
                [(t.stream, t.length, t.head_hash, t.checkpoint) for t in stones],
            )
            event, blob = archived_event(commit, outcome)
            last = head(MAINTENANCE_STREAM)
            request = AppendRequest(
                stream=MAINTENANCE_STREAM,
                events=(event,),
                expected_seq=0 if last is None else last[0] + 1,
                blobs=(blob,),
            )
            self._insert([request], {})
            if request.error is not None:
                raise request.error
            live = still_live(commit, outcome)
            outcome = with_blobs(outcome, self._drop_blobs(conn, commit.blobs, since, live))
        self._forget()  # the memory of heads and positions is behind these changes
        return outcome

    def _drop_blobs(
        self,
        conn: sqlite3.Connection,
        candidates: Sequence[str],
        since: int | None,
        live: Sequence[str],
    ) -> list[int]:
        """(In the archive's write transaction: no append can interleave) delete the
        ``candidates`` that no event or snapshot left in the log names; their sizes.
        With ``since``, events up to that position were scanned before (outside the
        ``live`` streams, read whole here)."""
        if not candidates:
            return []
        if since is None:
            events = conn.execute("SELECT body FROM events")
        else:
            events = conn.execute("SELECT body FROM events WHERE position > ?", (since,))
        bodies = itertools.chain(
            (row[0] for row in events),
            *(
                (row[0] for row in conn.execute("SELECT body FROM events WHERE stream = ?", (s,)))
                for s in live
            ),
            (row[0] for row in conn.execute("SELECT state FROM eventlog_snapshots")),
        )
        sizes: list[int] = []
        for digest in unreferenced(candidates, bodies):
            row = conn.execute(
                "DELETE FROM blobs WHERE digest = ? RETURNING length(data)", (digest,)
            ).fetchone()
            if row is not None:
                sizes.append(int(row[0]))
        return sizes
