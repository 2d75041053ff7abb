"""fold and fold_stream with snapshots checked against the chain."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from eventlog import (
    Event,
    EventStore,
    MemoryStore,
    NewEvent,
    SnapshotMismatchError,
    SnapshotPolicy,
    fold,
    fold_stream,
    open_sqlite_store,
)


def evs(n: int, start: int = 0) -> list[NewEvent]:
    return [NewEvent(type="t", body=b"%d" % i, recorded_at=i) for i in range(start, start + n)]


def add(state: int, e: Event) -> int:
    return state + int(e.body)


POLICY = SnapshotPolicy[int](name="sum/1", dump=lambda s: b"%d" % s, load=int, every=5)


async def test_fold_over_events_or_bodies(store: EventStore) -> None:
    await store.append("s", evs(10), expected_seq=0)
    assert await fold(add, store.read("s"), 0) == 45
    bodies = (int(e.body) async for e in store.read("s"))
    assert await fold(lambda acc, b: [*acc, b], bodies, []) == list(range(10))


async def test_snapshots_are_saved_used_and_checked(store: EventStore) -> None:
    await store.append("s", evs(12), expected_seq=0)
    first = await fold_stream(store, "s", add, 0, decode=lambda e: e, snapshots=POLICY)
    assert first.state == 66 and first.from_snapshot is None and first.head is not None
    await store.append("s", evs(2, 12), expected_seq=12)
    second = await fold_stream(store, "s", add, 0, decode=lambda e: e, snapshots=POLICY)
    assert second.state == 66 + 12 + 13
    assert second.from_snapshot is not None and second.from_snapshot.seq == 11


async def test_a_snapshot_off_the_chain_fails_loudly(tmp_path: Path) -> None:
    db = tmp_path / "x.db"
    async with open_sqlite_store(db) as store:
        await store.append("s", evs(6), expected_seq=0)
        await fold_stream(store, "s", add, 0, decode=lambda e: e, snapshots=POLICY)
    conn = sqlite3.connect(db)
    with conn:
        conn.execute("UPDATE events SET hash = ? WHERE seq = 5", ("a" * 64,))
    conn.close()
    async with open_sqlite_store(db) as store:
        with pytest.raises(SnapshotMismatchError, match="seq 5"):
            await fold_stream(store, "s", add, 0, decode=lambda e: e, snapshots=POLICY)
        # without snapshots the fold still works (verify is what reports the damage)
        plain = await fold_stream(store, "s", add, 0, decode=lambda e: e)
        assert plain.state == 15


async def test_a_snapshot_beyond_a_truncated_stream_fails_loudly() -> None:
    store = MemoryStore()
    await store.append("s", evs(6), expected_seq=0)
    await fold_stream(store, "s", add, 0, decode=lambda e: e, snapshots=POLICY)
    store._streams["s"] = store._streams["s"][:3]  # simulate truncation
    with pytest.raises(SnapshotMismatchError, match="no such event"):
        await fold_stream(store, "s", add, 0, decode=lambda e: e, snapshots=POLICY)
