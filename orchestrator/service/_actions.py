"""Acting on sessions: cancel, resume, fork, and deciding many approvals at once. Each
handler is thin over the library function the CLI uses (``_cancel``, the fleet's
queue, ``replay.fork_session``, ``decide_approval``) and records what it did as
events; nothing is kept here."""

from __future__ import annotations

import contextlib
import time
import uuid
from collections.abc import Awaitable, Callable, Sequence
from typing import TYPE_CHECKING

import msgspec
import trio
from starlette.requests import Request
from starlette.responses import Response

from eventlog import ConcurrencyError, EventStore, closing

from .._approvals import ApprovalError, decide_approval
from .._cancel import CancelError, cancel_session, record_cancel
from .._catalog import catalog_current
from .._events import (
    CODEC,
    LeaseReleased,
    ModelFailed,
    PromptRendered,
    SessionEnded,
    SessionForked,
)
from .._fleet import LeaseHeldError, Worker, holder, session_config
from .._session import SessionNotFoundError
from .._session_list import status_text
from .._streams import QUEUED, lease_stream
from ._errors import ApiError
from ._routes import body, context, fold, json, require, session_id
from ._schemas import (
    BulkDecisionOut,
    BulkDecisionRequest,
    BulkOutcome,
    Cancelled,
    CancelRequest,
    DecisionOut,
    Forked,
    ForkRequest,
    Resumed,
)

if TYPE_CHECKING:
    from replay import Recording

STOP_WAIT_S = 10.0
"""How long a cancel waits for this server's own worker to let go of the session."""


def _workers(request: Request) -> Sequence[Worker]:
    workers: Sequence[Worker] = getattr(request.app.state, "workers", ())
    return workers


def _ours(request: Request, driver: str) -> bool:
    """Whether ``driver`` (a lease holder) is one of this server's workers."""
    return any(w.name == driver for w in _workers(request))


async def _stop_local_driver(
    request: Request, sid: str, finish: Callable[[], Awaitable[object]]
) -> bool:
    """Have this server's worker driving ``sid`` cut its turn and run ``finish`` under
    its lease before handing it back (``Worker.stop``); False when none drives it."""
    for worker in _workers(request):
        if await worker.stop(sid, finish):
            return True
    return False


async def cancel(request: Request) -> Response:
    """Cancel the session: recorded as ``session.ended`` (``cancelled``) after each open
    call is resolved by its effect class (``orchestrator._cancel``). A session this
    server's worker drives is cut mid-turn and the cancel recorded under that worker's
    lease (so it cannot claim the session back in between); one another process drives
    is 409."""
    who = require(request, "submitter")
    sid = session_id(request)
    req = await body(request, CancelRequest)
    store = context(request).store
    ended: list[SessionEnded] = []

    async def finish() -> None:
        ended.append(await record_cancel(store, sid, by=who.name, reason=req.reason))

    with trio.move_on_after(STOP_WAIT_S):
        while True:
            try:
                if not await _stop_local_driver(request, sid, finish):
                    ended.append(await cancel_session(store, sid, by=who.name, reason=req.reason))
            except CancelError as e:
                if await session_config(store, sid) is None:
                    raise SessionNotFoundError(str(e)) from e
                raise ApiError(409, str(e)) from e
            except LeaseHeldError as e:
                if not _ours(request, e.holder):
                    raise ApiError(409, f"{e}, then cancel again") from e
                await trio.sleep(0.05)  # ours, between a claim and its start: stop it
                continue
            return json(
                Cancelled(session_id=sid, reason=ended[0].error or "", cancelled_by=who.name)
            )
    raise ApiError(503, f"the worker driving {sid} did not let go within {STOP_WAIT_S:g} s")


async def _queued(store: EventStore, sid: str) -> bool:
    async with closing(store.read(lease_stream(sid), to_seq=1)) as events:
        async for event in events:
            first = CODEC.decode(event)
            return isinstance(first, LeaseReleased) and first.outcome == QUEUED
    return False


async def resume(request: Request) -> Response:
    """Hand a suspended (approvals decided) session back to the workers (202; also
    when this server's worker has taken it up already: it is going on). A session
    that ended on a model error goes on in a new session forked right before the
    failing turn's prompt (``continued_in``): its own log stays ended, as nothing may
    follow ``session.ended``. 409 when it ended otherwise (fork it), still awaits a
    decision, is driven by another process, or was never queued for the fleet (its
    own program drives it: ``skillog resume``)."""
    who = require(request, "submitter")
    sid = session_id(request)
    store = context(request).store
    state = await fold(request, sid)
    if state.status == "ended":
        if state.ended is None or state.ended.reason != "error":
            raise ApiError(409, f"session {sid} has ended; fork it from an event to go on")
        new_id, created = await _continue(store, sid, who.name)
        return json(Resumed(session_id=sid, status=status_text(state), queued=True,
                            continued_in=new_id), 202 if created else 200)  # fmt: skip
    if state.status == "awaiting_approval":
        raise ApiError(409, f"session {sid} awaits {len(state.pending_approvals)} decision(s)")
    if not await _queued(store, sid):
        raise ApiError(
            409,
            f"session {sid} is driven by the program that started it, not by this "
            f"service's workers; continue it there (skillog resume {sid})",
        )
    held = await holder(store, sid, time.time_ns())
    if held is not None and not _ours(request, held[0]):
        raise ApiError(409, f"session {sid} is being driven by {held[0]}")
    return json(Resumed(session_id=sid, status=status_text(state), queued=True), 202)


_CONTINUATIONS = uuid.UUID("8d7b1f0e-4a52-5c3e-9f61-2b0c7e9a4d13")


def continuation_id(sid: str) -> str:
    """The id of the one session a failed ``sid`` goes on in: derived, never random,
    so a second resume (or two at once) finds the first one's instead of making
    another."""
    return uuid.uuid5(_CONTINUATIONS, sid).hex


async def _continue(store: EventStore, sid: str, submitter: str) -> tuple[str, bool]:
    """The session ``sid`` (ended on a model error) goes on in, and whether this call
    created it. Decided from the log: the session at :func:`continuation_id` whose
    ``session.forked`` names ``sid`` is that continuation; a request that loses the
    race to create it (the fork's append finds its log begun) answers with the
    winner's."""
    new_id = continuation_id(sid)
    if await _parent_of(store, new_id) == sid:
        return new_id, False
    try:
        await _fork_queued(store, sid, submitter, _before_failure, new_id)
        created = True
    except ConcurrencyError:
        created = False
    parent = await _parent_of(store, new_id)
    if parent != sid:  # pragma: no cover - only a forged or colliding stream
        raise ApiError(409, f"session {new_id} should continue {sid}, its log says {parent!r}")
    return new_id, created


async def _parent_of(store: EventStore, sid: str) -> str | None:
    """The session ``sid`` was forked from, as its first event records (None if none)."""
    async with closing(store.read(sid, to_seq=1)) as events:
        async for event in events:
            first = CODEC.decode(event)
            return first.from_session if isinstance(first, SessionForked) else None
    return None


def _before_failure(recording: Recording) -> int:
    """The seq right before the failing turn's prompt (and the failed attempts and
    the end after it): the worker renders that prompt again and asks the model."""
    at = len(recording) - 1
    tail = (ModelFailed.event_type, SessionEnded.event_type)
    while at > 0 and recording.events[at].type in tail:
        at -= 1
    if at > 0 and recording.events[at].type == PromptRendered.event_type:
        at -= 1
    return at


async def _fork_queued(
    store: EventStore, sid: str, submitter: str, at: Callable[[Recording], int], new_id: str
) -> None:
    """A new session ``new_id`` from ``sid``'s events 0..``at(recording)``, queued for
    the workers (under ``submitter``, with the parent's policy). A queue entry already
    there (another request's, or one that stopped before forking) is kept; a log
    already begun raises ``ConcurrencyError``."""
    from replay import BrokenLogError, fork_session, load_recording, verify_recording

    try:
        await verify_recording(store, sid)
        recording = await load_recording(store, sid)
        at_seq = at(recording)
        queued = LeaseReleased(worker="fork", outcome=QUEUED, submitter=submitter,
                               policy=await _policy_of(store, sid))  # fmt: skip
        with contextlib.suppress(ConcurrencyError):  # queued by another request already
            await store.append(
                lease_stream(new_id),
                [CODEC.encode(queued, recorded_at=time.time_ns())],
                expected_seq=0,
            )
        await fork_session(store, recording, at_seq, session_id=new_id)
    except BrokenLogError as e:
        raise ApiError(409, str(e)) from e


async def fork(request: Request) -> Response:
    """A new session from the session's events 0..``at_seq`` (``skillog replay --fork-at``
    does the same), queued for the workers, who continue it."""
    who = require(request, "submitter")
    sid = session_id(request)
    req = await body(request, ForkRequest)
    store = context(request).store
    if await session_config(store, sid) is None:
        raise SessionNotFoundError(f"no session {sid!r} in this log")

    def at(recording: Recording) -> int:
        if req.at_seq >= len(recording):
            raise ApiError(
                422, f"at_seq must be 0..{len(recording) - 1} (the session's seqs)", "$.at_seq"
            )
        return req.at_seq

    new_id = uuid.uuid4().hex
    await _fork_queued(store, sid, who.name, at, new_id)
    return json(Forked(session_id=new_id, forked_from=sid, at_seq=req.at_seq), 201)


async def _policy_of(store: EventStore, sid: str) -> str:
    """The parent's policy preset, as its queueing recorded it ("" if none)."""
    if await catalog_current(store):
        row = await store.catalog_row(sid)  # type: ignore[attr-defined]
        if row is not None:
            doc = msgspec.json.decode(row.doc)
            return str(doc.get("policy", ""))
    return ""


async def decide_many(request: Request) -> Response:
    """One decision for many pending requests; each is recorded (or refused) on its own,
    as one ``POST .../approve`` would be: a refusal of one leaves the others decided."""
    principal = require(request, "approver")
    req = await body(request, BulkDecisionRequest)
    store = context(request).store
    outcomes: list[BulkOutcome] = []
    for item in req.requests:
        try:
            decision = await decide_approval(
                store, item.session, item.call, approved=req.approve,
                decided_by=principal.name, reason=req.reason,
            )  # fmt: skip
        except ApprovalError as e:
            outcomes.append(BulkOutcome(session_id=item.session, call_id=item.call, error=str(e)))
            continue
        out = DecisionOut(
            session_id=item.session,
            call_id=item.call,
            approved=decision.approved,
            decided_by=decision.decided_by,
            reason=decision.reason,
        )
        outcomes.append(BulkOutcome(session_id=item.session, call_id=item.call, decision=out))
    decided = sum(o.decision is not None for o in outcomes)
    return json(BulkDecisionOut(decided=decided, outcomes=outcomes))
