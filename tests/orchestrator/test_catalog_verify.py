"""``log verify``'s catalog check beside a live writer (issue 25): the chain pass and
the read of the table happen at different moments, so a row that differs is read
again with its streams in one snapshot; only a difference that holds there is a
finding. No false ``catalog`` fault while a worker process appends; a row edited by
hand is still found."""

from __future__ import annotations

import sqlite3
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest
import trio

from eventlog import EventStore, open_store, verify
from eventlog._open import is_postgres_url
from orchestrator._catalog import SESSIONS
from orchestrator._grammar import session_grammar

WRITER = Path(__file__).with_name("catalog_writer.py")
RUNS = 30
SESSIONS_DURING = 40  # verify runs until the writer has queued this many sessions more
BUDGET_S = 60  # ... or this long, on a loaded machine (but at least RUNS runs)


async def catalog_faults(store: EventStore) -> list[str]:
    report = await verify(store, grammar=session_grammar, projection=SESSIONS)
    assert all(f.kind == "catalog" for f in report.faults), report.faults
    return [f.detail for f in report.faults]


@pytest.fixture(params=["sqlite", "postgres"])
def live_writer(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """The log (a SQLite file or a PostgreSQL URL) a worker process keeps appending to."""
    db = (
        str(tmp_path / "live.db")
        if request.param == "sqlite"
        else request.getfixturevalue("pg_dsn")
    )
    stop = tmp_path / "stop"
    proc = subprocess.Popen([sys.executable, str(WRITER), db, str(stop)],
                            stdout=subprocess.PIPE, text=True)  # fmt: skip
    try:
        assert proc.stdout is not None and proc.stdout.readline() == "ready\n"
        yield db
    finally:
        stop.touch()
        proc.communicate(timeout=60)
        assert proc.returncode == 0


def edit_by_hand(db: str, sql: str) -> None:
    if is_postgres_url(db):
        with psycopg.connect(db, autocommit=True) as conn:
            conn.execute(sql.encode())
    else:
        with sqlite3.connect(db, timeout=30) as conn:
            conn.execute(sql)


async def sessions(store: EventStore) -> int:
    return len(await store.read_catalog())  # type: ignore[attr-defined]


def test_no_false_catalog_fault_beside_a_live_worker(live_writer: str) -> None:
    async def run() -> tuple[list[list[str]], int]:
        async with open_store(live_writer, readonly=True) as store:
            found = []
            before = await sessions(store)
            deadline = trio.current_time() + BUDGET_S
            while len(found) < RUNS or (
                await sessions(store) < before + SESSIONS_DURING and trio.current_time() < deadline
            ):
                found.append(await catalog_faults(store))
            return found, await sessions(store) - before

    found, grown = trio.run(run)
    assert found == [[]] * len(found)
    assert grown >= 5  # verify ran while the worker appended


def test_a_row_edited_by_hand_is_found_beside_a_live_worker(live_writer: str) -> None:
    edit_by_hand(live_writer, "UPDATE eventlog_catalog SET text = 'edited' WHERE key = 'live0'")

    async def run() -> list[list[str]]:
        async with open_store(live_writer, readonly=True) as store:
            return [await catalog_faults(store) for _ in range(5)]

    for faults in trio.run(run):
        assert len(faults) == 1 and "catalog row 'live0' differs" in faults[0], faults
        assert "(text)" in faults[0]
