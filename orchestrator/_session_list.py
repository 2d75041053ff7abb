"""Sessions as rows: the read model behind ``skillog sessions``, the service's session
list and the console, folded from each session's log so the status is the runtime's own.
"""

from __future__ import annotations

from datetime import UTC, datetime

import msgspec

from eventlog import EventStore

from ._events import CODEC
from ._fleet import lease_history
from ._state import SessionState, apply
from ._streams import LEASE_PREFIX


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

    @property
    def parent(self) -> str:
        """``fork of SESSION@SEQ`` for a fork, else empty."""
        return "" if self.forked_from is None else f"fork of {self.forked_from}@{self.fork_at_seq}"


async def session_rows(store: EventStore) -> list[SessionRow]:
    """Every session, most recent first: who, when, how far, where it stands (folded
    from its log, so the status is the runtime's own)."""
    rows: list[tuple[int, str, SessionRow]] = []
    for info in await store.streams():
        if info.stream.startswith(LEASE_PREFIX):
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
        )
        rows.append((info.first_recorded_at, info.stream, row))
    rows.sort(reverse=True)
    return [row for _, _, row in rows]


def status_text(state: SessionState) -> str:
    """``ended (max_turns)``, ``suspended: awaiting approval (2 pending)``,
    ``suspended: approvals decided, resume it``, ``open (resumable)``."""
    if state.ended is not None:
        return f"ended ({state.ended.reason})"
    if state.status == "awaiting_approval":
        return f"suspended: awaiting approval ({len(state.pending_approvals)} pending)"
    if state.status == "resumable":
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
