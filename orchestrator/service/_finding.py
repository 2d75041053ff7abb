"""Finding sessions: one reading of the filters (``status``, ``q``, ``model``,
``submitter``, ``since``, ``until``, ``cursor``) and one paging over the session
catalog, for the API's ``GET /api/sessions`` and the console's list alike.

Status, task text and time are the catalog's own questions (indexed: ``until`` is a
cursor bound). Model and submitter are asked of each row a page brings; a page that
filters on them reads at most ``SCAN`` rows, so one request costs the same however long
the history, and its ``next`` cursor continues where the reading stopped (a page can
then hold fewer rows than asked, or none, with more to come)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import msgspec
from starlette.datastructures import QueryParams

from eventlog import EventStore
from eventlog._catalog import CatalogRow, CursorError, Listing, decode_cursor, encode_cursor

from .._catalog import catalog_current
from .._session_list import STATES, SessionRow, session_rows
from ._errors import ApiError
from ._submission import shown_model

SCAN = 2_000
"""The most catalog rows one filtered page reads."""


class Filters(msgspec.Struct, frozen=True, kw_only=True):
    status: tuple[str, ...] = ()
    q: str = ""
    model: str = ""
    submitter: str = ""
    since: int | None = None
    until: int | None = None
    after: tuple[int, str] | None = None

    @property
    def by_row(self) -> bool:
        """Whether rows are filtered one by one (model, submitter)."""
        return bool(self.model or self.submitter)


def _instant(text: str, name: str, *, end: bool) -> int:
    """``YYYY-MM-DD`` or ``YYYY-MM-DDTHH:MM[:SS]``, UTC, as ns; a bare date as ``until``
    means the end of that day."""
    try:
        moment = datetime.fromisoformat(text)
    except ValueError as e:
        raise ApiError(
            422,
            f"{name} must be a UTC date or time: YYYY-MM-DD or YYYY-MM-DDTHH:MM",
            f"query.{name}",
        ) from e
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    if end and "T" not in text and " " not in text:
        moment += timedelta(days=1)
    return int(moment.timestamp()) * 1_000_000_000 + moment.microsecond * 1000


def filters_of(params: QueryParams) -> Filters:
    """The filters of a query string (422 naming the parameter at fault)."""
    statuses = tuple(s for s in params.getlist("status") if s)
    if any(s not in STATES for s in statuses):
        raise ApiError(422, f"status must be one of {', '.join(STATES)}", "query.status")
    cursor = params.get("cursor")
    try:
        after = decode_cursor(cursor) if cursor else None
    except CursorError as e:
        raise ApiError(400, str(e), "query.cursor") from e
    since, until = params.get("since"), params.get("until")
    return Filters(
        status=statuses,
        q=(params.get("q") or "").strip()[:200],
        model=(params.get("model") or "")[:300],
        submitter=(params.get("submitter") or "")[:200],
        since=_instant(since, "since", end=False) if since else None,
        until=_instant(until, "until", end=True) if until else None,
        after=after,
    )


async def cursor_here(store: EventStore, after: tuple[int, str]) -> bool:
    """Whether the session a cursor names is in this log, started when it says."""
    if not await catalog_current(store):
        return True  # no catalog: the page is found by folding, any position will do
    row = await store.catalog_row(after[1])  # type: ignore[attr-defined]
    return row is not None and row.created_at == after[0]


def _cursor(row: SessionRow) -> str:
    return encode_cursor(CatalogRow(key=row.session, created_at=row.started_ns))


def _keep(filters: Filters, row: SessionRow) -> bool:
    if filters.model and shown_model(row.model) != filters.model:
        return False
    return not filters.submitter or row.submitter == filters.submitter


async def find(
    store: EventStore, filters: Filters, limit: int, *, scan: int = SCAN
) -> tuple[list[SessionRow], str | None]:
    """A page of at most ``limit`` sessions that match, newest first, and the cursor of
    the next page (None on the last)."""
    if filters.after is not None and not await cursor_here(store, filters.after):
        raise ApiError(
            400,
            "cursor names a session this log does not hold (a cursor of another database's "
            "listing?); start from the first page (no cursor)",
            "query.cursor",
        )
    after = filters.after
    if filters.until is not None and (after is None or (filters.until, "") < after):
        after = (filters.until, "")  # before the instant: the cursor's own comparison
    base = Listing(
        limit=limit + 1, status=filters.status, search=filters.q or None, since=filters.since
    )
    if not filters.by_row:
        rows = await session_rows(store, msgspec.structs.replace(base, after=after))
        more = len(rows) > limit
        return rows[:limit], _cursor(rows[limit - 1]) if more else None
    page: list[SessionRow] = []
    read = 0
    chunk = min(max(limit * 4, 50), scan)
    while True:
        rows = await session_rows(store, msgspec.structs.replace(base, limit=chunk, after=after))
        for row in rows:
            read += 1
            if _keep(filters, row):
                page.append(row)
                if len(page) == limit:
                    return page, _cursor(row)  # the next page may be empty: said by it
            if read >= scan:
                return page, _cursor(row)
        if len(rows) < chunk:
            return page, None
        after = (rows[-1].started_ns, rows[-1].session)
