"""The catalog in SQLite (eventlog/_catalog.py): its SQL, run by the writer inside the
append's transaction, and the listing and claim queries."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterable, Sequence
from typing import Any

from ._catalog import CatalogRow, Listing, Projection, fold_into, listing_sql
from ._types import Event

COLUMNS = "key, status, claimable, created_at, updated_at, text, pending, holder, lease_until, doc"
UPSERT = (
    f"INSERT OR REPLACE INTO eventlog_catalog ({COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
)
NAMES = tuple(COLUMNS.split(", "))
META = "SELECT value FROM eventlog_meta WHERE key = 'catalog'"


def to_row(r: Sequence[Any]) -> CatalogRow:
    return CatalogRow(
        key=r[0], status=r[1], claimable=bool(r[2]), created_at=r[3], updated_at=r[4],
        text=r[5], pending=r[6], holder=r[7], lease_until=r[8], doc=r[9],
    )  # fmt: skip


def _values(row: CatalogRow) -> tuple[object, ...]:
    return (
        row.key, row.status, int(row.claimable), row.created_at, row.updated_at, row.text,
        row.pending, row.holder, row.lease_until, row.doc,
    )  # fmt: skip


def has_table(conn: sqlite3.Connection) -> bool:
    sql = "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'eventlog_catalog'"
    return conn.execute(sql).fetchone() is not None


def built(conn: sqlite3.Connection) -> str | None:
    """The projection version the catalog was built by, or None (not current)."""
    if not has_table(conn):
        return None
    row = conn.execute(META).fetchone()
    return None if row is None else str(row[0])


def load(conn: sqlite3.Connection, key: str) -> CatalogRow | None:
    r = conn.execute(f"SELECT {COLUMNS} FROM eventlog_catalog WHERE key = ?", (key,)).fetchone()
    return None if r is None else to_row(r)


def project(
    conn: sqlite3.Connection,
    projection: Projection,
    events: Iterable[Event],
    known: dict[str, CatalogRow],
) -> None:
    """Fold committed-to-be ``events`` into their rows (inside the caller's transaction).

    ``known``: rows as the file holds them, kept by the writer between its commits (it
    forgets them whenever the file may have changed otherwise); read instead of the
    table, and updated with what is written. A row that exists is updated in place, in
    the columns that changed: the index entries of the others are not rewritten (an
    active session's row changes its count, time and document on every commit)."""
    before: dict[str, CatalogRow | None] = {}

    def load_row(key: str) -> CatalogRow | None:
        row = before[key] = known[key] if key in known else load(conn, key)
        return row

    rows: dict[str, CatalogRow | None] = {}
    inserts: list[tuple[object, ...]] = []
    for key in fold_into(projection, rows, load_row, events):
        row, old = rows[key], before[key]
        if row is None:
            known.pop(key, None)  # nothing written: read it again next time
            continue
        if old is None:
            inserts.append(_values(row))
        elif row != old:
            _update(conn, old, row)
        known[key] = row
    if inserts:
        conn.executemany(UPSERT, inserts)


def _update(conn: sqlite3.Connection, old: CatalogRow, new: CatalogRow) -> None:
    values = _values(new)
    changed = [
        (name, value)
        for name, was, value in zip(NAMES, _values(old), values, strict=True)
        if was != value
    ]
    if not changed:
        return
    assignments = ", ".join(f"{name} = ?" for name, _ in changed)
    conn.execute(
        f"UPDATE eventlog_catalog SET {assignments} WHERE key = ?",
        [*(value for _, value in changed), values[0]],
    )


def rebuild(conn: sqlite3.Connection, projection: Projection) -> int:
    """Refill the catalog from the log (inside the caller's transaction); row count."""
    from ._sqlite_db import IN_LOG

    conn.execute("DELETE FROM eventlog_catalog")
    rows: dict[str, CatalogRow | None] = {}
    cursor = conn.execute(
        "SELECT stream, seq, position, type, recorded_at, body, prev_hash, hash FROM events "
        f"WHERE {IN_LOG} ORDER BY position"
    )
    while batch := cursor.fetchmany(5000):
        events = [
            Event(stream=r[0], seq=r[1], position=r[2], type=r[3], recorded_at=r[4], body=r[5],
                  prev_hash=r[6], hash=r[7])
            for r in batch
        ]  # fmt: skip
        fold_into(projection, rows, lambda key: None, events)
    upserts = [_values(row) for row in rows.values() if row is not None]
    conn.executemany(UPSERT, upserts)
    conn.execute(
        "INSERT OR REPLACE INTO eventlog_meta (key, value) VALUES ('catalog', ?)",
        (projection.version,),
    )
    return len(upserts)


def mark_stale(conn: sqlite3.Connection) -> None:
    """An append without the projection: the catalog no longer equals the fold."""
    conn.execute("DELETE FROM eventlog_meta WHERE key = 'catalog'")


def select(conn: sqlite3.Connection, listing: Listing) -> list[CatalogRow]:
    where, params = listing_sql(listing, "?", "LIKE", "1")
    sql = f"SELECT {COLUMNS} FROM eventlog_catalog{where}"
    return [to_row(r) for r in conn.execute(sql, params).fetchall()]


CLAIMABLE = (
    f"SELECT {COLUMNS} FROM eventlog_catalog WHERE claimable = 1 "
    "AND (holder IS NULL OR lease_until < ?) ORDER BY created_at, key LIMIT ?"
)


def renew(conn: sqlite3.Connection, key: str, worker: str, until: int) -> bool:
    sql = "UPDATE eventlog_catalog SET lease_until = ? WHERE key = ? AND holder = ?"
    return conn.execute(sql, (until, key, worker)).rowcount == 1
