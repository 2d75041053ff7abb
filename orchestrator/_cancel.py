"""Cancel a session from outside its driver: recorded, and each open call resolved as
its effect class allows.

A cancel takes the session's lease like any driver (a live lease held by another
driver refuses it: stop that driver first), then commits in one transaction what the
log needs to say the session is over: a pending approval is denied by the canceller;
each call whose intent is durable but whose outcome is not gets one: ``at-most-once``
calls resolve as ``tool.interrupted`` (it may or may not have taken effect, as after a
crash, and it is never run again), ``pure`` and ``idempotent`` ones as an error result
(not re-run: the session will not go on); then ``session.ended`` with reason
``cancelled``, which says how many events before it are the cancel's (``closes``). A
call the model asked for whose intent was never recorded is closed last, as an error
result with no ``tool.called`` (it never ran; the driver the cancel cut finds the
stream moved on when it appends the intent, and never starts it)."""

from __future__ import annotations

import time
from collections.abc import Callable

from eventlog import EventStore, SkillogError, closing

from ._events import (
    CODEC,
    ApprovalResolved,
    Event,
    SessionEnded,
    ToolCompleted,
    ToolInterrupted,
)
from ._fleet import driver_name, leased
from ._model import ToolCall
from ._state import SessionState, apply


class CancelError(SkillogError):
    """The session cannot be cancelled (unknown or already ended). Nothing was
    written."""


async def _fold(store: EventStore, session_id: str) -> SessionState:
    state = SessionState(session_id)
    async with closing(store.read(session_id)) as events:
        async for event in events:
            apply(state, CODEC.decode(event), seq=event.seq, hash=event.hash)
    return state


def closing_events(state: SessionState, by: str, reason: str) -> list[Event]:
    """What ends ``state`` as cancelled by ``by``: an outcome for each open call, as its
    effect class allows (calls that never started last), then ``session.ended``. Pure
    (see the module docstring)."""
    why = f"cancelled by {by}" + (f": {reason}" if reason else "")
    bodies: list[Event] = []
    never_started: list[Event] = []
    progress = state.turn_progress

    def cancelled(call: ToolCall, content: str) -> ToolCompleted:
        return ToolCompleted(call_id=call.id, tool=call.name, is_error=True, content=content,
                             duration_ms=0, error_type="cancelled")  # fmt: skip

    for call in state.pending_calls:
        if call.id in state.pending_results:
            continue
        called = progress.called.get(call.id) if progress is not None else None
        if called is None:
            content = f"the session was {why} before this call started; it never ran and is not run"
            never_started.append(cancelled(call, content))
            continue
        if call.id in state.pending_approvals:
            bodies.append(
                ApprovalResolved(call_id=call.id, approved=False, decided_by=by, reason=why)
            )
        decided = progress.approvals.get(call.id) if progress is not None else None
        denied = call.id in state.pending_approvals or (
            decided is not None and not decided.approved
        )
        if called.effect == "at-most-once" and not denied:
            content = (
                f"the session was {why} while this call was under way; it may or may not "
                "have taken effect; it is not run again"
            )
            bodies.append(ToolInterrupted(call_id=call.id, tool=call.name, content=content))
        else:
            content = f"the session was {why}; this call did not finish and is not run again"
            bodies.append(cancelled(call, content))
    bodies += never_started
    # ``closes``: the log itself says where the cancel's transaction begins (verify
    # checks it; re-drive starts the cancel there), so no reader infers it from stamps.
    bodies.append(SessionEnded(reason="cancelled", turns=state.turn, error=why, closes=len(bodies)))
    return bodies


async def cancel_session(
    store: EventStore,
    session_id: str,
    *,
    by: str,
    reason: str = "",
    clock: Callable[[], int] = time.time_ns,
    wait: bool = False,
) -> SessionEnded:
    """End ``session_id`` as ``cancelled`` by ``by`` (see the module docstring) under
    its lease; returns the recorded ``session.ended``. Raises :class:`CancelError` when
    it cannot be cancelled and ``LeaseHeldError`` when another driver holds it (with
    ``wait``, waits for that driver to let go)."""
    state = await _fold(store, session_id)
    if state.config is None:
        raise CancelError(f"no session {session_id!r} in this log")
    if state.status == "ended":
        raise CancelError(f"session {session_id} has already ended; nothing to cancel")
    async with leased(store, session_id, driver_name("cancel"), clock=clock, wait=wait) as lease:
        try:
            ended = await record_cancel(store, session_id, by=by, reason=reason, clock=clock)
        except CancelError:
            lease.outcome = "already ended"
            raise
        lease.outcome = "ended"
    return ended


async def record_cancel(
    store: EventStore,
    session_id: str,
    *,
    by: str,
    reason: str = "",
    clock: Callable[[], int] = time.time_ns,
) -> SessionEnded:
    """Record the cancel of ``session_id`` as it stands now; the caller holds its
    lease (:func:`cancel_session`, or the worker that was driving it:
    ``Worker.stop``). :class:`CancelError` when it has ended meanwhile."""
    state = await _fold(store, session_id)  # as it stands now that no one else acts
    if state.status == "ended":
        raise CancelError(f"session {session_id} ended meanwhile; nothing to cancel")
    bodies = closing_events(state, by, reason)
    now = clock()
    await store.append(
        session_id, [CODEC.encode(b, recorded_at=now) for b in bodies], expected_seq=state.seq + 1
    )
    ended = bodies[-1]
    assert isinstance(ended, SessionEnded)
    return ended
