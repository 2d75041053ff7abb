"""The catalog in PostgreSQL (eventlog/_catalog.py): its SQL, run by the writer inside
the append's transaction (after ``LOCK TABLE events``), and the listing and claim
queries (claims take rows ``FOR UPDATE SKIP LOCKED``)."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

import psycopg

from ._catalog import CatalogRow, Listing, Projection, fold_into, listing_sql
from ._types import Event

Conn = psycopg.Connection[Any]
RUNNABLE = "skillog_runnable"
"""The channel a transaction NOTIFYs when it makes a row claimable with no holder (a
session submitted, its approvals decided, its lease handed back): workers LISTEN."""
COLUMNS = "key, status, claimable, created_at, updated_at, text, pending, holder, lease_until, doc"
# Binary parameters (%b): text arrays in text format are escaped element by element
# with a regular expression (every quote of every doc), which profiled as a third of
# the writer thread's time per append.
_UPSERT = (
    f"INSERT INTO eventlog_catalog ({COLUMNS}) SELECT * FROM unnest(%b::text[], %b::text[], "
    "%b::bool[], %b::int8[], %b::int8[], %b::text[], %b::int4[], %b::text[], %b::int8[], "
    "%b::text[]) ON CONFLICT (key) DO UPDATE SET status = excluded.status, "
    "claimable = excluded.claimable, created_at = excluded.created_at, "
    "updated_at = excluded.updated_at, text = excluded.text, pending = excluded.pending, "
    "holder = excluded.holder, lease_until = excluded.lease_until, doc = excluded.doc"
)
CLAIMABLE = (
    f"SELECT {COLUMNS} FROM eventlog_catalog WHERE claimable = true "
    "AND (holder IS NULL OR lease_until < %s) ORDER BY created_at, key LIMIT %s "
    "FOR UPDATE SKIP LOCKED"
)


def to_row(r: Sequence[Any]) -> CatalogRow:
    return CatalogRow(
        key=r[0], status=r[1], claimable=bool(r[2]), created_at=r[3], updated_at=r[4],
        text=r[5], pending=r[6], holder=r[7], lease_until=r[8], doc=r[9],
    )  # fmt: skip


def built(conn: Conn) -> str | None:
    (regclass,) = conn.execute("SELECT to_regclass('eventlog_catalog_meta')::text").fetchone() or (
        None,
    )
    if regclass is None:
        return None
    row = conn.execute("SELECT version FROM eventlog_catalog_meta").fetchone()
    return None if row is None else str(row[0])


def upsert(conn: Conn, rows: Iterable[CatalogRow]) -> None:
    rows = list(rows)
    if rows:
        columns = [[getattr(r, f) for r in rows] for f in CatalogRow.__struct_fields__]
        conn.execute(_UPSERT, columns)


def project(conn: Conn, projection: Projection, events: Sequence[Event]) -> None:
    """Fold ``events`` into their rows, inside the caller's transaction (the rows are
    locked, so a heartbeat does not interleave)."""
    keys = sorted({k for e in events if (k := projection.key(e.stream)) is not None})
    if not keys:
        return
    found = conn.execute(
        f"SELECT {COLUMNS} FROM eventlog_catalog WHERE key = ANY(%b) FOR UPDATE", (keys,)
    ).fetchall()
    rows: dict[str, CatalogRow | None] = {r[0]: to_row(r) for r in found}
    before = dict(rows)
    changed = fold_into(projection, rows, lambda key: None, events)
    upsert(conn, (row for key in changed if (row := rows[key]) is not None))
    if any(_free(rows[key]) and not _free(before.get(key)) for key in changed):
        conn.execute(f"NOTIFY {RUNNABLE}".encode())


def _free(row: CatalogRow | None) -> bool:
    return row is not None and row.claimable and row.holder is None


def rebuild(conn: Conn, projection: Projection) -> int:
    conn.execute("LOCK TABLE events IN EXCLUSIVE MODE")
    conn.execute("DELETE FROM eventlog_catalog")
    rows: dict[str, CatalogRow | None] = {}
    with conn.cursor(name="eventlog_reindex") as cursor:
        cursor.itersize = 5000
        cursor.execute(
            "SELECT stream, seq, position, type, recorded_at, body, prev_hash, hash FROM events "
            "WHERE seq >= 0 ORDER BY position"
        )
        batch: list[Event] = []
        for r in cursor:
            batch.append(
                Event(stream=r[0], seq=r[1], position=r[2], type=r[3], recorded_at=r[4],
                      body=bytes(r[5]), prev_hash=r[6], hash=r[7])
            )  # fmt: skip
            if len(batch) >= 5000:
                fold_into(projection, rows, lambda key: None, batch)
                batch = []
        fold_into(projection, rows, lambda key: None, batch)
    kept = [row for row in rows.values() if row is not None]
    upsert(conn, kept)
    conn.execute("DELETE FROM eventlog_catalog_meta")
    conn.execute("INSERT INTO eventlog_catalog_meta (version) VALUES (%s)", (projection.version,))
    return len(kept)


def mark_stale(conn: Conn) -> None:
    conn.execute("DELETE FROM eventlog_catalog_meta")


def select(conn: Conn, listing: Listing) -> list[CatalogRow]:
    where, params = listing_sql(listing, "%s", "ILIKE", "true")
    sql = f"SELECT {COLUMNS} FROM eventlog_catalog{where}"
    return [to_row(r) for r in conn.execute(sql.encode(), params).fetchall()]


def renew(conn: Conn, key: str, holder: str, until: int) -> bool:
    cursor = conn.execute(
        "UPDATE eventlog_catalog SET lease_until = %s WHERE key = %s AND holder = %s",
        (until, key, holder),
    )
    return cursor.rowcount == 1
