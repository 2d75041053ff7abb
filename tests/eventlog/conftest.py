"""Shared fixtures: every store implementation, and helpers to make events."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from pathlib import Path

import pytest

from eventlog import EventStore, MemoryStore, NewEvent, open_postgres_store, open_sqlite_store


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
