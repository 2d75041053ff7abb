"""Live previews: a model's streamed deltas and MCP calls' progress notifications on
their way to whoever watches a session (the service's SSE followers and console,
``skillog submit --follow``, live telemetry).

A preview is never recorded and never hashed: the log's ``model.responded`` is the
answer, the same bytes streamed or not (docs/adapters.md). Previews are therefore
*lossy by design*: every hop is bounded and drops rather than waits, so a slow
follower, a full buffer or a busy disk never slows the session, and a follower that
missed some text is made whole by the recorded response that follows.

Three hops, each bounded:

- :class:`PreviewTap` turns the agent's ``on_delta`` and ``on_progress`` into
  :class:`Preview` s that name the session and the turn (learnt from
  ``prompt.rendered`` as it is recorded);
- in one process, a :class:`PreviewBoard` fans them out to followers, each with a
  queue of :data:`FOLLOWER_QUEUE` previews (a full queue drops the newest);
- across processes (``skillog worker`` beside ``skillog serve`` on one SQLite file),
  a *side file* ``DB-live`` (``DB`` the log's path, like SQLite's own ``DB-wal``) holds
  the last :data:`SIDE_ROWS` batches in one table, written every
  :data:`FLUSH_S` by :class:`SideFileWriter` with ``synchronous=OFF`` and read every
  :data:`POLL_S` by :class:`SideFileReader` while someone follows. It is a separate
  file on purpose: previews never take the log's write lock nor touch its format, and
  deleting the side file loses nothing but previews.

Every batch that crosses processes names its writer (:attr:`SideFileWriter.origin`,
:attr:`NotifyWriter.origin`), and a reader skips the batches of the writer it is told
to: a process that publishes to its own board *and* to other processes must not read
its own previews back. (Skipping by session instead, "the sessions this process drives
now", republished the last batch of an answer that ended between the writer's flush
and the reader's poll: a follower saw its end twice.)
"""

from __future__ import annotations

import contextlib
import logging
import sqlite3
import uuid
from collections import OrderedDict
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Literal, Protocol, TypeVar

import msgspec
import trio

from eventlog import Event as StoredEvent
from eventlog import EventStore, SkillogError, SqliteStore, create_private

from ._effects import McpProgress
from ._model import Delta

log = logging.getLogger("skillog.previews")

FOLLOWER_QUEUE = 256
RECENT_SESSIONS = 256
CATCH_UP_ROWS = 40
SIDE_ROWS = 2048
FLUSH_S = 0.05
POLL_S = 0.1
MAX_PENDING = 4096
BUSY_MS = 50


class Preview(msgspec.Struct, frozen=True, kw_only=True):
    """One delta of session ``session``'s answer to turn ``turn`` (see :class:`Delta`
    for ``kind``, ``index``, ``text``, ``call_id``, ``name``), or (``kind``
    ``progress``) one progress notification of the MCP call ``call_id`` of turn
    ``turn`` to server ``name``: ``progress`` and ``total`` the server's numbers as
    decimal text (``total`` None: unknown), ``text`` its message (see
    :class:`McpProgress`). ``n`` counts the session's previews from 1 in the process
    that streamed them: a follower that sees a gap knows it missed some (the recorded
    response, or the call's notes, fill it)."""

    session: str
    turn: int
    n: int
    kind: Literal["text", "tool_call", "progress"]
    index: int
    text: str = ""
    call_id: str = ""
    name: str = ""
    progress: str | None = None
    total: str | None = None


T = TypeVar("T")

PreviewSink = Callable[[Preview], None]
"""Where previews go; called on the trio thread, must not block."""

_ENCODER = msgspec.json.Encoder()


class _Batch(msgspec.Struct, frozen=True):
    """Previews as they cross processes, with the writer that sent them."""

    origin: str
    previews: list[Preview]


_BATCH = msgspec.json.Decoder(_Batch)


def _origin() -> str:
    """A writer's name, unique among the processes sharing a log."""
    return uuid.uuid4().hex


def encode_preview(preview: Preview) -> bytes:
    """A preview as one line of JSON (no raw newline: safe as an SSE ``data:`` line)."""
    return _ENCODER.encode(preview)


class PreviewTap:
    """Binds an agent's deltas and MCP progress to one session: pass :meth:`delta` as
    ``Agent.on_delta``, :meth:`progress` as ``Agent.on_progress`` and :meth:`event`
    among its observers."""

    def __init__(self, session: str, sink: PreviewSink) -> None:
        self.session, self.sink = session, sink
        self.turn = 0
        self.n = 0

    def event(self, event: StoredEvent) -> None:
        if event.stream == self.session and event.type.split("@")[0] == "prompt.rendered":
            self.turn = msgspec.json.decode(event.body, type=_Turn).turn

    def delta(self, delta: Delta) -> None:
        self._send(delta.kind, delta.index, delta.text, delta.call_id, delta.name)

    def progress(self, progress: McpProgress) -> None:
        if progress.session_id == self.session:  # a tap is one session's
            self._send(
                "progress",
                0,
                progress.message or "",
                progress.call_id,
                progress.server,
                progress=progress.progress,
                total=progress.total,
            )

    def _send(
        self,
        kind: Literal["text", "tool_call", "progress"],
        index: int,
        text: str,
        call_id: str,
        name: str,
        *,
        progress: str | None = None,
        total: str | None = None,
    ) -> None:
        self.n += 1
        self.sink(
            Preview(
                session=self.session,
                turn=self.turn,
                n=self.n,
                kind=kind,
                index=index,
                text=text,
                call_id=call_id,
                name=name,
                progress=progress,
                total=total,
            )
        )


class _Turn(msgspec.Struct, frozen=True):
    turn: int = 0


class PreviewBoard:
    """Fans previews out to the followers of their session, in this process. Bounded:
    each follower holds at most :data:`FOLLOWER_QUEUE`; past it, previews are dropped
    (counted in :attr:`dropped`). A follower that joins mid-answer first gets what
    streamed of the latest answer so far (at most :data:`FOLLOWER_QUEUE` previews, kept
    for the last :data:`RECENT_SESSIONS` sessions that streamed): it may be an answer
    already recorded, which a follower tells by its turn."""

    def __init__(self, per_follower: int = FOLLOWER_QUEUE) -> None:
        self.per_follower = per_follower
        self._followers: dict[str, list[trio.MemorySendChannel[Preview]]] = {}
        self._recent: OrderedDict[str, list[Preview]] = OrderedDict()
        self.dropped = 0

    def publish(self, preview: Preview) -> None:
        recent = self._recent.get(preview.session)
        if recent is None or recent[-1].turn != preview.turn:
            recent = self._recent[preview.session] = []
            if len(self._recent) > RECENT_SESSIONS:
                self._recent.popitem(last=False)
        if len(recent) < self.per_follower:
            recent.append(preview)
        for channel in self._followers.get(preview.session, ()):
            try:
                channel.send_nowait(preview)
            except trio.WouldBlock:
                self.dropped += 1

    def followed(self) -> bool:
        """Whether anyone follows any session now."""
        return bool(self._followers)

    @contextlib.contextmanager
    def following(self, session: str) -> Iterator[trio.MemoryReceiveChannel[Preview]]:
        """The previews of ``session``: the latest answer's so far, then those published
        while the block runs."""
        send, receive = trio.open_memory_channel[Preview](self.per_follower)
        for preview in self._recent.get(session, ()):
            send.send_nowait(preview)  # never more than fit
        self._followers.setdefault(session, []).append(send)
        try:
            yield receive
        finally:
            followers = self._followers[session]
            followers.remove(send)
            if not followers:
                del self._followers[session]
            send.close()
            receive.close()


def side_file(db: Path) -> Path:
    """The side file of the SQLite log at ``db``."""
    return db.with_name(db.name + "-live")


class PreviewWriter(Protocol):
    """Publishes previews to other processes, each batch named ``origin``; :meth:`run`
    (in a nursery) sends them."""

    origin: str

    def publish(self, preview: Preview) -> None: ...

    async def run(self, *, task_status: trio.TaskStatus[None] = ...) -> None: ...


def preview_writer(store: EventStore) -> PreviewWriter | None:
    """What carries previews from this process to others over ``store``: its side file
    (SQLite), ``NOTIFY`` (PostgreSQL); None for a store with neither (memory)."""
    db = side_file_log(store)
    if db is not None:
        return SideFileWriter(db)
    if hasattr(store, "notifier"):
        return NotifyWriter(store)
    return None


def preview_reader(
    store: EventStore, board: PreviewBoard, skip: PreviewWriter | None = None
) -> SideFileReader | NotifyReader | None:
    """What brings other processes' previews over ``store`` into ``board`` (see
    :func:`preview_writer`), skipping those that ``skip`` (this process's writer, whose
    previews it publishes to ``board`` itself) sent."""
    origin = None if skip is None else skip.origin
    db = side_file_log(store)
    if db is not None:
        return SideFileReader(db, board, skip=origin)
    if hasattr(store, "notifications"):
        return NotifyReader(store, board, skip=origin)
    return None


def side_file_log(store: EventStore) -> Path | None:
    """The path of ``store``'s SQLite file, whose side file carries previews across
    processes; None for other stores (previews then stay in their process)."""
    return store.path if isinstance(store, SqliteStore) else None


def fan_out(*sinks: Callable[[T], None]) -> Callable[[T], None]:
    """One sink (of previews, of deltas) that hands each item to every one of ``sinks``."""

    def publish(item: T) -> None:
        for sink in sinks:
            sink(item)

    return publish


_SCHEMA = "CREATE TABLE IF NOT EXISTS previews (id INTEGER PRIMARY KEY, batch BLOB NOT NULL)"


def _connect(path: Path) -> sqlite3.Connection:
    create_private(path)  # streamed text, as private as the log (0600)
    conn = sqlite3.connect(
        path, timeout=BUSY_MS / 1000, isolation_level=None, check_same_thread=False
    )  # used by one task at a time, from trio's worker threads
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("PRAGMA synchronous=OFF")  # previews are lossy by design
    conn.execute(_SCHEMA)
    return conn


class _Queue:
    """A writer's queue: :meth:`publish` only appends (at most :data:`MAX_PENDING`; past
    it the oldest are dropped, counted in :attr:`dropped`); :meth:`take` empties it.
    ``origin`` names the writer in what it sends."""

    def __init__(self) -> None:
        self._pending: list[Preview] = []
        self.dropped = 0
        self.origin = _origin()

    def publish(self, preview: Preview) -> None:
        self._pending.append(preview)
        if len(self._pending) > MAX_PENDING:
            del self._pending[0]
            self.dropped += 1

    def take(self) -> list[Preview]:
        batch, self._pending = self._pending, []
        return batch


class SideFileWriter(_Queue):
    """Publishes previews to the side file of the log at ``db`` (see the module
    docstring): :meth:`publish` only queues (at most :data:`MAX_PENDING`; past it the
    oldest are dropped); :meth:`run` writes what is queued every :data:`FLUSH_S`."""

    def __init__(self, db: Path) -> None:
        super().__init__()
        self.path = side_file(db)

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        conn: sqlite3.Connection | None = None
        task_status.started()
        try:
            while True:
                await trio.sleep(FLUSH_S)
                batch = self.take()
                if not batch:
                    continue
                try:
                    if conn is None:
                        conn = await trio.to_thread.run_sync(_connect, self.path)
                    await trio.to_thread.run_sync(_write, conn, _Batch(self.origin, batch))
                except sqlite3.Error as e:  # busy, or no room: these previews are lost
                    self.dropped += len(batch)
                    log.debug("previews: %d dropped writing %s: %s", len(batch), self.path, e)
        finally:
            if conn is not None:
                conn.close()


def _write(conn: sqlite3.Connection, batch: _Batch) -> None:
    with conn:
        conn.execute("BEGIN IMMEDIATE")
        cursor = conn.execute("INSERT INTO previews (batch) VALUES (?)", (_ENCODER.encode(batch),))
        conn.execute("DELETE FROM previews WHERE id <= ?", ((cursor.lastrowid or 0) - SIDE_ROWS,))


class SideFileReader:
    """Reads the side file of the log at ``db`` into ``board`` every :data:`POLL_S`,
    while the board has followers (nobody following: nothing is read). Starts
    :data:`CATCH_UP_ROWS` batches before the file's end (about two seconds): a follower
    gets what streamed of the answer just before it came. The batches of writer ``skip``
    are skipped (this process's: it published them itself)."""

    def __init__(self, db: Path, board: PreviewBoard, *, skip: str | None = None) -> None:
        self.path, self.board, self.skip = side_file(db), board, skip

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        conn: sqlite3.Connection | None = None
        last = -1
        task_status.started()
        try:
            while True:
                await trio.sleep(POLL_S)
                if not self.board.followed():
                    last = -1  # start again from the end when someone follows
                    continue
                try:
                    if conn is None:
                        if not await trio.to_thread.run_sync(self.path.exists):
                            continue
                        conn = await trio.to_thread.run_sync(_connect, self.path)
                    last, batches = await trio.to_thread.run_sync(_read, conn, last)
                except sqlite3.Error as e:
                    log.debug("previews: reading %s: %s", self.path, e)
                    continue
                for batch in batches:
                    if batch.origin != self.skip:
                        for preview in batch.previews:
                            self.board.publish(preview)
        finally:
            if conn is not None:
                conn.close()


def _read(conn: sqlite3.Connection, last: int) -> tuple[int, list[_Batch]]:
    if last < 0:
        row = conn.execute("SELECT coalesce(max(id), 0) FROM previews").fetchone()
        last = max(int(row[0]) - CATCH_UP_ROWS, 0)
    rows = conn.execute(
        "SELECT id, batch FROM previews WHERE id > ? ORDER BY id LIMIT 256", (last,)
    ).fetchall()
    batches = []
    for ident, batch in rows:
        last = ident
        try:
            batches.append(_BATCH.decode(batch))
        except msgspec.DecodeError:
            continue  # not ours: skip it
    return last, batches


CHANNEL = "skillog_previews"
MAX_PAYLOAD = 7900  # PostgreSQL refuses a NOTIFY payload of 8000 bytes or more
RECONNECT_S = 1.0


def payloads(batch: Sequence[Preview], origin: str) -> tuple[list[str], int]:
    """``batch`` as JSON batches of writer ``origin`` (see :class:`_Batch`) under
    :data:`MAX_PAYLOAD` bytes each, and how many previews did not fit any (one preview
    over the limit alone: dropped)."""
    head = b'{"origin":' + _ENCODER.encode(origin) + b',"previews":['
    room = MAX_PAYLOAD - len(head) - len(b"]}")
    out: list[str] = []
    group: list[bytes] = []
    size = 0
    dropped = 0

    def close() -> None:
        out.append((head + b",".join(group) + b"]}").decode())

    for preview in batch:
        encoded = _ENCODER.encode(preview)
        if len(encoded) >= room:
            dropped += 1
            continue
        if size + len(encoded) >= room:
            close()
            group, size = [], 0
        group.append(encoded)
        size += len(encoded) + 1
    if group:
        close()
    return out, dropped


class NotifyWriter(_Queue):
    """Publishes previews with PostgreSQL's ``NOTIFY`` on :data:`CHANNEL` (stored
    nowhere, delivered to whoever listens now): :meth:`publish` queues (at most
    :data:`MAX_PENDING`, the oldest dropped past it); :meth:`run` sends what is queued
    every :data:`FLUSH_S`, as few payloads as fit; a lost connection drops the batch
    and is opened again."""

    def __init__(self, store: EventStore) -> None:
        super().__init__()
        self.store = store

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        notifier = self.store.notifier  # type: ignore[attr-defined]
        task_status.started()
        while True:
            try:
                async with notifier(CHANNEL) as send:
                    while True:
                        await trio.sleep(FLUSH_S)
                        batch = self.take()
                        if not batch:
                            continue
                        sent, dropped = payloads(batch, self.origin)
                        self.dropped += dropped
                        try:
                            await send(sent)
                        except SkillogError:
                            self.dropped += len(batch) - dropped
                            raise
            except SkillogError as e:
                log.debug("previews: notifying: %s", e)
                await trio.sleep(RECONNECT_S)


class NotifyReader:
    """Listens on :data:`CHANNEL` and publishes what comes into ``board`` (the
    batches of writer ``skip`` skipped); a lost connection is opened again (what was
    sent meanwhile is lost: previews)."""

    def __init__(self, store: EventStore, board: PreviewBoard, *, skip: str | None = None) -> None:
        self.store, self.board, self.skip = store, board, skip

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        notifications = self.store.notifications  # type: ignore[attr-defined]
        started = False
        while True:
            try:
                async with notifications(CHANNEL) as receive:
                    if not started:
                        task_status.started()
                        started = True
                    while (got := await receive()) is not None:
                        for payload in got:
                            try:
                                batch = _BATCH.decode(payload)
                            except msgspec.DecodeError:
                                continue  # not ours
                            if batch.origin != self.skip:
                                for preview in batch.previews:
                                    self.board.publish(preview)
            except SkillogError as e:
                log.debug("previews: listening: %s", e)
            if not started:
                task_status.started()
                started = True
            await trio.sleep(RECONNECT_S)
