"""Live events of one session as Server-Sent Events, resumable by seq.

The log is the only source: an event stream is the session's events read by seq from
where the client stands (``Last-Event-ID`` is the last seq it has), then the store's
``follow`` for what commits next. ``follow`` orders by global position; should an event
of the session ever arrive past a seq not yet sent, the gap is filled by reading the
stream by seq, so a follower neither misses nor repeats an event.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

import msgspec
import trio
from starlette.types import Receive, Scope, Send

from eventlog import Event, EventStore, closing

from ._schemas import EventOut

KEEPALIVE_S = 15.0
_ENCODER = msgspec.json.Encoder()


def event_out(event: Event) -> EventOut:
    return EventOut(
        stream=event.stream,
        seq=event.seq,
        position=event.position,
        type=event.type,
        recorded_at=event.recorded_at,
        prev_hash=event.prev_hash,
        hash=event.hash,
        body=msgspec.Raw(event.body),
    )


def sse_frame(event: Event) -> bytes:
    """One SSE message: ``id:`` the seq, ``data:`` the event as JSON (one line: the
    encoder never emits a raw newline)."""
    return b"id: %d\ndata: %s\n\n" % (event.seq, _ENCODER.encode(event_out(event)))


async def session_events(store: EventStore, stream: str, from_seq: int) -> AsyncIterator[Event]:
    """Every event of ``stream`` from ``from_seq`` on, each once and in seq order, then
    those committed later, until cancelled. ``from_seq`` must be at most the stream's
    length (so the position to follow from is known)."""
    next_seq = from_seq
    position = 0
    async with closing(store.read(stream, from_seq=max(0, from_seq - 1))) as events:
        async for event in events:
            position = event.position + 1
            if event.seq >= next_seq:
                next_seq = event.seq + 1
                yield event
    async with closing(store.follow(from_position=position)) as tail:
        async for event in tail:
            if event.stream != stream or event.seq < next_seq:
                continue
            if event.seq > next_seq:
                async with closing(store.read(stream, from_seq=next_seq, to_seq=event.seq)) as gap:
                    async for missed in gap:
                        yield missed
            next_seq = event.seq + 1
            yield event


class EventStreamResponse:
    """An ASGI response streaming :func:`session_events` as SSE, with a comment line
    every ``KEEPALIVE_S`` seconds of quiet, until the client goes away."""

    def __init__(self, store: EventStore, stream: str, from_seq: int) -> None:
        self.store, self.stream, self.from_seq = store, stream, from_seq

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
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
        await send({"type": "http.response.body", "body": b"retry: 1000\n\n", "more_body": True})
        frames_in, frames_out = trio.open_memory_channel[bytes](64)
        async with trio.open_nursery() as nursery:
            nursery.start_soon(self._produce, frames_in)
            nursery.start_soon(_until_disconnect, receive, nursery.cancel_scope)
            while True:
                frame = b": keepalive\n\n"
                with trio.move_on_after(KEEPALIVE_S):
                    frame = await frames_out.receive()
                try:
                    await send({"type": "http.response.body", "body": frame, "more_body": True})
                except OSError:  # the connection is gone
                    nursery.cancel_scope.cancel()
                    return

    async def _produce(self, frames: trio.MemorySendChannel[bytes]) -> None:
        async with frames:
            async for event in session_events(self.store, self.stream, self.from_seq):
                await frames.send(sse_frame(event))


async def _until_disconnect(receive: Receive, scope: trio.CancelScope) -> None:
    while (await receive())["type"] != "http.disconnect":
        pass
    scope.cancel()
