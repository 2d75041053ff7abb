"""Shared fixtures: every store implementation, and helpers to make events."""

from __future__ import annotations

import bisect
import sqlite3
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import psycopg
import pytest

from eventlog import (
    Event,
    EventStore,
    MemoryStore,
    NewEvent,
    SqliteStore,
    open_postgres_store,
    open_sqlite_store,
)
from eventlog._hashchain import in_log


def new(n: int = 1, *, type: str = "test.happened", start: int = 0) -> list[NewEvent]:
    """``n`` small events with distinct bodies and times."""
    return [
        NewEvent(type=type, body=b'{"i":%d}' % (start + i), recorded_at=1_000 + start + i)
        for i in range(n)
    ]


NewEvents = Callable[..., list[NewEvent]]


@pytest.fixture
def make() -> NewEvents:
    """The :func:`new` helper (test modules cannot import conftest in importlib mode)."""
    return new


@pytest.fixture(params=["memory", "sqlite", "postgres"])
async def store(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[EventStore]:
    """Each store implementation, fresh (PostgreSQL: a new database on the test server)."""
    if request.param == "memory":
        yield MemoryStore()
    elif request.param == "sqlite":
        async with open_sqlite_store(tmp_path / "log.db", poll_interval=0.05) as s:
            yield s
    else:
        dsn = request.getfixturevalue("pg_dsn")
        async with open_postgres_store(dsn) as pg:
            yield pg


def insert_row(store: EventStore, stream: Any, seq: Any, *, hash: str = "0" * 64) -> int:
    """Write one event row around the store, as someone with write access to the
    database could (sqlite3, psql, or poking a MemoryStore); returns its position."""
    cols = (stream, seq, "forged", 1, b"{}", "0" * 64, hash)
    if isinstance(store, MemoryStore):
        position = store._events[-1].position + 1 if store._events else 1
        e = Event(
            stream=stream,
            seq=seq,
            position=position,
            type="forged",
            recorded_at=1,
            body=b"{}",
            prev_hash="0" * 64,
            hash=hash,
        )
        store._events.append(e)
        if in_log(stream, seq):
            bisect.insort(store._streams.setdefault(stream, []), e, key=lambda x: x.seq)
        return position
    sql = "INSERT INTO events (stream, seq, type, recorded_at, body, prev_hash, hash, position) "
    if isinstance(store, SqliteStore):
        conn = sqlite3.connect(store.path)
        with conn:
            cur = conn.execute(sql + "VALUES (?, ?, ?, ?, ?, ?, ?, NULL)", cols)
        conn.close()
        assert cur.lastrowid is not None
        return cur.lastrowid
    dsn = store.dsn  # type: ignore[attr-defined]
    with psycopg.connect(dsn, autocommit=True) as pg:
        row = pg.execute(
            sql.encode()
            + b"SELECT %s, %s, %s, %s, %s, %s, %s, COALESCE(MAX(position), 0) + 1 FROM events "
            b"RETURNING position",
            cols,
        ).fetchone()
    assert row is not None
    return int(row[0])


@pytest.fixture
def forge() -> Callable[..., int]:
    """The :func:`insert_row` helper."""
    return insert_row
