"""Re-drive: run the current runtime code against a recording and compare the events.

The re-driven session is a fresh stream (same id, in a private in-memory store) built
exactly as ``Agent.run`` builds one: the recorded ``session.started`` and catalog, the
recorded user messages, then ``drive()`` with a model that answers with the recorded
responses in order and effects that answer from the log. Its events must equal the
recorded ones, type by type and field by field (measured durations aside, see
``_compare.MEASURED``); the first that does not is a non-determinism finding.

A forked session's copied prefix (``session.forked`` and the events it copied) was
not produced by code, so it is copied as is and the session is reopened after it,
as ``Agent.resume`` would.

A recording that ended while it waited for the model (its last prompt unanswered: an
MCP client of ``skillog mcp serve`` that disconnected, a run cancelled mid-call, with
or without the ``model.interrupted`` a cancelled call records) is re-driven until the
recorded answers are used up, then ended as the recording was. A ``model.interrupted``
before the end is re-driven as it happened: the call is cancelled there and the session
reopened, as ``Agent.resume`` would.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import cast

import msgspec
import trio

from eventlog import Event as StoredEvent
from eventlog import EventStore, MemoryStore, NewEvent, SkillogError
from orchestrator import (
    CODEC,
    ApprovalRemembered,
    ApprovalResolved,
    CatalogSnapshot,
    Delta,
    ModelError,
    ModelFailed,
    ModelInterrupted,
    ModelRequest,
    ModelResponded,
    ModelResponse,
    PromptRendered,
    RetryPolicy,
    Session,
    SessionEnded,
    SessionForked,
    SessionStarted,
    SkillActivated,
    SummaryAnswered,
    TextPart,
    ToolCall,
    ToolCompleted,
    ToolInterrupted,
    UserMessage,
    drive,
)
from orchestrator import Event as Body
from orchestrator.adapters import RecordedModel
from orchestrator.runtime import MAX_RESPONSE_CHARS, ModelErrorKind

from ._compare import EventDivergence, compare_events
from ._effects import RecordedEffects
from ._errors import BrokenLogError
from ._recording import Recording, turn_at


class RedriveReport(msgspec.Struct, frozen=True, kw_only=True):
    """The result of :func:`redrive`: how many events were compared, and the first
    divergence (None when the current code reproduces the recording)."""

    session: str
    recorded_events: int
    redriven_events: int
    compared: int
    complete: bool
    divergence: EventDivergence | None

    @property
    def ok(self) -> bool:
        return self.divergence is None


class _Calls:
    """The recorded model as the recording met it: call ``i`` is answered with the
    next recorded outcome, or, where the recording holds a ``model.interrupted``, the
    text and calls that had arrived are streamed and the drive is cancelled there (the
    loop records the interruption; the re-drive resumes, as a process did). With
    ``ending`` (a recording that ends with its last prompt unanswered), once every
    recorded answer is used, the next call stops the loop (``stopped``) instead of
    asking for an answer the recording does not have."""

    def __init__(
        self, model: RecordedModel, interruptions: dict[int, ModelInterrupted], *, ending: bool
    ) -> None:
        self.model = model
        self.provider = model.provider
        self.interruptions = interruptions
        self.texts: dict[int, str] = {}
        self.ending = ending
        self.scope = trio.CancelScope()
        self.stopped = self.interrupted = False
        self.calls = len(interruptions) + model.remaining
        self._next = 0

    @property
    def done(self) -> bool:
        """Every recorded call was made."""
        return self._next >= self.calls

    async def complete(self, request: ModelRequest) -> ModelResponse:
        return await self.stream(request, _ignore)

    async def stream(
        self, request: ModelRequest, on_delta: Callable[[Delta], None]
    ) -> ModelResponse:
        index, self._next = self._next, self._next + 1
        interruption = self.interruptions.get(index)
        if interruption is not None:
            text = self.texts.get(index, "")
            if text:
                on_delta(Delta(kind="text", index=0, text=text))
            for at, name in enumerate(interruption.calls):
                on_delta(Delta(kind="tool_call", index=at + 1, call_id=f"c{at}", name=name))
            self.interrupted = True
            self.scope.cancel()
            await trio.sleep_forever()
        if self.ending and self.model.remaining == 0:
            self.stopped = True
            self.scope.cancel()
            await trio.sleep_forever()
        return await self.model.complete(request)


def _ignore(delta: Delta) -> None:
    return None


async def _drive(
    live: Session,
    calls: _Calls,
    policy: RetryPolicy,
    ending: SessionEnded | None,
    reopen: Callable[[], Awaitable[Session]],
) -> Session:
    """``drive`` as the recording did, reopened after each recorded interruption (as
    ``Agent.resume`` would); ``ending``: the recording's last event, when it ended the
    session with the last prompt unanswered. Returns the session last driven."""
    while True:
        calls.scope, calls.interrupted = trio.CancelScope(), False
        with calls.scope:
            await drive(live, calls, policy, on_delta=_ignore)
        if not calls.interrupted:
            break
        if ending is not None and calls.done:
            # The recording's last call was cancelled and the session ended there.
            calls.stopped = True
            break
        live = await reopen()
    if calls.stopped and ending is not None:
        await live.end(ending.reason, ending.error)
    return live


class _Cursor:
    """The seq the re-driven session appends next, and a clock that stamps each new
    event with the time the recording has at that seq (envelopes are not compared;
    this only keeps the re-driven times plausible)."""

    def __init__(self, recording: Recording) -> None:
        self.next = 0
        self._times = [e.recorded_at for e in recording.events]
        self.stop_at = _cancel_start(recording)
        self.cut = trio.CancelScope()

    def observe(self, event: StoredEvent) -> None:
        self.next = event.seq + 1
        if self.stop_at is not None and self.next >= self.stop_at:
            self.cut.cancel()  # the rest is a cancel's: no driver wrote it

    def clock(self) -> int:
        return self._times[min(self.next, len(self._times) - 1)]


async def redrive(store: EventStore, recording: Recording) -> RedriveReport:
    """Re-drive ``recording`` (blobs from ``store``) with the current code.

    Run :func:`replay_session` first: it proves the blobs this relies on. Raises
    :class:`BrokenLogError` when the recording does not start like a session."""
    session = recording.session
    bodies = recording.bodies
    target = MemoryStore()
    cursor = _Cursor(recording)
    effects = RecordedEffects(recording, store, lambda: cursor.next)
    start = _prefix_length(recording)
    called = [
        b
        for b in bodies[start:]
        if isinstance(b, ModelResponded | ModelFailed | SummaryAnswered | ModelInterrupted)
    ]
    model = RecordedModel([_outcome(b) for b in called if not isinstance(b, ModelInterrupted)])
    interrupted = {i: b for i, b in enumerate(called) if isinstance(b, ModelInterrupted)}
    calls = _Calls(model, interrupted, ending=_unanswered_ending(bodies) is not None)
    for i, b in interrupted.items():
        if b.text_digest:
            calls.texts[i] = (await store.get_blob(b.text_digest)).decode()

    async def reopen() -> Session:
        return await Session.open(
            target, session, effects, clock=cursor.clock, observers=[cursor.observe]
        )

    try:
        if start:
            await _copy(store, target, recording, 0, start)
            cursor.next = start
            live = await Session.open(
                target, session, effects, clock=cursor.clock, observers=[cursor.observe]
            )
        else:
            config, catalog = bodies[0], bodies[1] if len(bodies) > 1 else None
            if not isinstance(config, SessionStarted) or not isinstance(catalog, CatalogSnapshot):
                raise BrokenLogError(
                    session, 0, "does not start with session.started and catalog.snapshot"
                )
            live = await Session.create(
                target,
                config,
                catalog.skills,
                effects,
                hidden=catalog.hidden,
                session_id=session,
                clock=cursor.clock,
                observers=[cursor.observe],
            )
            start = 2
        for body in bodies[start:]:
            if isinstance(body, PromptRendered | SessionEnded):
                break
            if isinstance(body, UserMessage):
                await live.add_user_message(body.text)
        policy = _retry_policy(bodies[start:])
        ending = _unanswered_ending(bodies)
        with cursor.cut:
            await _drive_all(live, calls, policy, ending, reopen, recording, store, target, cursor)
        if cursor.stop_at is not None and cursor.next == cursor.stop_at:
            await _copy(store, target, recording, cursor.stop_at, len(recording))
    except BaseExceptionGroup as group:  # a nursery of run_tools wraps errors
        first = _first_error(group)
        if first is None:
            raise
        raise first from group
    produced = [(e, CODEC.decode(e)) async for e in target.read(session)]
    recorded = list(zip(recording.events, bodies, strict=True))
    complete = isinstance(bodies[-1], SessionEnded)
    divergence = compare_events(recorded, produced, turn_at(bodies), recording_complete=complete)
    return RedriveReport(
        session=session,
        recorded_events=len(recorded),
        redriven_events=len(produced),
        compared=min(len(recorded), len(produced)),
        complete=complete,
        divergence=divergence,
    )


async def _drive_all(
    live: Session,
    calls: _Calls,
    policy: RetryPolicy,
    ending: SessionEnded | None,
    reopen: Callable[[], Awaitable[Session]],
    recording: Recording,
    store: EventStore,
    target: EventStore,
    cursor: _Cursor,
) -> None:
    """Drive as the recording did, through its suspensions and the decisions recorded
    while it waited."""
    bodies = recording.bodies
    live = await _drive(live, calls, policy, ending, reopen)
    while live.state.status == "awaiting_approval":
        # The recording suspended here too; its next events are the decisions some
        # process recorded while the session waited. They are not the runtime's to
        # reproduce: copy them, then resume as Agent.resume would.
        end = cursor.next
        limit = len(bodies) if cursor.stop_at is None else cursor.stop_at  # not a cancel's
        while end < limit and isinstance(bodies[end], ApprovalResolved | ApprovalRemembered):
            end += 1
        if end == cursor.next:
            break
        await _copy(store, target, recording, cursor.next, end)
        cursor.next = end
        if end == cursor.stop_at:
            break  # the cancel came next: no driver resumed after these decisions
        live = await reopen()
        live = await _drive(live, calls, policy, ending, reopen)


def _cancel_start(recording: Recording) -> int | None:
    """Where a cancel's events begin (``orchestrator._cancel``: the outcomes it gave the
    open calls, the denials of pending approvals, then ``session.ended`` cancelled, all
    in one transaction) when the recording ends with one: no driver wrote them. None
    otherwise.

    The cancel's end says how many events before it are its own (``closes``, checked
    by verify). Only a session recorded before it (``session.started.cancel_rules`` 0)
    may end without it; for those the cancel's events are found as they were then
    (:func:`_cancel_start_unmarked`)."""
    bodies = recording.bodies
    last = bodies[-1]
    if not isinstance(last, SessionEnded) or last.reason != "cancelled":
        return None
    end = len(bodies) - 1
    if isinstance(last.closes, int):
        if not 0 <= last.closes <= end - 2:
            raise BrokenLogError(
                recording.session, end, f"closes {last.closes} counts events before the "
                "session's catalog; run skillog log verify",
            )  # fmt: skip
        return end - last.closes
    config = next(b for b in bodies if isinstance(b, SessionStarted))
    if config.cancel_rules >= 1:
        raise BrokenLogError(
            recording.session, end, "a cancel's session.ended without closes in a session "
            "whose rules record it; run skillog log verify",
        )  # fmt: skip
    return _cancel_start_unmarked(recording)


def _cancel_start_unmarked(recording: Recording) -> int | None:
    """The cancel's first event in a session recorded before ``closes``: the trailing
    events of the kinds a cancel writes, stamped like its end (the cancel stamped its
    transaction with one clock reading). A cancel that cut a model call is re-driven as
    an unanswered ending instead (:func:`_unanswered_ending`)."""
    bodies, events = recording.bodies, recording.events
    if _unanswered_ending(bodies) is not None:
        return None
    at, stamp = len(bodies) - 1, events[-1].recorded_at
    while (
        at > 1
        and events[at - 1].recorded_at == stamp
        and isinstance(bodies[at - 1], ToolCompleted | ToolInterrupted | ApprovalResolved)
    ):
        at -= 1
    return at


def _unanswered_ending(bodies: tuple[Body, ...]) -> SessionEnded | None:
    last = bodies[-1]
    if (
        len(bodies) > 1
        and isinstance(last, SessionEnded)
        and isinstance(bodies[-2], PromptRendered | ModelInterrupted)
    ):
        return last
    return None


def _prefix_length(recording: Recording) -> int:
    """0 for a session started by code; for a fork, the events it copied (+1)."""
    first = recording.bodies[0]
    if not isinstance(first, SessionForked):
        return 0
    end = first.at_seq + 2
    if end > len(recording):
        raise BrokenLogError(
            recording.session,
            0,
            f"session.forked says it copied events up to seq {first.at_seq} of "
            f"{first.from_session}, but the session has only {len(recording)} events",
        )
    return end


async def _copy(
    source: EventStore, target: EventStore, recording: Recording, start: int, end: int
) -> None:
    """Append the recorded events ``start..end`` as they are (with the skill files
    they name) to ``target``."""
    blobs: list[bytes] = []
    for body in recording.bodies[start:end]:
        if isinstance(body, SkillActivated):
            for digest in (body.body_digest, *(f.sha256 for f in body.files)):
                blobs.append(await source.get_blob(digest))
    events = [
        NewEvent(type=e.type, body=e.body, recorded_at=e.recorded_at)
        for e in recording.events[start:end]
    ]
    await target.append(recording.session, events, expected_seq=start, blobs=blobs)


def _outcome(body: ModelResponded | ModelFailed | SummaryAnswered) -> ModelResponse | ModelError:
    if isinstance(body, SummaryAnswered):
        # The summary the recording used (or the error it ended with: not retried).
        return body.response or ModelError(body.error)
    if isinstance(body, ModelResponded):
        return body.response
    if body.kind == "malformed":
        return malformed_response(body.message)
    return ModelError(
        body.message,
        kind=cast(ModelErrorKind, body.kind),
        retryable=body.will_retry,
        retry_after_ms=body.retry_after_ms,
    )


def malformed_response(problem: str) -> ModelResponse:
    """A response the loop rejects with ``problem``: the recording keeps the loop's
    verdict on a malformed answer, not the answer, so re-drive feeds one that earns
    the same verdict."""
    parts: tuple[TextPart | ToolCall, ...] = ()
    if "characters" in problem:
        parts = (TextPart(text="x" * (MAX_RESPONSE_CHARS + 1)),)
    elif "ids" in problem:
        parts = (ToolCall(id="", name="t", arguments="{}"),)
    elif "no name" in problem:
        parts = (ToolCall(id="t", name="", arguments="{}"),)
    return ModelResponse(parts=parts, stop_reason="other")


def _retry_policy(bodies: tuple[Body, ...]) -> RetryPolicy:
    """A retry policy that retries where the recording did, without waiting.

    Recorded failures carry ``will_retry``, which re-drive passes on as ``retryable``;
    the attempt bound only matters for malformed answers, where the loop gave up
    after ``attempt`` of them."""
    failures = [b for b in bodies if isinstance(b, ModelFailed)]
    gave_up = [b.attempt for b in failures if b.kind == "malformed" and not b.will_retry]
    bound = gave_up[0] if gave_up else max((b.attempt for b in failures), default=0) + 1
    return RetryPolicy(max_attempts=bound, base_ms=0, max_ms=0)


def _first_error(group: BaseExceptionGroup[BaseException]) -> SkillogError | None:
    for error in group.exceptions:
        if isinstance(error, SkillogError):
            return error
        if isinstance(error, BaseExceptionGroup):
            found = _first_error(error)
            if found is not None:
                return found
    return None
