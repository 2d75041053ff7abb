"""Live events of one session as Server-Sent Events, resumable by seq.

The log is the only source: a live stream is the session's events read by seq from
where the client stands (``Last-Event-ID`` is the last seq it has), again each time
something commits. What commits is learnt from one :class:`Tail` per process, a single
``store.follow`` that wakes the live streams of the session each commit is to: a
``follow`` per client would hold one PostgreSQL connection each (200 followers
exhausted a default server's 100), and waking every stream on every commit made 200
followers read their sessions thousands of times a second (bench/service.py). Reading
by seq after each wake-up, with the wake-up taken before the read, a stream neither
misses nor repeats an event; should the tail ever stop, streams poll once a second.

The tail also holds the latest events it saw of each session (``RECENT`` each, for
the sessions followed now and the latest ones committed to, ``HELD_BYTES`` in all), with
each one's SSE frame encoded once: a live stream that is caught up takes the new ones
from there, and so does a new stream of a session the tail saw from its first event, so
one commit costs one read of the log (the tail's), not one per follower, and a follow
that connects to a session begun since the server started reads nothing; a stream the
tail cannot serve whole (a session begun earlier, a long one, a slow client) reads the
store by seq as before.

Asked for (``?previews=1``), previews of streamed answers and MCP calls' progress are
interleaved as ``event: delta`` and ``event: progress`` messages with no id: never
recorded, dropped rather than waited for (``orchestrator._previews``).

A session archived (``skillog log archive``) leaves the live log whole: the tail, seeing
``log.archived``, forgets what it held of it, remembers that it is gone and wakes its
streams, which end once a read finds nothing more; a new follow asks the log again
(404, as for any archived session) even while others follow it.
"""

from __future__ import annotations

import contextlib
from collections import OrderedDict, deque
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import contextmanager

import msgspec
import trio
from starlette.types import Receive, Scope, Send

from eventlog import (
    MAINTENANCE_STREAM,
    BlobNotFoundError,
    Event,
    EventStore,
    closing,
    is_archived_event,
    listed_tombstones,
)

from .._display import hidden_path, shown_json
from .._events import CODEC
from .._fleet import config_of, session_config
from .._previews import Preview, PreviewBoard, encode_preview
from .._streams import is_session_stream
from ._errors import error_response
from ._schemas import EventOut

KEEPALIVE_S = 15.0
MAX_STREAMS_PER_TOKEN = 400
MAX_STREAMS_PER_CLIENT = 400
RETRY_AFTER_S = 5
ENDED = "session.ended"
MAX_BATCH = 64
"""The most SSE messages one socket write of a live stream carries."""
RECENT = 256
"""The latest events of a session the tail holds for its live streams."""
HELD_BYTES = 8 << 20
"""The most event bytes the tail holds for sessions nobody follows now (the latest
sessions committed to, for the streams that connect next)."""
HIDDEN_KEPT = 4096
"""Sessions whose path to hide (:meth:`Tail.hidden`) the tail remembers."""
GONE_KEPT = 4096
"""Archived sessions the tail remembers (:meth:`Tail.gone`), the latest archived."""
WATCHED_POLL_S = 0.01
"""How often the tail looks for other processes' commits while a stream is followed
(SQLite: a worker in its own process commits where this one cannot hear it)."""
RECHECK_S = 1.0
"""How long a stream waits for the tail's word of a commit before it reads the log
itself (the fallback when no wake-up reaches this process)."""
_ENCODER = msgspec.json.Encoder()


Frame = tuple[bytes, bool]
"""What a stream writes next, and whether its body ends there (the session's end)."""


class StreamLimits:
    """Live streams held now, by token name and by client address: a caller past either
    cap is answered 429 (``Retry-After``) instead of holding one more. A stream holds
    a socket, a task and a read of the log on every commit; 4,000 of them from one
    token made every other request wait seconds."""

    def __init__(
        self, per_token: int = MAX_STREAMS_PER_TOKEN, per_client: int = MAX_STREAMS_PER_CLIENT
    ) -> None:
        self.per_token, self.per_client = per_token, per_client
        self._tokens: dict[str, int] = {}
        self._clients: dict[str, int] = {}

    def refusal(self, token: str, client: str) -> str | None:
        """Why one more stream is refused now, or None."""
        if self._tokens.get(token, 0) >= self.per_token:
            return f"token {token!r} holds {self.per_token} live streams already (the cap)"
        if self._clients.get(client, 0) >= self.per_client:
            return f"this address holds {self.per_client} live streams already (the cap)"
        return None

    @contextmanager
    def holding(self, token: str, client: str) -> Iterator[None]:
        for counts, key in ((self._tokens, token), (self._clients, client)):
            counts[key] = counts.get(key, 0) + 1
        try:
            yield
        finally:
            for counts, key in ((self._tokens, token), (self._clients, client)):
                counts[key] -= 1
                if not counts[key]:
                    del counts[key]

    def held(self) -> int:
        return sum(self._tokens.values())


def event_out(event: Event, hidden: str | None = None) -> EventOut:
    """The event as readers get it: its body as stored, except for ``hidden`` (the
    session's scripted model's path, ``_display.hidden_path``), shown by its name."""
    body = shown_json(event.body, hidden)
    return EventOut(
        stream=event.stream,
        seq=event.seq,
        position=event.position,
        type=event.type,
        recorded_at=event.recorded_at,
        prev_hash=event.prev_hash,
        hash=event.hash,
        body=msgspec.Raw(body),
        verbatim=body == event.body,
    )


def is_end(event: Event) -> bool:
    return event.type.split("@")[0] == ENDED


def preview_frame(preview: Preview) -> bytes:
    """One preview as an SSE message of type ``delta`` (a streamed answer's) or
    ``progress`` (an MCP call's), with no ``id:`` (the client's Last-Event-ID stays the
    seq of the last recorded event it has)."""
    kind = b"progress" if preview.kind == "progress" else b"delta"
    return b"event: %s\ndata: %s\n\n" % (kind, encode_preview(preview))


def sse_frame(event: Event, hidden: str | None = None) -> bytes:
    """One SSE message: ``id:`` the seq, ``data:`` the event as JSON (one line: the
    encoder never emits a raw newline)."""
    return b"id: %d\ndata: %s\n\n" % (event.seq, _ENCODER.encode(event_out(event, hidden)))


class Held:
    """An event the tail holds, with its SSE frame once a stream asked for it: the
    streams of one session share one encoding."""

    __slots__ = ("_frame", "_hidden", "event")

    def __init__(self, event: Event) -> None:
        self.event = event
        self._frame: bytes | None = None
        self._hidden: str | None = None

    def frame(self, hidden: str | None) -> bytes:
        if self._frame is None or self._hidden != hidden:
            self._frame, self._hidden = sse_frame(self.event, hidden), hidden
        return self._frame


def _size(event: Event) -> int:
    """About what holding ``event`` costs: its body, its frame (the body again, as JSON
    with the envelope) and the objects around them."""
    return 2 * len(event.body) + 768


class Tail:
    """Wakes the live streams of a session when something commits to it (see the
    module docstring): a commit wakes only its own session's followers."""

    def __init__(self, store: EventStore) -> None:
        self.store = store
        self._committed: dict[str, trio.Event] = {}  # stream -> set at its next commit
        self._watchers: dict[str, int] = {}  # stream -> live streams following it
        # stream -> its latest events as the tail saw them (RECENT at most): the streams
        # of one session share them instead of each reading the store on every commit,
        # and a session's next stream takes them instead of reading it from the start.
        # Followed sessions' are kept; the others' (from their first event only) while
        # they fit in HELD_BYTES, the least recently committed to dropped first.
        self._recent: OrderedDict[str, deque[Held]] = OrderedDict()
        self._held_bytes = 0
        self._followed = trio.Event()  # set while any stream is followed
        # session -> its scripted model's path to hide (hidden_path), read once: a
        # session's configuration is its first event(s), never changed (each of the
        # bench's ~60 connections a second read it again, a thread hop each).
        self._hidden: OrderedDict[str, str | None] = OrderedDict()
        # sessions archived since the server started (GONE_KEPT at most): their streams
        # end, and a follow of one reads the head (404) even while others follow it.
        self._gone: OrderedDict[str, None] = OrderedDict()
        # Positions of this process's commits taken as they committed (:meth:`_listened`),
        # which the follow skips; and the last position the follow handed over.
        self._early: set[int] = set()
        self._followed_to = -1

    @contextmanager
    def watching(self, stream: str) -> Iterator[None]:
        """While a live stream follows ``stream``; its wake-ups are forgotten when the
        last one leaves (memory stays with the streams followed now)."""
        self._watchers[stream] = self._watchers.get(stream, 0) + 1
        self._followed.set()
        try:
            yield
        finally:
            self._watchers[stream] -= 1
            if not self._watchers[stream]:
                del self._watchers[stream]
                self._committed.pop(stream, None)
                self._trim()
                if not self._watchers:
                    self._followed = trio.Event()

    async def hidden(self, stream: str) -> str | None:
        """What :func:`event_out` hides in ``stream``'s events: its configuration's
        scripted model path, remembered for the latest ``HIDDEN_KEPT`` sessions (not
        while the configuration is not recorded yet: a fork's comes at seq 1)."""
        if stream in self._hidden:
            self._hidden.move_to_end(stream)
            return self._hidden[stream]
        firsts = (self.since(stream, 0) or [])[:2]
        if len(firsts) == 2:  # held: no read (a thread hop per session under the bench)
            config = config_of([CODEC.decode(held.event) for held in firsts])
        else:
            config = await session_config(self.store, stream)
        if config is not None:
            self._hidden[stream] = hidden_path(config)
            while len(self._hidden) > HIDDEN_KEPT:
                self._hidden.popitem(last=False)
        return hidden_path(config)

    def kept(self) -> set[str]:
        """The streams this tail keeps anything for because they are followed now
        (besides :meth:`held`'s and :meth:`hidden`'s bounded memories)."""
        return set(self._watchers) | set(self._committed)

    def held(self) -> int:
        """The event bytes the tail holds (``HELD_BYTES`` at most, beyond the followed
        sessions' ``RECENT`` each)."""
        return self._held_bytes

    def since(self, stream: str, seq: int) -> list[Held] | None:
        """The events of ``stream`` from ``seq`` on that the tail holds, when it holds
        every one of them (``[]``: none committed since, as far as the tail has seen);
        None when it cannot say (it began holding after ``seq``): read the store."""
        recent = self._recent.get(stream)
        if not recent or recent[0].event.seq > seq:
            return None
        if recent[-1].event.seq < seq:
            return []
        return list(recent)[seq - recent[0].event.seq :]  # contiguous seqs

    def _hold(self, event: Event) -> None:
        """Keep ``event`` for the streams of its session (see ``_recent``)."""
        recent = self._recent.get(event.stream)
        if recent is not None and event.seq != recent[-1].event.seq + 1:
            self._drop(event.stream)  # not the next one (never, from one follow)
            recent = None
        if recent is None:
            watched = event.stream in self._watchers
            if not watched and (event.seq != 0 or not is_session_stream(event.stream)):
                return  # a new stream could not start from these
            recent = self._recent[event.stream] = deque()
        else:
            self._recent.move_to_end(event.stream)
        if len(recent) == RECENT:
            self._held_bytes -= _size(recent.popleft().event)
        recent.append(Held(event))
        self._held_bytes += _size(event)
        self._trim()

    def _drop(self, stream: str) -> None:
        self._held_bytes -= sum(_size(held.event) for held in self._recent.pop(stream))

    def _trim(self) -> None:
        """Drop the least recently committed-to sessions nobody follows while the tail
        holds more than ``HELD_BYTES``."""
        while self._held_bytes > HELD_BYTES:  # from the least recently committed to
            stream = next((s for s in self._recent if s not in self._watchers), None)
            if stream is None:
                return
            self._drop(stream)

    def next_commit(self, stream: str) -> trio.Event:
        """Set when the next commit to ``stream`` after this call is seen."""
        committed = self._committed.get(stream)
        if committed is None:
            committed = self._committed[stream] = trio.Event()
        return committed

    def known(self, stream: str) -> bool:
        """Whether ``stream`` has events, as far as the tail can say without a read: a
        live stream follows it, or the tail holds it from its first event; and it was
        not archived since."""
        if stream in self._gone:
            return False
        recent = self._recent.get(stream)
        return stream in self._watchers or (recent is not None and recent[0].event.seq == 0)

    def gone(self, stream: str) -> bool:
        """Whether ``stream`` was archived since this tail began (as far as it saw): its
        events left the live log, and none will come."""
        return stream in self._gone

    async def _archived(self, event: Event) -> None:
        """A ``log.archived``: the streams it archived are gone; what the tail held of
        them is dropped and their streams woken (to find nothing more, and end). A body
        or a tombstone list that does not decode leaves the streams as they were (the
        tail goes on: ``log verify`` is where a broken log is reported)."""
        try:
            stones = await listed_tombstones(self.store, event)
        except (msgspec.MsgspecError, BlobNotFoundError):
            return
        for stone in stones:
            self._gone[stone.stream] = None
            self._gone.move_to_end(stone.stream)
            if stone.stream in self._recent:
                self._drop(stone.stream)
            committed = self._committed.pop(stone.stream, None)
            if committed is not None:
                committed.set()
        while len(self._gone) > GONE_KEPT:
            self._gone.popitem(last=False)

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        last = getattr(self.store, "last_position", None)  # SQLite and PostgreSQL have it
        start = int(await last()) + 1 if last is not None else 0
        self._followed_to = start - 1
        listening = getattr(self.store, "listening", None)  # SQLite: this process's commits
        with contextlib.nullcontext() if listening is None else listening(self._listened):
            task_status.started()
            async with closing(self.store.follow(from_position=start)) as events:
                async for event in events:
                    self._followed_to = event.position
                    if self._early and event.position in self._early:
                        self._early.remove(event.position)  # handled as it committed
                        continue
                    if is_archived_event(event):
                        await self._archived(event)
                        continue
                    self._took(event)

    def _took(self, event: Event) -> None:
        self._hold(event)
        committed = self._committed.pop(event.stream, None)
        if committed is not None:
            committed.set()

    def _listened(self, events: list[Event]) -> None:
        """This process's commit, as it is delivered (``store.listening``): its events'
        streams are woken now, a scheduler pass before the follow would hand them over,
        when each is the next of what the tail holds of its session (or a new session's
        first); any other (after another process's commit to the session, an archive)
        is left to the follow, which skips those taken here."""
        for event in events:
            if event.position <= self._followed_to or event.stream == MAINTENANCE_STREAM:
                continue
            recent = self._recent.get(event.stream)
            if recent is None:
                if event.seq != 0 or event.stream in self._gone:
                    continue
            elif recent[-1].event.seq + 1 != event.seq:
                continue
            self._early.add(event.position)
            self._took(event)

    async def poll(self) -> None:
        """Beside :meth:`run`, until cancelled, in a server whose sessions are driven by
        other processes (``serve --workers 0`` beside ``skillog worker`` on one SQLite
        file): their commits wake nothing in this one, so while a stream is followed the
        tail's follow looks every ``WATCHED_POLL_S`` (one indexed read) instead of every
        quarter second; with nobody following, it is left to its own slow poll.
        PostgreSQL's follow is woken by NOTIFY: nothing to do."""
        wake: Callable[[], None] | None = getattr(self.store, "wake_followers", None)
        if wake is None:
            return
        while True:
            await self._followed.wait()
            await trio.sleep(WATCHED_POLL_S)
            wake()


async def session_events(
    store: EventStore, tail: Tail, stream: str, from_seq: int
) -> AsyncIterator[Event]:
    """Every event of ``stream`` from ``from_seq`` on, each once and in seq order, then
    those committed later, until cancelled or the session's ``session.ended`` (nothing
    follows it: an ended session is never driven again), or until nothing more is left
    to read of a session archived meanwhile (:meth:`Tail.gone`)."""
    async with closing(_batches(store, tail, stream, from_seq)) as batches:
        async for batch in batches:
            for held in batch:
                yield held.event


async def _batches(
    store: EventStore, tail: Tail, stream: str, from_seq: int, quiet: float | None = None
) -> AsyncIterator[list[Held]]:
    """:func:`session_events` as the batches they come in (what the tail holds, or up
    to ``MAX_BATCH`` from one read of the store), the last one ending with the end; with
    ``quiet``, an empty batch after that many seconds without one (for a keepalive)."""
    next_seq = from_seq
    last = trio.current_time()  # when the last batch went out
    with tail.watching(stream):
        while True:
            committed = tail.next_commit(stream)  # before the read: a later commit sets it
            held = tail.since(stream, next_seq)
            if held is None:  # catching up: from the store
                batch: list[Held] = []
                found = False
                async with closing(store.read(stream, from_seq=next_seq)) as events:
                    async for event in events:
                        found = True
                        next_seq = event.seq + 1
                        batch.append(Held(event))
                        if is_end(event):
                            yield batch
                            return
                        if len(batch) == MAX_BATCH:
                            yield batch
                            last, batch = trio.current_time(), []
                if batch:
                    yield batch
                    last = trio.current_time()
                if not found and tail.gone(stream):
                    return  # archived: its events left the live log, and none will come
            elif held:  # live: what the tail saw, shared by every stream of the session
                ends = [n for n, h in enumerate(held) if is_end(h.event)]
                if ends:
                    yield held[: ends[0] + 1]
                    return
                next_seq = held[-1].event.seq + 1
                yield held
                last = trio.current_time()
            wait = RECHECK_S
            if quiet is not None:
                if trio.current_time() - last >= quiet:
                    yield []
                    last = trio.current_time()
                wait = min(wait, last + quiet - trio.current_time())
            with trio.move_on_after(wait):
                await committed.wait()


class EventStreamResponse:
    """An ASGI response streaming :func:`session_events` as SSE, with a comment line
    every ``KEEPALIVE_S`` seconds of quiet, until the client goes away."""

    def __init__(
        self,
        store: EventStore,
        tail: Tail,
        stream: str,
        from_seq: int,
        *,
        limits: StreamLimits,
        holder: tuple[str, str],
        previews: PreviewBoard | None = None,
    ) -> None:
        self.store, self.tail, self.stream, self.from_seq = store, tail, stream, from_seq
        self.limits, self.holder, self.previews = limits, holder, previews

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        # Checked and counted with no await between: no burst gets past the cap.
        refusal = self.limits.refusal(*self.holder)
        if refusal is not None:
            response = error_response(429, f"{refusal}; close one or retry later")
            response.headers["retry-after"] = str(RETRY_AFTER_S)
            await response(scope, receive, send)
            return
        with self.limits.holding(*self.holder):
            await self._stream(receive, send)

    async def _stream(self, receive: Receive, send: Send) -> None:
        await send(
            {
                "type": "http.response.start",
                "status": 200,
                "headers": [
                    (b"content-type", b"text/event-stream; charset=utf-8"),
                    (b"cache-control", b"no-store"),
                    (b"x-accel-buffering", b"no"),
                ],
            }
        )
        # A stream's writes were the HTTP loop's largest cost at 300 followers: the retry
        # line goes with the first message (not a write of its own), the last event
        # with the end of the body (not one more).
        async with trio.open_nursery() as nursery:
            nursery.start_soon(_until_disconnect, receive, nursery.cancel_scope)
            if self.previews is None:
                await self._write(send)
            else:
                await self._write_with_previews(send, self.previews, nursery)
            nursery.cancel_scope.cancel()

    async def _write(self, send: Send) -> None:
        """The events as the tail (or the store) hands them over, each batch one write
        as soon as it comes, in this one task: nothing else is interleaved, and a
        commit's wake-up is handled once per stream, not passed on to a writer task."""
        first = b"retry: 1000\n\n"
        hidden = await self.tail.hidden(self.stream)
        batches = _batches(self.store, self.tail, self.stream, self.from_seq, KEEPALIVE_S)
        async with closing(batches):  # closed here when the client leaves, not by the GC
            async for batch in batches:  # one message per batch, each frame encoded once
                frames = [held.frame(hidden) for held in batch] or [b": keepalive\n\n"]
                ended = bool(batch) and is_end(batch[-1].event)
                body, first = b"".join([first, *frames]), b""
                if await _body(send, body, ended):
                    return
        await _body(send, b"", True)

    async def _write_with_previews(
        self, send: Send, previews: PreviewBoard, nursery: trio.Nursery
    ) -> None:
        """:meth:`_write` with previews interleaved: the events and the previews come
        through one channel to this task, which writes what waits as one body."""
        first = b"retry: 1000\n\n"
        frames_in, frames_out = trio.open_memory_channel[Frame](64)
        nursery.start_soon(self._produce, frames_in, previews)
        while True:
            frame, ended = b": keepalive\n\n", False
            with trio.move_on_after(KEEPALIVE_S):
                try:
                    frame, ended = await frames_out.receive()
                except trio.EndOfChannel:  # never before the end's frame
                    frame, ended = b"", True
            frame, ended = _with_ready(frame, ended, frames_out)
            body, first = first + frame, b""
            if await _body(send, body, ended):
                return

    async def _produce(self, frames: trio.MemorySendChannel[Frame], previews: PreviewBoard) -> None:
        async with frames, trio.open_nursery() as previewing:
            previewing.start_soon(self._preview, previews, frames)
            hidden = await self.tail.hidden(self.stream)
            batches = _batches(self.store, self.tail, self.stream, self.from_seq)
            async with closing(batches):  # closed here when the client leaves, not by the GC
                async for batch in batches:  # one message per batch, each frame encoded once
                    frame = b"".join([held.frame(hidden) for held in batch])
                    await frames.send((frame, is_end(batch[-1].event)))
            previewing.cancel_scope.cancel()

    async def _preview(self, board: PreviewBoard, frames: trio.MemorySendChannel[Frame]) -> None:
        """Previews interleaved with the events, dropped rather than waited for when
        the client reads slowly: the recorded response is the answer."""
        with board.following(self.stream) as previews:
            async for preview in previews:
                with contextlib.suppress(trio.WouldBlock):
                    frames.send_nowait((preview_frame(preview), False))


async def _body(send: Send, body: bytes, ended: bool) -> bool:
    """Write ``body`` (the response's last when ``ended``); whether the stream is over
    (it ended, or the connection is gone)."""
    try:
        await send({"type": "http.response.body", "body": body, "more_body": not ended})
    except OSError:
        return True
    return ended


async def _until_disconnect(receive: Receive, scope: trio.CancelScope) -> None:
    while (await receive())["type"] != "http.disconnect":
        pass
    scope.cancel()


def _with_ready(
    frame: bytes, ended: bool, frames: trio.MemoryReceiveChannel[Frame]
) -> tuple[bytes, bool]:
    """``frame`` and the frames already waiting behind it, as one body (one socket
    write and one HTTP chunk for a catch-up's or a commit batch's events, not one each),
    and whether the stream ends with them."""
    ready = [frame]
    while not ended and len(ready) < MAX_BATCH:
        try:
            frame, ended = frames.receive_nowait()
        except trio.WouldBlock:
            break
        except trio.EndOfChannel:
            ended = True
            break
        ready.append(frame)
    return b"".join(ready), ended
