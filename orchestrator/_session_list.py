"""Sessions as rows: the read model behind ``skillog sessions``, the service's session
list and the console. From the session catalog when the log keeps one (each row the
fold of a session's events, orchestrator/_catalog.py); else the same rows folded from
the log in one pass (a log from before the catalog, opened read-only).
"""

from __future__ import annotations

from datetime import UTC, datetime

import msgspec

from eventlog import EventStore
from eventlog._catalog import CatalogRow, Listing, fold_store, matches

from ._catalog import SESSIONS, SessionEntry, catalog_current, entry_of
from ._state import SessionState

STATES = ("running", "awaiting_approval", "resumable", "ended")
"""The states a session listing filters on (``--status``, ``?status=``)."""


class SessionRow(msgspec.Struct, frozen=True, kw_only=True):
    """One line of ``skillog sessions`` (and of its ``--json``): ``turns`` is the number
    of model requests the session made (a fork counts the turns it copied),
    ``status`` the text of :func:`status_text`, ``state`` the fold's status (``new``,
    ``running``, ``awaiting_approval``, ``resumable``, ``ended``), ``end_reason`` why
    an ended session ended. A fork names the session and seq it was forked from."""

    session: str
    started: str
    model: str
    turns: int
    events: int
    status: str
    workers: tuple[str, ...] = ()
    state: str = ""
    end_reason: str | None = None
    pending_approvals: int = 0
    pending_forms: int = 0
    started_ns: int = 0
    forked_from: str | None = None
    fork_at_seq: int | None = None
    task: str = ""
    holder: str | None = None
    lease_until: int = 0
    submitter: str = ""
    policy: str = ""

    @property
    def parent(self) -> str:
        """``fork of SESSION@SEQ`` for a fork, else empty."""
        return "" if self.forked_from is None else f"fork of {self.forked_from}@{self.fork_at_seq}"


async def session_rows(store: EventStore, listing: Listing | None = None) -> list[SessionRow]:
    """The sessions ``listing`` asks for (every one by default), most recent first:
    who, when, how far, where it stands. From the session catalog when the log keeps
    one (its rows are the fold of each session's events).

    Else (a log written before the catalog, or by a program without it, opened
    read-only) the catalog's own fold is run over the log once, in memory, and
    filtered as the table would be: the same rows as after ``skillog log reindex``,
    at the cost of reading the whole log (:func:`catalog_current` tells a caller which,
    to say so)."""
    listing = listing or Listing(limit=None)
    if await catalog_current(store):
        found = await store.list_catalog(listing)  # type: ignore[attr-defined]
        return [session_row(row) for row in found if row.status]
    folded = (await fold_store(store, SESSIONS)).values()
    rows = sorted(
        (row for row in folded if row.status and matches(row, listing)),
        key=lambda row: (row.created_at, row.key),
        reverse=True,
    )
    return [session_row(row) for row in rows[: listing.limit]]


def session_row(row: CatalogRow) -> SessionRow:
    """The listing's line for a catalog row."""
    entry = entry_of(row)
    return SessionRow(
        session=entry.session,
        started=when(entry.created_at),
        model=f"{entry.provider}:{entry.model}",
        turns=entry.turns,
        events=entry.events,
        status=entry_status_text(entry),
        workers=entry.workers,
        state=entry.status,
        end_reason=entry.end_reason,
        pending_approvals=len(entry.pending),
        pending_forms=len(entry.forms),
        started_ns=entry.created_at,
        forked_from=entry.forked_from,
        fork_at_seq=entry.fork_at_seq,
        task=entry.task,
        holder=row.holder,
        lease_until=row.lease_until,
        submitter=entry.submitter,
        policy=entry.policy,
    )


def entry_status_text(entry: SessionEntry) -> str:
    """:func:`status_text` of a catalog row."""
    return _status_text(
        entry.status, entry.end_reason, len(entry.pending), entry.provider, len(entry.forms)
    )


def status_text(state: SessionState) -> str:
    """``ended (max_turns)``, ``suspended: awaiting approval (2 pending)``,
    ``suspended: approvals decided, resume it``, ``open (resumable)``; a session of
    ``skillog mcp serve`` that has not ended is an MCP client's connection, which no
    one can resume (``open (MCP client connection, not resumable)``); one whose MCP
    server's form waits for a human, ``open: waiting for input (1 form)``."""
    reason = state.ended.reason if state.ended is not None else None
    provider = state.config.provider if state.config is not None else ""
    progress = state.turn_progress
    forms = len(progress.forms) if progress is not None else 0
    return _status_text(state.status, reason, len(state.pending_approvals), provider, forms)


def _status_text(
    status: str, end_reason: str | None, pending: int, provider: str, forms: int = 0
) -> str:
    if status == "ended":
        return f"ended ({end_reason})"
    if provider == "mcp":
        return "open (MCP client connection, not resumable)"
    if forms:
        return f"open: waiting for input ({forms} form{'s' if forms > 1 else ''})"
    if status == "awaiting_approval":
        return f"suspended: awaiting approval ({pending} pending)"
    if status == "resumable":
        return "suspended: approvals decided, resume it"
    return "open (resumable)"


def when(ns: int) -> str:
    return datetime.fromtimestamp(ns / 1e9, UTC).strftime("%Y-%m-%d %H:%M:%S")


def age(ns: int) -> str:
    """A duration as ``42s``, ``5m``, ``3h`` or ``2d`` (rounded down)."""
    seconds = max(0, ns // 1_000_000_000)
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size:
            return f"{seconds // size}{unit}"
    return f"{seconds}s"
