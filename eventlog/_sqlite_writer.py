"""The one writer thread of a database: group commit of queued appends.

Appends from any number of trio tasks are queued; the writer takes everything queued
while the previous commit was running and commits it as one transaction (one fsync).
Each append's ``expected_seq`` is still checked on its own, so a conflicting append
fails alone. If the batch's transaction fails as a whole (disk full, I/O error, or the
primary key catching a fork), it is rolled back and its appends are retried one per
transaction, so every caller gets its own outcome.

The writer remembers each stream's head (length, last hash) and the next position as of
its last commit, so a batch costs no lookups. That is only sound while nobody else
writes: each transaction first reads ``PRAGMA data_version`` (it changes when another
connection has committed), and the memory is dropped when it changed, after any
:class:`CallRequest` (which may write events through this connection) and after any
failed transaction.
"""

from __future__ import annotations

import contextlib
import queue
import sqlite3
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import trio

from ._errors import ConcurrencyError, EventLogError, StoreError
from ._hashchain import GENESIS_HASH, blob_digest, build_events
from ._sqlite_db import immediate
from ._types import Event, NewEvent

MAX_BATCH = 4096
#: Heads remembered at most; past this the memory is dropped and refilled on demand.
MAX_HEADS = 65_536
_STOP = object()

INSERT_EVENT = (
    "INSERT INTO events (stream, seq, position, type, recorded_at, body, prev_hash, hash) "
    "VALUES (?, ?, ?, ?, ?, ?, ?, ?)"
)
INSERT_BLOB = "INSERT OR IGNORE INTO blobs (digest, data) VALUES (?, ?)"


@dataclass(eq=False, slots=True)
class Request:
    """One unit of work for the writer; ``task`` is rescheduled when it has an outcome."""

    task: trio.lowlevel.Task | None = None
    result: Any = None
    error: BaseException | None = None


@dataclass(eq=False, slots=True)
class AppendRequest(Request):
    stream: str = ""
    events: Sequence[NewEvent] = ()
    expected_seq: int = 0
    blobs: Sequence[bytes] = ()


@dataclass(eq=False, slots=True)
class CallRequest(Request):
    """Run ``fn(conn)`` inside its own write transaction (imports, snapshots)."""

    fn: Callable[[sqlite3.Connection], Any] | None = None
    doing: str = "writing"


def _no_abort(_: Any) -> trio.lowlevel.Abort:
    return trio.lowlevel.Abort.FAILED


async def wait_for_outcome(request: Request) -> None:
    """Park the current task until the writer has delivered ``request``'s outcome.

    Uncancellable, like a shielded scope: once queued the write happens, so the caller
    learns its outcome rather than leaving "maybe committed" behind (a pending
    cancellation is raised at the caller's next checkpoint). The writer's work is
    bounded (busy timeout), so this cannot hang. Lower level than a ``trio.Event`` per
    append, which showed up in profiles of 64 concurrent writers.
    """
    await trio.lowlevel.wait_task_rescheduled(_no_abort)


class Writer:
    """Owns the write connection; :meth:`run` is the thread's body."""

    def __init__(
        self,
        conn: sqlite3.Connection,
        path: Path,
        token: trio.lowlevel.TrioToken,
        on_commit: Callable[[], None],
    ) -> None:
        self._conn = conn
        self._path = path
        self._token = token
        self._on_commit = on_commit
        self._queue: queue.SimpleQueue[object] = queue.SimpleQueue()
        self.closed = False
        # As of this connection's last commit: stream -> (length, last hash), and the
        # position the next event gets (None: unknown, read it in the next transaction).
        self._heads: dict[str, tuple[int, str]] = {}
        self._position: int | None = None
        self._data_version = -1

    def submit(self, request: Request) -> None:
        if self.closed:
            raise StoreError(f"database {self._path}: the store is closed")
        self._queue.put(request)

    def stop(self) -> None:
        self.closed = True
        self._queue.put(_STOP)

    def run(self) -> None:
        """Serve requests until :meth:`stop`; always closes the connection."""
        try:
            stopping = False
            while not stopping:
                batch: list[Request] = []
                item = self._queue.get()
                while True:
                    if item is _STOP:
                        stopping = True
                        break
                    assert isinstance(item, Request)
                    batch.append(item)
                    if len(batch) >= MAX_BATCH:
                        break
                    try:
                        item = self._queue.get_nowait()
                    except queue.Empty:
                        break
                try:
                    self._serve(batch)
                except BaseException as e:  # pragma: no cover - never leave a caller hanging
                    for r in batch:
                        r.error = r.error or StoreError(f"database {self._path}: {e!r}")
                    self._deliver(batch)
                    raise
        finally:
            self._conn.close()

    def _serve(self, batch: list[Request]) -> None:
        i = 0
        while i < len(batch):
            j = i
            while j < len(batch) and isinstance(batch[j], AppendRequest):
                j += 1
            if j > i:
                self._commit_appends(batch[i:j])  # type: ignore[arg-type]
                i = j
            else:
                self._call(batch[i])  # type: ignore[arg-type]
                i += 1
        self._deliver(batch)

    def _deliver(self, batch: list[Request]) -> None:
        def finish() -> None:
            reschedule = trio.lowlevel.reschedule
            for r in batch:
                if r.task is not None:
                    reschedule(r.task)
            self._on_commit()

        # RunFinishedError: the trio run is gone, so nobody is left waiting.
        with contextlib.suppress(trio.RunFinishedError):
            self._token.run_sync_soon(finish)

    def _call(self, request: CallRequest) -> None:
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
        self._position = None

    def _check_memory(self) -> int:
        """Inside a write transaction: the next position, forgetting heads if stale."""
        conn = self._conn
        (version,) = conn.execute("PRAGMA data_version").fetchone()
        if version != self._data_version or len(self._heads) > MAX_HEADS:
            # Another connection committed since our last transaction (or the memory
            # grew too big): what we remember may be behind the file.
            self._data_version = version
            self._forget()
        if self._position is None:
            sql = "SELECT COALESCE(MAX(position), 0) + 1 FROM events"
            (self._position,) = conn.execute(sql).fetchone()
        return self._position

    def _commit_appends(self, requests: Sequence[AppendRequest]) -> None:
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
                    self._commit_appends([r])
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
            row = self._conn.execute(
                "SELECT seq FROM events WHERE stream = ? ORDER BY seq DESC LIMIT 1", (stream,)
            ).fetchone()
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
                row = conn.execute(
                    "SELECT seq, hash FROM events WHERE stream = ? ORDER BY seq DESC LIMIT 1",
                    (stream,),
                ).fetchone()
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
        return position
