"""The session catalog: one row per session, a projection of its events.

:data:`SESSIONS` is handed to the store when it is opened (``open_log``); the store
folds every append into the session's row in the append's own transaction, rebuilds
the table from the log on ``skillog log reindex`` and ``log verify`` checks it equals
this fold (eventlog/_catalog.py). A session's row gathers its own stream and its lease
stream (``lease/<session>``): what it is (status, task, model, turns, pending
approvals, fork parent) and who drives it (the lease holder; the expiry moves with
heartbeats, which are row updates, not events).

The status mirrors :func:`._state.apply` without folding messages, so it stays cheap
per append; ``tests/orchestrator/test_catalog.py`` checks both agree on every golden log.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from contextlib import AbstractAsyncContextManager

import msgspec

from eventlog import CheckpointHead, EventStore, open_store
from eventlog import Event as StoredEvent
from eventlog._catalog import CatalogRow, Listing

from ._events import (
    CODEC,
    ApprovalRemembered,
    ApprovalRequested,
    ApprovalResolved,
    LeaseAcquired,
    LeaseReleased,
    LeaseRenewed,
    McpElicitationAnswered,
    McpElicited,
    PromptRendered,
    SessionEnded,
    SessionForked,
    SessionStarted,
    SessionSuspended,
    ToolCompleted,
    ToolInterrupted,
    UserMessage,
)
from ._streams import (
    FORMS_PREFIX,
    LEASE_PREFIX,
    QUEUED,
    forms_stream,
    is_session_stream,
    lease_stream,
)


class SessionEntry(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    """A session as the catalog shows it (the row's ``doc``)."""

    session: str
    status: str = ""
    task: str = ""
    provider: str = ""
    model: str = ""
    created_at: int = 0
    updated_at: int = 0
    turns: int = 0
    events: int = 0
    pending: tuple[str, ...] = ()
    end_reason: str | None = None
    forked_from: str | None = None
    fork_at_seq: int | None = None
    queued: bool = False
    submitter: str = ""
    policy: str = ""
    suspended: bool = False
    holder: str | None = None
    workers: tuple[str, ...] = ()
    forms: tuple[str, ...] = ()  # MCP forms asked and not answered: "CALL#INDEX"


class _CallId(msgspec.Struct):
    call_id: str


class _Asked(msgspec.Struct):
    call_id: str
    index: int
    valid: bool = True


_CALL_ID = msgspec.json.Decoder(_CallId).decode
_ASKED = msgspec.json.Decoder(_Asked).decode
_ASKED_TAG, _ANSWERED_TAG = McpElicited.event_type, McpElicitationAnswered.event_type
_CALL_ENDS = frozenset({ToolCompleted.event_type, ToolInterrupted.event_type})
_FORM_TAGS = frozenset({_ASKED_TAG, _ANSWERED_TAG})


_ENCODE = msgspec.json.Encoder(order="sorted").encode
_DECODE = msgspec.json.Decoder(SessionEntry).decode
_SESSION_TYPES = frozenset(
    t.event_type
    for t in (
        ApprovalRemembered, ApprovalRequested, ApprovalResolved, PromptRendered, SessionEnded,
        SessionForked, SessionStarted, SessionSuspended, UserMessage,
    )
)  # fmt: skip
_KEEP_SUSPENDED = (ApprovalResolved.event_type, ApprovalRemembered.event_type)


class SessionProjection:
    """The orchestrator's :class:`eventlog._catalog.Projection`."""

    version = "sessions-3"

    def key(self, stream: str) -> str | None:
        if stream.startswith(LEASE_PREFIX):
            return stream[len(LEASE_PREFIX) :] or None
        if stream.startswith(FORMS_PREFIX):  # the row's, so archived with it
            return stream[len(FORMS_PREFIX) :] or None
        return stream if is_session_stream(stream) else None

    def streams(self, key: str) -> list[str]:
        """The streams a session's row gathers: archived together or not at all."""
        return [key, lease_stream(key), forms_stream(key)]

    def apply(
        self, row: CatalogRow | None, key: str, events: Sequence[StoredEvent]
    ) -> CatalogRow | None:
        if events[0].stream.startswith(FORMS_PREFIX):
            return row  # answers change nothing the row shows: the session records them
        entry = _DECODE(row.doc) if row is not None else SessionEntry(session=key)
        lease_until = row.lease_until if row is not None else 0
        if events[0].stream.startswith(LEASE_PREFIX):
            entry, lease_until = _apply_lease(entry, lease_until, events)
        else:
            entry = _apply_session(entry, events)
        return _row(entry, lease_until)


def _apply_session(entry: SessionEntry, events: Sequence[StoredEvent]) -> SessionEntry:
    fields = msgspec.structs.asdict(entry)
    pending = list(entry.pending)
    forms = list(entry.forms)
    for event in events:
        fields["events"] += 1
        if fields["created_at"] == 0 or event.seq == 0:
            fields["created_at"] = event.recorded_at
        fields["updated_at"] = max(fields["updated_at"], event.recorded_at)
        tag = event.type.split("@", 1)[0]
        status = fields["status"]
        if status in ("awaiting_approval", "resumable") and tag not in (
            *_KEEP_SUSPENDED,
            SessionSuspended.event_type,
        ):
            fields["status"] = "running"  # resumed
        fields["suspended"] = tag == SessionSuspended.event_type
        if tag in _FORM_TAGS or (forms and tag in _CALL_ENDS):
            _forms(forms, tag, event.body)
        if tag not in _SESSION_TYPES:
            continue
        body = CODEC.decode(event)
        match body:
            case SessionStarted():
                fields["status"] = "running"
                fields["provider"] = body.provider
                fields["model"] = body.model
            case SessionForked():
                fields["forked_from"] = body.from_session
                fields["fork_at_seq"] = body.at_seq
            case UserMessage():
                if not fields["task"]:
                    fields["task"] = body.text
            case PromptRendered():
                fields["turns"] = body.turn
            case ApprovalRequested():
                if body.call_id not in pending:
                    pending.append(body.call_id)
            case ApprovalResolved():
                if body.call_id in pending:
                    pending.remove(body.call_id)
                if fields["status"] == "awaiting_approval" and not pending:
                    fields["status"] = "resumable"
            case SessionSuspended():
                fields["status"] = "awaiting_approval" if pending else "resumable"
            case SessionEnded():
                fields["status"] = "ended"
                fields["end_reason"] = body.reason
                forms.clear()
            case _:
                pass
    fields["pending"] = tuple(pending)
    fields["forms"] = tuple(forms)
    return SessionEntry(**fields)


def _forms(forms: list[str], tag: str, body: bytes) -> None:
    """The session's open MCP forms after one of its form or call-outcome events: a
    form is open from its valid ``mcp.elicited`` until its answer or its call's end."""
    if tag in _CALL_ENDS:
        prefix = _CALL_ID(body).call_id + "#"
        forms[:] = [f for f in forms if not f.startswith(prefix)]
        return
    asked = _ASKED(body)
    key = f"{asked.call_id}#{asked.index}"
    if tag == _ANSWERED_TAG:
        if key in forms:
            forms.remove(key)
    elif asked.valid and key not in forms:
        forms.append(key)


def _apply_lease(
    entry: SessionEntry, lease_until: int, events: Sequence[StoredEvent]
) -> tuple[SessionEntry, int]:
    holder, queued, workers = entry.holder, entry.queued, list(entry.workers)
    submitter, policy = entry.submitter, entry.policy
    updated = entry.updated_at
    for event in events:
        updated = max(updated, event.recorded_at)
        body = CODEC.decode(event)
        match body:
            case LeaseAcquired():
                holder, lease_until = body.worker, body.until
                if not workers or workers[-1] != body.worker:
                    workers.append(body.worker)
            case LeaseRenewed():  # a log from before heartbeats were row updates
                lease_until = body.until
            case LeaseReleased():
                if event.seq == 0 and body.outcome == QUEUED:
                    queued, submitter, policy = True, body.submitter, body.policy
                holder, lease_until = None, 0
            case _:
                pass
    entry = msgspec.structs.replace(
        entry,
        holder=holder,
        queued=queued,
        submitter=submitter,
        policy=policy,
        workers=tuple(workers),
        updated_at=updated,
    )
    return entry, lease_until


def _row(entry: SessionEntry, lease_until: int) -> CatalogRow:
    claimable = entry.queued and entry.status in ("running", "resumable") and not entry.suspended
    return CatalogRow(
        key=entry.session,
        status=entry.status,
        claimable=claimable,
        created_at=entry.created_at,
        updated_at=entry.updated_at,
        text=entry.task,
        pending=len(entry.pending),
        holder=entry.holder,
        lease_until=lease_until if entry.holder is not None else 0,
        doc=_ENCODE(entry).decode(),
    )


def entry_of(row: CatalogRow) -> SessionEntry:
    return _DECODE(row.doc)


async def ended_before(store: EventStore, before: int) -> list[CheckpointHead]:
    """What ``skillog log archive`` takes: the heads of every session that ended
    (completed, failed or cancelled: status ``ended``) with its last event, its lease
    stream's included, before ``before`` (ns) and no lease held, and of its lease
    stream and its forms' answers (``forms/<session>``), when it has them. Running,
    suspended and leased sessions are never taken; the store skips any that moves
    before its archive commits."""
    rows = await store.list_catalog(Listing(limit=None, status=("ended",)))  # type: ignore[attr-defined]
    heads: list[CheckpointHead] = []
    for row in rows:
        if row.updated_at >= before or row.holder is not None:
            continue
        for stream in (row.key, lease_stream(row.key), forms_stream(row.key)):
            head = await store.head(stream)
            if head is not None:
                heads.append(CheckpointHead(stream=stream, seq=head.seq, hash=head.hash))
    return heads


SESSIONS = SessionProjection()
"""The session catalog every orchestrator store is opened with."""


def open_log(
    db: str | os.PathLike[str], *, readonly: bool = False
) -> AbstractAsyncContextManager[EventStore]:
    """The log at ``db`` as the runtime opens it: its audit views (SQLite) and the
    session catalog kept in every append's transaction."""
    from ._views import AUDIT_VIEWS

    return open_store(db, readonly=readonly, migrations=[AUDIT_VIEWS], projection=SESSIONS)


def catalogued(store: EventStore) -> bool:
    """Whether ``store`` keeps the session catalog (it was opened with :data:`SESSIONS`)."""
    return getattr(store, "projection", None) is SESSIONS


async def catalog_current(store: EventStore) -> bool:
    """Whether ``store``'s catalog is kept current by this projection, of this version
    (so listings may come from it). A catalog an older version built (a log opened
    read-only since an upgrade) is not trusted: the next read-write open rebuilds it."""
    built = getattr(store, "catalog_built", None)
    return built is not None and bool(await built(SESSIONS.version))
