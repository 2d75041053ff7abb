"""The event envelope, the store contract and the small value types around it."""

from __future__ import annotations

from collections.abc import AsyncGenerator, AsyncIterator, Callable, Sequence
from contextlib import asynccontextmanager
from typing import Protocol, TypeVar, runtime_checkable

import msgspec


class NewEvent(msgspec.Struct, frozen=True, kw_only=True):
    """An event about to be appended: the store assigns seq, position and the hashes.

    ``type`` is the tag (``"skill.activated"``, or ``"skill.activated@2"`` for schema
    version 2); ``body`` the canonical bytes (see :class:`Codec`); ``recorded_at``
    integer nanoseconds since the epoch, read once from the caller's clock.
    """

    type: str
    body: bytes
    recorded_at: int


class Event(msgspec.Struct, frozen=True, kw_only=True):
    """A committed event: the envelope as stored and hashed.

    ``seq`` counts from 0 within ``stream``; ``position`` orders all events of one
    database (strictly increasing in commit order, not necessarily contiguous).
    ``hash`` is the lowercase hex sha256 of the link (see docs/log-format.md) and
    ``prev_hash`` the previous event's hash, or :data:`GENESIS_HASH` for seq 0.
    """

    stream: str
    seq: int
    position: int
    type: str
    recorded_at: int
    body: bytes
    prev_hash: str
    hash: str


class Head(msgspec.Struct, frozen=True, kw_only=True):
    """The last event of a stream: its seq and hash."""

    seq: int
    hash: str


class StreamInfo(msgspec.Struct, frozen=True, kw_only=True):
    """A summary of one stream: its length, head hash and first/last recording times."""

    stream: str
    length: int
    head_hash: str
    first_recorded_at: int
    last_recorded_at: int


@runtime_checkable
class EventStore(Protocol):
    """The contract every store implements (memory, SQLite, PostgreSQL).

    ``append`` is atomic and optimistic: ``expected_seq`` is the seq the first new event
    gets (the stream's current length); a mismatch raises :class:`ConcurrencyError` and
    writes nothing. It returns only after the events and blobs are committed (durable as
    the store promises). It is never cancelled: called, it commits or fails with its
    own error, and the caller's cancellation acts at the caller's next checkpoint (so
    one append can commit for several tasks, and its caller learns what it wrote).
    ``on_durable``, when given, is called once the commit is durable and before
    ``append`` returns, from whatever thread commits (a writer thread: it must be quick
    and thread-safe; an exception it raises is logged, and the append still returns
    what it committed): what may leave the process once the events are durable leaves
    then, without waiting for the appending task to be scheduled again. Reads stream in
    order without loading a whole stream.

    **What the log is.** A stored row is part of the log when its ``seq`` is an integer
    >= 0 and its ``stream`` a valid stream id: text of 1..256 characters with no control
    character (U+0000..U+001F, U+007F); see :func:`eventlog._hashchain.in_log`. Every
    reader (``head``, ``read``, ``read_all``, ``follow``, ``streams``) returns exactly
    those rows, and a stream's head and length come from its highest such seq.
    ``verify`` checks those rows stream by stream as one chain (seq 0, 1, 2... each
    linked to the previous hash), so a gap or a duplicate seq is a fault; every other
    row (``read_strays``) is reported as a fault too, and shown by no reader. A store
    states the rule in its own query language, next to each reader's query.
    """

    async def append(
        self,
        stream: str,
        events: Sequence[NewEvent],
        *,
        expected_seq: int,
        blobs: Sequence[bytes] = (),
        on_durable: Callable[[], None] | None = None,
    ) -> tuple[Event, ...]: ...

    async def head(self, stream: str) -> Head | None: ...

    def read(
        self, stream: str, *, from_seq: int = 0, to_seq: int | None = None
    ) -> AsyncIterator[Event]: ...

    def read_all(self, *, from_position: int = 0) -> AsyncIterator[Event]: ...

    def follow(self, *, from_position: int = 0) -> AsyncIterator[Event]: ...

    async def streams(self) -> list[StreamInfo]: ...

    async def put_blob(self, data: bytes) -> str: ...

    async def get_blob(self, digest: str) -> bytes: ...

    async def has_blob(self, digest: str) -> bool: ...

    async def row_count(self, stream: str | None = None) -> int:
        """Every stored event row (of ``stream``: a stored stream equal to it), in the
        log or not (verify compares it to what it checked, and looks for strays only
        when the counts differ)."""
        ...

    def read_strays(self, stream: str | None = None) -> AsyncIterator[tuple[int, object, object]]:
        """``(position, stream, seq)`` of every stored row (of ``stream``) outside the
        log, as stored (``stream`` and ``seq`` may be of any type), in position order."""
        ...

    def read_blobs(self) -> AsyncIterator[tuple[str, bytes]]:
        """Every stored ``(digest, bytes)`` as stored, in a stable order (for verify)."""
        ...


T = TypeVar("T")


@asynccontextmanager
async def closing(it: AsyncIterator[T]) -> AsyncGenerator[AsyncIterator[T], None]:
    """Close an async generator deterministically when a loop over it stops early."""
    try:
        yield it
    finally:
        aclose = getattr(it, "aclose", None)
        if aclose is not None:
            await aclose()
