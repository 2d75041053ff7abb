"""Sessions as rows: the read model behind ``skillog sessions``, the service's session
list and the console. From the session catalog when the log keeps one (each row the
fold of a session's events, orchestrator/_catalog.py); else folded from every stream.
"""

from __future__ import annotations

from datetime import UTC, datetime

import msgspec

from eventlog import EventStore
from eventlog._catalog import CatalogRow, Listing

from ._catalog import SessionEntry, catalog_current, entry_of
from ._events import CODEC
from ._fleet import lease_history
from ._state import SessionState, apply
from ._streams import is_session_stream

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
    one (its rows are the fold of each session's events); else folded from every
    stream (a log written before the catalog, opened read-only)."""
    listing = listing or Listing(limit=None)
    if await catalog_current(store):
        found = await store.list_catalog(listing)  # type: ignore[attr-defined]
        return [session_row(row) for row in found if row.status]
    rows = [row for row in await _scan_rows(store) if _wanted(row, listing)]
    return rows[: listing.limit] if listing.limit is not None else rows


def _wanted(row: SessionRow, listing: Listing) -> bool:
    if listing.status and row.state not in listing.status:
        return False
    if listing.since is not None and row.started_ns < listing.since:
        return False
    if listing.search and listing.search.casefold() not in row.task.casefold():
        return False
    if listing.pending_only and not row.pending_approvals:
        return False
    return listing.after is None or (row.started_ns, row.session) < listing.after


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
        started_ns=entry.created_at,
        forked_from=entry.forked_from,
        fork_at_seq=entry.fork_at_seq,
        task=entry.task,
        holder=row.holder,
        lease_until=row.lease_until,
        submitter=entry.submitter,
        policy=entry.policy,
    )


async def _scan_rows(store: EventStore) -> list[SessionRow]:
    rows: list[tuple[int, str, SessionRow]] = []
    for info in await store.streams():
        if not is_session_stream(info.stream):
            continue
        state = SessionState(info.stream)
        async for event in store.read(info.stream):
            apply(state, CODEC.decode(event), seq=event.seq, hash=event.hash)
        if state.config is None:
            continue
        fork = state.forked_from
        row = SessionRow(
            session=info.stream,
            started=when(info.first_recorded_at),
            model=f"{state.config.provider}:{state.config.model}",
            turns=state.turn,
            events=info.length,
            status=status_text(state),
            workers=tuple(await lease_history(store, info.stream)),
            state=state.status,
            end_reason=state.ended.reason if state.ended is not None else None,
            pending_approvals=len(state.pending_approvals),
            started_ns=info.first_recorded_at,
            forked_from=fork.from_session if fork is not None else None,
            fork_at_seq=fork.at_seq if fork is not None else None,
            task=_task(state),
        )
        rows.append((info.first_recorded_at, info.stream, row))
    rows.sort(reverse=True)
    return [row for _, _, row in rows]


def _task(state: SessionState) -> str:
    first = next((m for m in state.messages if m.role == "user"), None)
    if first is None:
        return ""
    return "".join(getattr(p, "text", "") for p in first.parts)


def entry_status_text(entry: SessionEntry) -> str:
    """:func:`status_text` of a catalog row."""
    return _status_text(entry.status, entry.end_reason, len(entry.pending), entry.provider)


def status_text(state: SessionState) -> str:
    """``ended (max_turns)``, ``suspended: awaiting approval (2 pending)``,
    ``suspended: approvals decided, resume it``, ``open (resumable)``; a session of
    ``skillog mcp serve`` that has not ended is an MCP client's connection, which no
    one can resume (``open (MCP client connection, not resumable)``)."""
    reason = state.ended.reason if state.ended is not None else None
    provider = state.config.provider if state.config is not None else ""
    return _status_text(state.status, reason, len(state.pending_approvals), provider)


def _status_text(status: str, end_reason: str | None, pending: int, provider: str) -> str:
    if status == "ended":
        return f"ended ({end_reason})"
    if provider == "mcp":
        return "open (MCP client connection, not resumable)"
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
