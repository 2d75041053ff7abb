"""Folding events into state, with snapshots checked against the chain."""

from __future__ import annotations

from collections.abc import AsyncIterable, Callable
from dataclasses import dataclass
from typing import Generic, TypeVar

from ._errors import SnapshotMismatchError
from ._snapshot import Snapshot, SnapshotStore
from ._types import Event, EventStore, Head, closing

S = TypeVar("S")
T = TypeVar("T")


async def fold(reducer: Callable[[S, T], S], events: AsyncIterable[T], initial: S) -> S:
    """``reducer(...reducer(reducer(initial, e0), e1)..., en)`` over an async iterable.

    ``events`` may yield :class:`Event` envelopes or already-decoded bodies (for example
    ``(codec.decode(e) async for e in store.read(s))``); the reducer gets whatever the
    iterable yields. The reducer is synchronous and should be pure: no I/O, no clock.
    Memory stays flat in the number of events as long as the iterable streams.
    """
    state = initial
    async for event in events:
        state = reducer(state, event)
    return state


@dataclass(frozen=True)
class SnapshotPolicy(Generic[S]):
    """How :func:`fold_stream` stores and restores states.

    ``name`` identifies reducer + encoding (bump it when either changes); ``dump`` and
    ``load`` convert the state to and from bytes; a new snapshot is saved once at least
    ``every`` events were folded since the one used.
    """

    name: str
    dump: Callable[[S], bytes]
    load: Callable[[bytes], S]
    every: int = 1000


@dataclass(frozen=True)
class Folded(Generic[S]):
    """The result of :func:`fold_stream`: the state and the head it covers."""

    state: S
    head: Head | None
    from_snapshot: Snapshot | None


async def _event_hash_at(store: EventStore, stream: str, seq: int) -> str | None:
    async with closing(store.read(stream, from_seq=seq, to_seq=seq + 1)) as events:
        async for event in events:
            return event.hash
    return None


async def fold_stream(
    store: EventStore,
    stream: str,
    reducer: Callable[[S, T], S],
    initial: S,
    *,
    decode: Callable[[Event], T],
    snapshots: SnapshotPolicy[S] | None = None,
) -> Folded[S]:
    """Fold a whole stream, starting from its snapshot when there is a valid one.

    Each event is passed through ``decode`` (e.g. ``codec.decode``, or ``lambda e: e``)
    before the reducer. With ``snapshots`` (and a store that keeps them), the stored
    snapshot is used only if the event at its seq still has its hash; otherwise this
    fails loudly with :class:`SnapshotMismatchError`, because an append-only chain never
    changes legitimately: run ``skillog log verify``. A new snapshot is saved when
    ``snapshots.every`` or more events were folded.
    """
    snap: Snapshot | None = None
    state = initial
    from_seq = 0
    head: Head | None = None
    keeper = store if isinstance(store, SnapshotStore) else None
    if snapshots is not None and keeper is not None:
        snap = await keeper.load_snapshot(stream, snapshots.name)
        if snap is not None:
            actual = await _event_hash_at(store, stream, snap.seq)
            if actual != snap.hash:
                raise SnapshotMismatchError(
                    f"stream {stream!r}: snapshot {snapshots.name!r} covers seq {snap.seq} "
                    f"with hash {snap.hash} but the log has "
                    f"{'no such event' if actual is None else actual}; the chain was altered - "
                    "run `skillog log verify`"
                )
            state = snapshots.load(snap.state)
            from_seq = snap.seq + 1
            head = Head(seq=snap.seq, hash=snap.hash)
    folded = 0
    async for event in store.read(stream, from_seq=from_seq):
        state = reducer(state, decode(event))
        head = Head(seq=event.seq, hash=event.hash)
        folded += 1
    due = snapshots is not None and folded >= snapshots.every
    if due and snapshots is not None and keeper is not None and head is not None:
        await keeper.save_snapshot(
            Snapshot(
                stream=stream,
                name=snapshots.name,
                seq=head.seq,
                hash=head.hash,
                state=snapshots.dump(state),
            )
        )
    return Folded(state=state, head=head, from_snapshot=snap)
