"""Durable approvals: decide a pending request from any process.

An approval request is an event (``approval.requested``); a session with nobody to
answer it suspends. These functions read the pending requests from the log and record
decisions (``approval.resolved``) into the session's stream, so the human in the loop
can answer tomorrow, from another machine; ``Agent.resume`` (or ``skillog resume``)
then continues. Optimistic concurrency decides races: of two decisions on one request,
exactly one is recorded.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import msgspec

from eventlog import ConcurrencyError, EventStore, SkillogError
from eventlog._catalog import Listing

from ._catalog import catalog_current
from ._events import (
    CODEC,
    ApprovalRemembered,
    ApprovalRequested,
    ApprovalResolved,
    Event,
    SessionStarted,
)
from ._policy import grant_covers, grant_label, remembered_grant
from ._state import SessionState, apply


class ApprovalError(SkillogError):
    """A decision that cannot be recorded: the call is not pending (never requested,
    already decided, expired) or the session is unknown. Nothing was written."""


class RememberError(ApprovalError):
    """A ``remember`` that cannot be recorded (bad form, a denial, or a rule that does
    not cover the call). Nothing was written."""


class PendingApproval(msgspec.Struct, frozen=True, kw_only=True):
    """One undecided request: where it is, what it would allow, since when (ns)."""

    session_id: str
    call_id: str
    tool: str
    action: str
    skill: str | None
    tier: str | None
    arguments: str
    requested_at: int
    expires_at: int | None
    status: str
    path: str | None = None
    args: tuple[str, ...] = ()
    skill_hash: str | None = None
    install: tuple[str, ...] = ()  # what a lazy install puts into the skill's environment


async def _fold(
    store: EventStore, session_id: str
) -> tuple[SessionState, dict[str, int], dict[str, ApprovalResolved]]:
    """The session's state, when each of its approval requests was recorded, and the
    decision on each call decided (in any turn)."""
    state = SessionState(session_id)
    requested_at: dict[str, int] = {}
    decided: dict[str, ApprovalResolved] = {}
    async for event in store.read(session_id):
        body = CODEC.decode(event)
        if isinstance(body, ApprovalRequested):
            requested_at[body.call_id] = event.recorded_at
        elif isinstance(body, ApprovalResolved):
            decided[body.call_id] = body
        apply(state, body, seq=event.seq, hash=event.hash)
    return state, requested_at, decided


async def pending_approvals(
    store: EventStore, session_id: str | None = None
) -> list[PendingApproval]:
    """The undecided approval requests of one session, or of every session, oldest
    first."""
    if session_id is not None:
        ids = [session_id]
    elif await catalog_current(store):  # the sessions with pending approvals, indexed
        rows = await store.list_catalog(Listing(limit=None, pending_only=True))  # type: ignore[attr-defined]
        ids = sorted(row.key for row in rows)
    else:
        ids = [info.stream for info in await store.streams()]
    pending = []
    for sid in ids:
        state, requested_at, _ = await _fold(store, sid)
        if not isinstance(state.config, SessionStarted) or state.status == "ended":
            continue
        for call_id, request in state.pending_approvals.items():
            pending.append(
                PendingApproval(
                    session_id=sid,
                    call_id=call_id,
                    tool=request.tool,
                    action=request.action,
                    skill=request.skill,
                    tier=request.tier,
                    arguments=request.arguments,
                    requested_at=requested_at[call_id],
                    expires_at=request.expires_at,
                    status=state.status,
                    path=request.path,
                    args=request.args,
                    skill_hash=request.skill_hash,
                    install=request.install,
                )
            )
    pending.sort(key=lambda p: (p.requested_at, p.session_id, p.call_id))
    return pending


async def decide_approval(
    store: EventStore,
    session_id: str,
    call_id: str,
    *,
    approved: bool,
    decided_by: str,
    reason: str | None = None,
    remember: str | None = None,
    clock: Callable[[], int] = time.time_ns,
) -> ApprovalResolved:
    """Record the decision on a pending request and return it.

    ``remember`` (an approval only) makes it stick for the rest of the session:
    ``skill`` or ``pattern:RULE`` (see :class:`ApprovalDecision`), recorded as
    ``approval.remembered`` in the same transaction, with the other pending requests
    of the session that the grant covers resolved as approved by it.

    Raises :class:`ApprovalError` when the session does not exist or has ended, the
    call has no request, the request was already decided, or it expired (its expiry
    is then recorded as a denial, as the runtime would). A decision racing another
    one loses cleanly: nothing is written and the error says so.
    """
    state, _, decided_calls = await _fold(store, session_id)
    if state.config is None:
        raise ApprovalError(f"no session {session_id!r} in this database; `skillog sessions`")
    if state.status == "ended":
        raise ApprovalError(f"session {session_id} has ended; nothing there waits for approval")
    request = state.pending_approvals.get(call_id)
    if request is None:
        decided = decided_calls.get(call_id)
        if decided is not None:
            verdict = "approved" if decided.approved else "denied"
            raise ApprovalError(
                f"call {call_id} of session {session_id} was already {verdict} by "
                f"{decided.decided_by}"
            )
        raise ApprovalError(
            f"call {call_id} of session {session_id} has no pending approval request; "
            "`skillog approvals` lists the pending ones"
        )
    expired = request.expires_at is not None and clock() >= request.expires_at
    decision = ApprovalResolved(
        call_id=call_id,
        approved=approved and not expired,
        decided_by="expired" if expired else decided_by,
        reason="no decision before the request expired" if expired else reason,
    )
    bodies: list[Event] = [decision]
    if remember is not None and not expired:
        try:
            grant = remembered_grant(remember, request, decided_by)
        except ValueError as e:
            raise RememberError(f"{e}; nothing was written") from e
        if not approved:  # a remembered denial: what it covers is refused unasked
            grant = msgspec.structs.replace(grant, approved=False)
        bodies += [grant, *_covered(state, grant, clock(), exclude=call_id)]
    now = clock()
    try:
        await store.append(
            session_id,
            [CODEC.encode(body, recorded_at=now) for body in bodies],
            expected_seq=state.seq + 1,
        )
    except ConcurrencyError as e:
        raise ApprovalError(
            f"session {session_id} changed while deciding call {call_id} (another decision, "
            "or the session moved on); nothing was written: look again with `skillog approvals`"
        ) from e
    if expired:
        raise ApprovalError(
            f"the approval request for call {call_id} expired; it was recorded as denied"
        )
    return decision


def _covered(
    state: SessionState, grant: ApprovalRemembered, now: int, *, exclude: str
) -> list[ApprovalResolved]:
    """Decisions on the other pending requests ``grant`` covers (unexpired ones)."""
    decided = []
    for call_id, other in sorted(state.pending_approvals.items()):
        if call_id == exclude or (other.expires_at is not None and now >= other.expires_at):
            continue
        covered = grant_covers(
            grant,
            other.tool,
            skill=other.skill,
            skill_hash=other.skill_hash,
            path=other.path or "",
            args=other.args,
        )
        if covered:
            decided.append(
                ApprovalResolved(
                    call_id=call_id, approved=grant.approved, decided_by=grant_label(grant)
                )
            )
    return decided
