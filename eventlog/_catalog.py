"""The catalog: one indexed row per key (a session), a projection of the log.

The log stays the truth. A domain (the orchestrator) hands the store a
:class:`Projection`: which row a stream's events belong to, and a pure function that
folds a batch of committed events into that row. The store runs it inside the
transaction that appends the events, so the table never lags the log; ``reindex``
rebuilds it from the log alone and ``check_catalog`` (run by ``log verify``) proves it
equals the fold. The store indexes a few generic columns (status, claimable,
created/updated, searchable text, pending count, lease holder and expiry) and keeps the
domain's whole row as JSON in ``doc``, so eventlog knows nothing of sessions.

Claims use the database's own locks (one ``BEGIN IMMEDIATE`` transaction on SQLite,
``FOR UPDATE SKIP LOCKED`` on PostgreSQL): a claim appends the claimant's event to the
claimed row's lease stream in the same transaction, and the projection makes the event
the row's holder. A heartbeat is an UPDATE of ``lease_until`` (no event), allowed only
to the row's holder; ``lease_until`` is the one column the fold does not decide, and
the one ``check_catalog`` does not compare.
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Callable, Iterable, Sequence
from typing import Protocol

import msgspec

from ._errors import SkillogError
from ._types import Event, EventStore, NewEvent

DEFAULT_LIMIT = 50


class CatalogRow(msgspec.Struct, frozen=True, kw_only=True):
    """One row: the generic indexed columns and the domain's own row (``doc``, JSON)."""

    key: str
    status: str = ""
    claimable: bool = False
    created_at: int = 0
    updated_at: int = 0
    text: str = ""
    pending: int = 0
    holder: str | None = None
    lease_until: int = 0
    doc: str = "{}"

    def folded(self) -> CatalogRow:
        """The row without what heartbeats change (what the fold must equal)."""
        return msgspec.structs.replace(self, lease_until=0)


class Projection(Protocol):
    """What a domain tells the store about its catalog."""

    version: str
    """Changes when :meth:`apply` folds differently: a store rebuilds a catalog that an
    older version built."""

    def key(self, stream: str) -> str | None:
        """The row ``stream``'s events belong to, or None (not catalogued)."""
        ...

    # Optional: ``streams(key) -> list[str]``, every stream the row ``key`` gathers
    # (``log archive`` archives them together or not at all; ``log verify`` re-reads a
    # differing row with them in one snapshot before it calls the difference a fault).

    def apply(self, row: CatalogRow | None, key: str, events: Sequence[Event]) -> CatalogRow | None:
        """``row`` with ``events`` (committed, of one stream, in seq order) folded in;
        None while the row has nothing to show yet. Pure: no I/O, no clock.

        The streams of one key may be folded in any order of each other (appends fold
        them in commit order, ``log verify`` stream by stream in the same pass as the
        chains): what one stream decides must not depend on another's events having
        come first (fields of its own, or a max)."""
        ...


class CursorError(SkillogError):
    """A listing cursor that this catalog did not hand out (tampered, or from another
    database's listing)."""


class Listing(msgspec.Struct, frozen=True, kw_only=True):
    """What to list: most recent first; ``after`` is the cursor of the previous page."""

    limit: int | None = DEFAULT_LIMIT
    status: tuple[str, ...] = ()
    since: int | None = None
    search: str | None = None
    pending_only: bool = False
    after: tuple[int, str] | None = None
    free_at: int | None = None
    """Only rows a claim would take at this time (claimable, lease free), oldest first."""


def encode_cursor(row: CatalogRow) -> str:
    return base64.urlsafe_b64encode(msgspec.json.encode([row.created_at, row.key])).decode()


def decode_cursor(text: str) -> tuple[int, str]:
    """The position a cursor names; :class:`CursorError` for anything else."""
    try:
        created, key = msgspec.json.decode(base64.urlsafe_b64decode(text.encode("ascii")))
    except (ValueError, TypeError, binascii.Error, msgspec.DecodeError, UnicodeError):
        created = key = None
    if not isinstance(created, int) or not isinstance(key, str) or not 0 < len(key) <= 256:
        raise CursorError(
            f"cursor {text[:40]!r} is not one this listing handed out; start from the first "
            "page (no cursor)"
        )
    return created, key


def like_pattern(text: str) -> str:
    """``text`` as a LIKE pattern that matches it literally anywhere (escape ``\\``)."""
    escaped = text.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
    return f"%{escaped}%"


def keep_current(
    current: bool | None,
    projection: Projection | None,
    events: Sequence[Event],
    *,
    built: Callable[[], bool],
    project: Callable[[Projection, Sequence[Event]], None],
    mark_stale: Callable[[], None],
) -> bool | None:
    """What a writer does in the transaction appending ``events``: fold them into the
    catalog when it is current (``current`` None: ask ``built``), or, writing without
    the projection, record that it no longer is. Returns whether it is current now."""
    if current is None:
        current = built()
    if not current or not events:
        return current
    if projection is None:
        mark_stale()
        return False
    project(projection, events)
    return True


def listing_sql(listing: Listing, mark: str, like: str, true: str) -> tuple[str, list[object]]:
    """The WHERE, ORDER BY and LIMIT of ``listing`` in SQL, in the store's dialect:
    ``mark`` the parameter placeholder (``?``, ``%s``), ``like`` its case-insensitive
    LIKE, ``true`` how ``claimable`` is true (as its partial index says it); every value
    is a bound parameter."""
    where: list[str] = []
    params: list[object] = []
    if listing.status:
        where.append(f"status IN ({', '.join(mark for _ in listing.status)})")
        params.extend(listing.status)
    if listing.since is not None:
        where.append(f"created_at >= {mark}")
        params.append(listing.since)
    if listing.search:
        where.append(f"text {like} {mark} ESCAPE '\\'")
        params.append(like_pattern(listing.search))
    if listing.pending_only:
        where.append("pending > 0")
    if listing.after is not None:
        where.append(f"(created_at, key) < ({mark}, {mark})")
        params.extend(listing.after)
    if listing.free_at is not None:
        where.append(f"claimable = {true} AND (holder IS NULL OR lease_until < {mark})")
        params.append(listing.free_at)
    sql = " WHERE " + " AND ".join(where) if where else ""
    order = "ASC" if listing.free_at is not None else "DESC"
    sql += f" ORDER BY created_at {order}, key {order}"
    if listing.limit is not None:
        sql += f" LIMIT {mark}"
        params.append(listing.limit)
    return sql, params


def fold_into(
    projection: Projection,
    rows: dict[str, CatalogRow | None],
    load: Callable[[str], CatalogRow | None],
    events: Iterable[Event],
) -> set[str]:
    """Fold ``events`` (in commit order) into ``rows`` (loading a row on first use with
    ``load``); returns the keys changed."""
    changed: set[str] = set()
    run: list[Event] = []
    run_key: str | None = None

    def flush() -> None:
        if run_key is not None and run:
            if run_key not in rows:
                rows[run_key] = load(run_key)
            rows[run_key] = projection.apply(rows[run_key], run_key, run)
            changed.add(run_key)

    for event in events:
        key = projection.key(event.stream)
        if key is None:
            continue
        if key != run_key or (run and run[-1].stream != event.stream):
            flush()
            run = []
            run_key = key
        run.append(event)
    flush()
    return changed


def free(row: CatalogRow, now: int) -> bool:
    return row.claimable and (row.holder is None or row.lease_until < now)


def matches(row: CatalogRow, listing: Listing) -> bool:
    """The memory store's filter; the SQL stores state the same in SQL."""
    if listing.status and row.status not in listing.status:
        return False
    if listing.since is not None and row.created_at < listing.since:
        return False
    if listing.search and listing.search.casefold() not in row.text.casefold():
        return False
    if listing.pending_only and row.pending == 0:
        return False
    if listing.free_at is not None and not free(row, listing.free_at):
        return False
    return listing.after is None or (row.created_at, row.key) < listing.after


class Claim(msgspec.Struct, frozen=True, kw_only=True):
    """Claim up to ``limit`` claimable rows whose lease is free at ``now``: for each,
    ``event_of(key)`` is appended to ``stream_of(key)`` in the same transaction."""

    limit: int
    now: int
    stream_of: Callable[[str], str]
    event_of: Callable[[str], NewEvent]


async def fold_store(store: EventStore, projection: Projection) -> dict[str, CatalogRow]:
    """The catalog the log folds to: every event in commit order (verify, reindex)."""
    rows: dict[str, CatalogRow | None] = {}
    batch: list[Event] = []
    async for event in store.read_all():
        batch.append(event)
        if len(batch) >= 2000:
            fold_into(projection, rows, lambda k: None, batch)
            batch = []
    fold_into(projection, rows, lambda k: None, batch)
    return {k: v for k, v in rows.items() if v is not None}


def differences(
    stored: Iterable[CatalogRow], folded: dict[str, CatalogRow]
) -> list[tuple[str, str]]:
    """How the stored catalog differs from the fold: (key, what differs) for each row
    that does (empty: they agree)."""
    found: list[tuple[str, str]] = []
    seen: set[str] = set()
    for row in stored:
        seen.add(row.key)
        want = folded.get(row.key)
        if want is None:
            found.append((row.key, f"catalog row {row.key!r} has no stream in the log"))
        elif row.folded() != want.folded():
            fields = [
                f for f in row.__struct_fields__
                if f != "lease_until" and getattr(row, f) != getattr(want, f)
            ]  # fmt: skip
            found.append((row.key, f"catalog row {row.key!r} differs from what the log folds "
                          f"to ({', '.join(fields)})"))  # fmt: skip
    found.extend(
        (key, f"catalog has no row for {key!r}, which the log holds")
        for key in folded
        if key not in seen
    )
    return found
