"""The session grammar: the sequences of events the runtime can write, checked online.

A hash chain proves that nothing changed since it was written; it says nothing about
events forged by someone with write access who chains them correctly (a second
``session.started``, a ``tool.completed`` nobody called, anything after
``session.ended``). Those are sequences the runtime's state machine (``_session``,
``_pipeline``, ``_loop``, ``_fleet``) never produces; this module states that machine
as rules and checks every stream against it, one event at a time, in seq order.

Layering. The event log is generic and knows nothing of sessions; its ``verify``
accepts a ``grammar`` hook (:data:`eventlog.Grammar`): a factory called with each
stream id that returns an object fed the stream's rows, batch by batch, after the
chain check accepted them, in the worker thread that hashes them. This module is that
hook for skillog's streams (:func:`session_grammar`), so the one ``verify`` every
reader calls (``skillog log verify``, ``replay``, the service's verify endpoint and
console, the OpenTelemetry export) checks chain and grammar in one pass over the rows.

Properties that keep it cheap and honest:

* **Prefix-closed.** Every prefix of a stream the runtime writes is valid: a process
  may stop after any commit, and cutting a stream's tail is what checkpoints detect,
  not the grammar. So every violation is at one event (stream, seq, rule), found the
  moment that event is read; nothing is checked "at the end".
* **Bounded state.** A session's state is its phase, its turn and the tool calls of the
  last model response (and its last two rows per such call, which a cancel's
  ``closes`` may count); a lease stream's, its last holder. Memory does not grow with
  the length of the log.
* **Reads only what it needs.** Bodies are decoded into structs of the few fields a
  rule reads (``call_id``, ``turn``, ...), never the whole body.

Which streams: ``lease/<session>`` follows the lease grammar, ``skills-index`` holds
only ``catalog.indexed`` and ``skill.env_built``, ``skills-installed`` only
``skills.installed``, every other stream is a session. A stream whose first event
is not in the runtime's catalog at all was not written by skillog (another program
sharing the database): it is not checked, and no skillog reader shows it as a session.

The rules, with the identifiers a report names, are :data:`RULES` (documented in
docs/log-format.md).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any

import msgspec

from eventlog import split_type

from ._events import EVENT_TYPES
from ._streams import (
    FORMS_PREFIX,
    INDEX_STREAM,
    INSTALL_STREAM,
    LEASE_PREFIX,
    MAINTENANCE_STREAM,
    QUEUED,
    WEBHOOK_PREFIX,
)

RULES: dict[str, str] = {
    "unknown_type": "an event type the runtime does not write",
    "malformed_body": "a body without the fields its type always has",
    "wrong_stream": (
        "a lease, index, webhook or form answer event in a session, or a session event elsewhere"
    ),
    "not_started": "a session whose first event (after session.forked) is not session.started",
    "second_start": "session.started again",
    "fork_after_start": "session.forked after session.started",
    "catalog_misplaced": "catalog.snapshot not right after session.started, or again",
    "after_end": "an event after session.ended",
    "prompt_unanswered": "prompt.rendered while the previous prompt has no model.responded",
    "prompt_before_results": "prompt.rendered while tool calls of the last response are open",
    "response_without_prompt": (
        "model.responded, model.failed or model.interrupted with no prompt waiting"
    ),
    "turn_order": "a turn number that is not the next turn, or not the prompt's",
    "response_duplicate_ids": "a model response whose tool calls repeat or omit an id",
    "call_not_requested": "tool.called for an id the last model response did not ask for",
    "duplicate_call": "tool.called twice for one call of a response",
    "event_before_call": "an event naming a call before its tool.called",
    "after_outcome": "an event naming a call after its tool.completed or tool.interrupted",
    "approval_repeated": "approval.requested twice for one call",
    "approval_after_effect": "approval.requested after the call's effect or refusal began",
    "decision_without_request": "approval.resolved for a call with no pending request",
    "remember_without_approval": "approval.remembered not right after its call's approval",
    "effect_before_approval": "an event of a call (but its decision) while it awaits approval",
    "effect_after_denial": "anything but policy.denied and an error result after a denial",
    "suspend_without_pending": "session.suspended naming no call or one not awaiting approval",
    "compaction_misplaced": "context.compacted while a prompt awaits its answer or calls are open",
    "summary_misplaced": (
        "context.summary_requested while a prompt or a summary awaits its answer or calls are open"
    ),
    "summary_unanswered": "prompt.rendered or context.compacted while a summary awaits its answer",
    "answer_without_summary": "context.summary_answered with no summary call waiting for it",
    "cancel_not_ending": "after a call closed as cancelled before its tool.called, anything "
    "but other such calls and session.ended (cancelled)",
    "cancel_marker": "a cancel's session.ended whose closes does not count the events its "
    "transaction wrote before it (one of another kind or stamp, fewer than its calls closed "
    "as never started), closes on another end, or none where the session's rules want it",
    "end_with_open_calls": "session.ended while tool calls of the last response are open",
    "end_reason": "session.ended with a reason the session's state contradicts",
    "lease_start": "a lease stream that begins with neither lease.acquired nor the queued release",
    "lease_wrong_session": "lease.acquired naming another session than its stream's",
    "lease_not_held": "lease.renewed or lease.released not right after the same worker's hold",
    "lease_queued_late": "lease.released with outcome queued after the stream's first event",
    "webhook_wrong_delivery": "a webhook event naming another delivery than its stream's",
    "webhook_order": "webhook.sending not one past the last attempt's outcome, or webhook.sent "
    "not for the attempt just announced",
    "webhook_after_final": "a webhook attempt after a delivered or failed outcome",
    "form_wrong_session": "mcp.form_answered naming another session than its stream's",
}
"""Every rule, by the identifier a violation names, and what breaks it."""


class Violation(msgspec.Struct, frozen=True, kw_only=True):
    """An event the runtime could not have written there: ``rule`` is a key of
    :data:`RULES`, ``detail`` says what was found."""

    stream: str
    seq: int
    rule: str
    detail: str

    def __str__(self) -> str:
        return f"stream {self.stream!r} seq {self.seq}: {self.rule}: {self.detail}"


# -- the fields the rules read ----------------------------------------------------------


class _Call(msgspec.Struct):
    call_id: str


class _MaybeCall(msgspec.Struct):
    call_id: str | None = None


class _Turn(msgspec.Struct):
    turn: int


class _Called(msgspec.Struct):
    turn: int
    call_id: str


class _Completed(msgspec.Struct):
    call_id: str
    is_error: bool
    error_type: str | None = None


class _Resolved(msgspec.Struct):
    call_id: str
    approved: bool


class _Suspended(msgspec.Struct):
    call_ids: list[str]


class _Part(msgspec.Struct):
    type: str  # "text" or "tool_call" (not decoded as a tagged union: twice as fast)
    id: str = ""


class _Response(msgspec.Struct):
    parts: list[_Part]


class _Responded(msgspec.Struct):
    turn: int
    response: _Response


class _Failed(msgspec.Struct):
    turn: int
    kind: str


class _Ended(msgspec.Struct):
    reason: str
    closes: int | msgspec.UnsetType = msgspec.UNSET


class _Started(msgspec.Struct):
    cancel_rules: int = 0


class _Acquired(msgspec.Struct):
    session: str
    worker: str


class _Attempt(msgspec.Struct):
    delivery: str
    attempt: int


class _Sent(msgspec.Struct):
    delivery: str
    attempt: int
    outcome: str


class _FormAnswer(msgspec.Struct):
    session: str


class _Renewed(msgspec.Struct):
    worker: str


class _Released(msgspec.Struct):
    worker: str
    outcome: str


def _decoder(cls: type[Any]) -> Callable[[bytes], Any]:
    return msgspec.json.Decoder(cls).decode


_CALL, _MAYBE_CALL, _TURN = _decoder(_Call), _decoder(_MaybeCall), _decoder(_Turn)
_CALLED, _COMPLETED, _RESOLVED = _decoder(_Called), _decoder(_Completed), _decoder(_Resolved)
_SUSPENDED, _RESPONDED, _ENDED = _decoder(_Suspended), _decoder(_Responded), _decoder(_Ended)
_ACQUIRED, _RENEWED, _RELEASED = _decoder(_Acquired), _decoder(_Renewed), _decoder(_Released)
_FAILED, _STARTED = _decoder(_Failed), _decoder(_Started)
_ATTEMPT, _SENT = _decoder(_Attempt), _decoder(_Sent)
_FORM_ANSWER = _decoder(_FormAnswer)

KNOWN_TAGS = frozenset(t.event_type for t in EVENT_TYPES)
LEASE_TAGS = frozenset({"lease.acquired", "lease.renewed", "lease.released"})
INDEX_TAG = "catalog.indexed"
ARCHIVED_TAG = "log.archived"
INDEX_TAGS = frozenset({INDEX_TAG, "skill.env_built"})
INSTALL_TAG = "skills.installed"
WEBHOOK_TAGS = frozenset({"webhook.sending", "webhook.sent"})
FORM_TAG = "mcp.form_answered"

# A call's progress within its turn: asked for by the model, its intent recorded, its
# approval asked for, approved, denied, its effect (or refusal) under way, resolved.
REQUESTED, CALLED, AWAITING, APPROVED, DENIED, ACTING, DONE = range(7)
_MAY_ACT = frozenset({CALLED, APPROVED, ACTING})  # effects and an outcome may follow

# Call events that are neither its intent, its approval nor its outcome.
_CALL_EVENTS = frozenset(
    {
        "policy.denied",
        "mcp.result",
        "mcp.sampled",
        "mcp.sample_answered",
        "mcp.elicited",
        "mcp.elicitation_answered",
        "mcp.task_created",
        "resource.read",
        "tool.images",
        "script.started",
        "script.executed",
        "skill.activated",
        "skill.deactivated",
        "skill.activation_failed",
        "skill.changed",
        "skill.env_built",
    }
)
_OPTIONAL_CALL = frozenset(
    {"skill.activated", "skill.deactivated", "skill.activation_failed", "skill.changed"}
)

Row = Sequence[Any]  # (seq, type, recorded_at, body, ...) as eventlog's verify feeds them


class _Broken(Exception):
    """Raised inside a step: the event breaks ``rule``."""

    def __init__(self, rule: str, detail: str) -> None:
        super().__init__(rule, detail)
        self.rule, self.detail = rule, detail


def _tag(type_: str) -> str:
    return split_type(type_)[0] if "@" in type_ else type_


Step = Callable[[bytes], None]


class GrammarCheck:
    """The grammar of one stream, fed its events in seq order (pure, no I/O).

    :meth:`feed` is the hook eventlog's verify calls with row batches and returns the
    first violation; :meth:`check` takes one event. After a violation the state still
    advances, so a caller may keep checking.

    The hot path: ``fast`` maps the envelope types the stream's current phase expects
    to steps that take the body alone and never change the phase (a session's turns);
    anything else goes through :meth:`step`, which knows every rule of the phase and is
    the only place ``fast`` is replaced (a session's cancel narrows its dict in place)."""

    def __init__(self, stream: str) -> None:
        self.stream = stream
        self.fast: dict[str, Step] = {}
        self.unchecked = False  # a stream another program wrote: nothing to check

    def feed(self, rows: Iterable[Row]) -> Violation | None:
        if self.unchecked:
            return None
        fast = self.fast.get
        for row in rows:
            try:
                run = fast(row[1])
                if run is None:
                    self.step(row[0], _tag(row[1]), row[3])
                    fast = self.fast.get
                else:
                    run(row[3])
            except _Broken as e:
                return Violation(stream=self.stream, seq=row[0], rule=e.rule, detail=e.detail)
            except (msgspec.DecodeError, msgspec.ValidationError) as e:
                detail = f"{row[1]} body does not hold what the type always has: {e}"
                return Violation(
                    stream=self.stream, seq=row[0], rule="malformed_body", detail=detail
                )
        return None

    def check(self, seq: int, type_: str, body: bytes) -> Violation | None:
        return self.feed([(seq, type_, None, body)])

    def step(self, seq: int, tag: str, body: bytes) -> None:
        raise NotImplementedError


class SessionGrammar(GrammarCheck):
    """A session: ``session.forked``* ``session.started`` ``catalog.snapshot``, then
    turns (prompt, model outcome, tool calls through the pipeline), at most one
    ``session.ended`` and nothing after it."""

    HEADER, STARTED, RUNNING, CANCELLING, ENDED = range(5)

    def __init__(self, stream: str) -> None:
        super().__init__(stream)
        self.phase = self.HEADER
        self.turn = 0
        self.prompt_open = False
        self.summary_open = False  # context.summary_requested without its answer yet
        self.calls: dict[str, int] = {}  # the last response's calls -> their progress
        self.open_calls = 0  # calls of the last response without an outcome
        self.cancel_rules = 0  # session.started's: whether a cancel's end says its closes
        self.never_started = 0  # calls a cancel closed as never started (CANCELLING)
        # The rows a cancel's ``closes`` may count: the last of earlier batches (a cancel
        # writes at most two per call of the last response) and the batch being fed.
        self.tail: list[Row] = []
        self.batch: Sequence[Row] = ()
        self.running: dict[str, Step] = {  # the steps of a started session
            "message.user": _nothing,
            "mcp.tools_listed": _nothing,  # what a server offers: before the next prompt
            "mcp.server_failed": _nothing,  # a server lost, between turns or mid-call
            "mcp.roots_changed": _nothing,  # what a server is told: before the next prompt
            "prompt.rendered": self._prompt,
            "model.responded": self._responded,
            "model.failed": self._failed,
            "model.interrupted": self._interrupted_call,
            "tool.called": self._called,
            "tool.completed": self._completed,
            "tool.interrupted": self._interrupted,
            "approval.requested": self._requested,
            "approval.resolved": self._resolved,
            "approval.remembered": self._remembered,
            "session.suspended": self._suspended,
            "context.compacted": self._compacted,
            "context.summary_requested": self._summary_requested,
            "context.summary_answered": self._summary_answered,
        }
        for tag in _CALL_EVENTS:
            self.running[tag] = self._call_event_of(tag)

    def feed(self, rows: Iterable[Row]) -> Violation | None:
        self.batch = batch = rows if isinstance(rows, Sequence) else list(rows)
        found = super().feed(batch)
        keep = 2 * len(self.calls) if self.phase != self.ENDED else 0
        self.tail = [*self.tail, *batch[-keep:]][-keep:] if keep else []
        return found

    def step(self, seq: int, tag: str, body: bytes) -> None:
        phase = self.phase
        if phase == self.RUNNING:
            if tag in self.running:  # a versioned type (tag@N)
                self.running[tag](body)
                return
            if tag == "session.ended":
                self._ended(seq, body)
                return
        if phase == self.CANCELLING:
            self._cancelling(seq, tag, body)
            return
        if self.unchecked:
            return
        if tag not in KNOWN_TAGS:
            if seq == 0:
                self.unchecked = True
                return
            raise _Broken("unknown_type", f"type {tag!r} is not an event the runtime writes")
        if tag in LEASE_TAGS or tag in (INDEX_TAG, INSTALL_TAG, FORM_TAG) or tag in WEBHOOK_TAGS:
            raise _Broken(
                "wrong_stream", f"{tag} belongs in a lease, index, install, webhook or form stream"
            )
        if phase == self.ENDED:
            raise _Broken("after_end", f"{tag} after session.ended")
        if tag == "session.started":
            if phase != self.HEADER:
                raise _Broken("second_start", "the session has already started")
            self.phase = self.STARTED
            self.cancel_rules = _STARTED(body).cancel_rules
        elif tag == "session.forked":
            if phase != self.HEADER:
                raise _Broken("fork_after_start", "session.forked comes before session.started")
        elif phase == self.HEADER:
            raise _Broken("not_started", f"{tag} before session.started")
        elif phase == self.STARTED:
            if tag != "catalog.snapshot":
                raise _Broken("catalog_misplaced", f"{tag} where catalog.snapshot belongs")
            self.phase, self.fast = self.RUNNING, self.running
        elif tag == "catalog.snapshot":
            raise _Broken("catalog_misplaced", "a second catalog.snapshot")
        else:  # pragma: no cover - every known session tag has a step
            raise AssertionError(tag)

    # -- turns --------------------------------------------------------------------------

    def _prompt(self, body: bytes) -> None:
        turn = _TURN(body).turn
        if self.summary_open:
            raise _Broken("summary_unanswered", "the summary call has no answer yet")
        if self.prompt_open:
            raise _Broken("prompt_unanswered", f"turn {self.turn}'s prompt has no answer yet")
        if self.open_calls:
            raise _Broken("prompt_before_results", self._open_detail())
        if turn != self.turn + 1:
            raise _Broken("turn_order", f"prompt for turn {turn} after turn {self.turn}")
        self.turn, self.prompt_open = turn, True

    def _outcome_turn(self, tag: str, turn: int) -> None:
        if not self.prompt_open:
            raise _Broken("response_without_prompt", f"{tag} with no prompt waiting for it")
        if turn != self.turn:
            raise _Broken("turn_order", f"{tag} for turn {turn}, the prompt is turn {self.turn}")

    def _failed(self, body: bytes) -> None:
        failed = _FAILED(body)
        self._outcome_turn("model.failed", failed.turn)
        if failed.kind == "context_overflow":
            # The request did not fit: closed, and the same turn is rendered again.
            self.turn, self.prompt_open = failed.turn - 1, False

    def _interrupted_call(self, body: bytes) -> None:
        # The call was cancelled: the prompt stays open, the request is sent again.
        self._outcome_turn("model.interrupted", _TURN(body).turn)

    def _compacted(self, body: bytes) -> None:
        if self.summary_open:
            raise _Broken("summary_unanswered", "the summary call has no answer yet")
        if self.prompt_open:
            raise _Broken("compaction_misplaced", f"turn {self.turn}'s prompt awaits an answer")
        if self.open_calls:
            raise _Broken("compaction_misplaced", self._open_detail())

    def _summary_requested(self, body: bytes) -> None:
        if self.summary_open:
            raise _Broken("summary_misplaced", "the previous summary call has no answer yet")
        if self.prompt_open:
            raise _Broken("summary_misplaced", f"turn {self.turn}'s prompt awaits an answer")
        if self.open_calls:
            raise _Broken("summary_misplaced", self._open_detail())
        self.summary_open = True

    def _summary_answered(self, body: bytes) -> None:
        if not self.summary_open:
            raise _Broken("answer_without_summary", "no summary call waits for an answer")
        self.summary_open = False

    def _responded(self, body: bytes) -> None:
        responded = _RESPONDED(body)
        self._outcome_turn("model.responded", responded.turn)
        ids = []
        for part in responded.response.parts:
            if part.type == "tool_call":
                ids.append(part.id)
            elif part.type != "text":
                raise _Broken("malformed_body", f"a response part of type {part.type!r}")
        calls = dict.fromkeys(ids, REQUESTED)
        if len(calls) != len(ids) or "" in calls:
            raise _Broken("response_duplicate_ids", f"tool call ids {ids}")
        self.prompt_open = False
        self.calls, self.open_calls = calls, len(calls)

    # -- tool calls ---------------------------------------------------------------------

    def _progress(self, tag: str, call_id: str) -> int:
        """The progress of the call an event names; breaks when it cannot have one."""
        state = self.calls.get(call_id)
        if state is None or state == REQUESTED:
            raise _Broken("event_before_call", f"{tag} for call {call_id!r}, never called")
        if state == DONE:
            raise _Broken("after_outcome", f"{tag} for call {call_id!r}, already resolved")
        return state

    def _called(self, body: bytes) -> None:
        called = _CALLED(body)
        state = self.calls.get(called.call_id)
        if state is None:
            raise _Broken(
                "call_not_requested",
                f"call {called.call_id!r} is not one of the last response's {list(self.calls)}",
            )
        if state != REQUESTED:
            raise _Broken("duplicate_call", f"call {called.call_id!r} was already called")
        if called.turn != self.turn:
            raise _Broken("turn_order", f"tool.called for turn {called.turn} in turn {self.turn}")
        self.calls[called.call_id] = CALLED

    def _call_event_of(self, tag: str) -> Step:
        decode = _MAYBE_CALL if tag in _OPTIONAL_CALL else _CALL
        denial = tag == "policy.denied"

        def call_event(body: bytes) -> None:
            call_id = decode(body).call_id
            if not call_id:
                return  # an activation the user asked for (/skill: None or ""), no call's
            if self.calls.get(call_id) in _MAY_ACT:
                self.calls[call_id] = ACTING
            else:
                self._not_acting(tag, call_id, denial=denial)

        return call_event

    def _not_acting(self, tag: str, call_id: str, *, denial: bool) -> None:
        """An event of a call that may not act now: allowed only as the denial (or the
        error result) of a denied call."""
        state = self._progress(tag, call_id)
        if state == AWAITING:
            raise _Broken("effect_before_approval", f"{tag} for call {call_id!r}")
        if state == DENIED and not denial:
            raise _Broken("effect_after_denial", f"{tag} for call {call_id!r}")

    def _resolve(self, tag: str, call_id: str, *, error: bool) -> None:
        if self.calls.get(call_id) not in _MAY_ACT:
            self._not_acting(tag, call_id, denial=error)
        self.calls[call_id] = DONE
        self.open_calls -= 1

    def _completed(self, body: bytes) -> None:
        completed = _COMPLETED(body)
        if self._never_started(completed):
            # A cancel closed a call the model asked for before its intent: it never
            # ran (orchestrator._cancel). Only the cancel's other such results and its
            # session.ended may follow.
            self.calls[completed.call_id] = DONE
            self.open_calls -= 1
            self.never_started = 1
            # In place: ``feed`` holds this dict's lookup for the rest of its batch.
            self.running.clear()
            self.running["tool.completed"] = self._cancelled_completed
            self.phase = self.CANCELLING
            return
        self._resolve("tool.completed", completed.call_id, error=completed.is_error)

    def _never_started(self, completed: _Completed) -> bool:
        return (
            completed.is_error
            and completed.error_type == "cancelled"
            and self.calls.get(completed.call_id) == REQUESTED
        )

    def _cancelled_completed(self, body: bytes) -> None:
        completed = _COMPLETED(body)
        if not self._never_started(completed):
            raise _Broken("cancel_not_ending", f"an outcome of call {completed.call_id!r}")
        self.calls[completed.call_id] = DONE
        self.open_calls -= 1
        self.never_started += 1

    def _cancelling(self, seq: int, tag: str, body: bytes) -> None:
        if tag == "tool.completed":
            self._cancelled_completed(body)
            return
        if tag == "session.ended" and _ENDED(body).reason == "cancelled":
            self._ended(seq, body)
            return
        raise _Broken("cancel_not_ending", f"{tag} after a call was closed as never started")

    def _interrupted(self, body: bytes) -> None:
        self._resolve("tool.interrupted", _CALL(body).call_id, error=False)

    def _requested(self, body: bytes) -> None:
        call_id = _CALL(body).call_id
        state = self._progress("approval.requested", call_id)
        if state == ACTING:
            raise _Broken("approval_after_effect", f"call {call_id!r} already began")
        if state != CALLED:
            raise _Broken("approval_repeated", f"call {call_id!r} already asked for approval")
        self.calls[call_id] = AWAITING

    def _resolved(self, body: bytes) -> None:
        resolved = _RESOLVED(body)
        call_id = resolved.call_id
        if self._progress("approval.resolved", call_id) != AWAITING:
            raise _Broken("decision_without_request", f"call {call_id!r} awaits no decision")
        self.calls[call_id] = APPROVED if resolved.approved else DENIED

    def _remembered(self, body: bytes) -> None:
        call_id = _CALL(body).call_id
        if self.calls.get(call_id) != APPROVED:  # committed with the approving decision
            raise _Broken("remember_without_approval", f"call {call_id!r} was not just approved")

    def _suspended(self, body: bytes) -> None:
        ids = _SUSPENDED(body).call_ids
        waiting = [i for i in ids if self.calls.get(i) == AWAITING]
        if not ids or len(waiting) != len(ids):
            raise _Broken(
                "suspend_without_pending", f"suspended for {ids}, awaiting approval: {waiting}"
            )

    def _ended(self, seq: int, body: bytes) -> None:
        ended = _ENDED(body)
        reason = ended.reason
        if self.open_calls:
            raise _Broken("end_with_open_calls", self._open_detail())
        # The loop (``_loop.drive``) ends a session for a reason its state shows: a
        # failed model call leaves the prompt unanswered, the others follow an answer.
        if reason == "error" and not self.prompt_open:
            raise _Broken("end_reason", "ended with error, but no model call was failing")
        if (
            reason in ("completed", "max_turns", "budget_exceeded", "context_exhausted")
            and self.prompt_open
        ):
            raise _Broken("end_reason", f"ended {reason} while turn {self.turn} awaits an answer")
        if reason == "completed" and (self.turn == 0 or self.calls):
            raise _Broken("end_reason", "ended completed, but the last answer asked for tools")
        if reason == "cancelled":
            self._check_closes(seq, ended.closes)
        elif ended.closes is not msgspec.UNSET:
            raise _Broken("cancel_marker", f"closes on an end ({reason}) no cancel wrote")
        self.phase, self.fast = self.ENDED, {}

    def _check_closes(self, seq: int, closes: int | msgspec.UnsetType) -> None:
        """A cancel's end (``orchestrator._cancel``) says how many events before it its
        transaction wrote: each is one a cancel writes, stamped with the end's clock
        reading (the store keeps no transaction ids; a stamp proves only a difference),
        and they include every call the cancel closed as never started."""
        if closes is msgspec.UNSET:
            if self.cancel_rules >= 1:
                raise _Broken(
                    "cancel_marker",
                    "no closes (the events the cancel wrote before it), which a session "
                    f"with cancel_rules {self.cancel_rules} records",
                )
            return  # recorded before the marker (docs/replay.md: found as then)
        most = 2 * len(self.calls)  # a denial and an outcome per call of the last response
        if not self.never_started <= closes <= most:
            raise _Broken(
                "cancel_marker",
                f"closes {closes}: the cancel wrote at least the {self.never_started} closes "
                f"of calls that never started and at most {most} events",
            )
        batch = self.batch
        at = seq - batch[0][0]
        rows = [*self.tail, *batch[:at]][-closes:] if closes else []
        stamp = batch[at][2]
        for row in reversed(rows):  # the nearest first: the last response is among them
            problem = _not_a_cancels(row, stamp)
            if problem is not None:
                raise _Broken(
                    "cancel_marker", f"closes {closes} counts seq {row[0]} ({row[1]}), {problem}"
                )
        if len(rows) < closes:  # pragma: no cover - the tail holds `most` rows since it
            raise _Broken("cancel_marker", f"closes {closes} counts events not seen")

    def _open_detail(self) -> str:
        names = ("not called", "called", "awaiting approval", "approved", "denied", "under way")
        open_ = [f"{c} ({names[s]})" for c, s in self.calls.items() if s != DONE]
        return f"calls without an outcome: {', '.join(open_)}"


def _nothing(body: bytes) -> None:
    return None


def _not_a_cancels(row: Row, stamp: int | None) -> str | None:
    """Why ``row`` is not an event of the cancel whose end is stamped ``stamp`` (None
    when it may be): a cancel writes denials, error results ``cancelled`` and
    ``tool.interrupted``, all stamped with one clock reading."""
    tag = _tag(row[1])
    if tag == "tool.completed":
        completed = _COMPLETED(row[3])
        ours = completed.is_error and completed.error_type == "cancelled"
    elif tag == "approval.resolved":
        ours = not _RESOLVED(row[3]).approved
    else:
        ours = tag == "tool.interrupted"
    if not ours:
        return "which a cancel does not write"
    if stamp is not None and row[2] is not None and row[2] != stamp:
        return f"stamped {row[2]}, the end {stamp}: a cancel stamps its events alike"
    return None


class LeaseGrammar(GrammarCheck):
    """``lease/<session>``: the queued release or an acquire first; a renewal or release
    only right after the same worker's acquire or renewal (``orchestrator._fleet``)."""

    def __init__(self, stream: str) -> None:
        super().__init__(stream)
        self.session = stream[len(LEASE_PREFIX) :]
        self.holder: str | None = None  # the worker of the last acquire or renewal

    def step(self, seq: int, tag: str, body: bytes) -> None:
        if tag not in LEASE_TAGS:
            raise _Broken("wrong_stream", f"{tag} in a lease stream")
        if tag == "lease.acquired":
            acquired = _ACQUIRED(body)
            if acquired.session != self.session:
                raise _Broken(
                    "lease_wrong_session", f"acquires {acquired.session!r} in {self.stream!r}"
                )
            self.holder = acquired.worker
            return
        if tag == "lease.renewed":
            worker, outcome = _RENEWED(body).worker, None
        else:
            released = _RELEASED(body)
            worker, outcome = released.worker, released.outcome
        if seq == 0:
            if outcome != QUEUED:
                raise _Broken("lease_start", f"{tag} ({outcome}) before any lease.acquired")
            return
        if outcome == QUEUED:
            raise _Broken("lease_queued_late", "outcome queued after the stream's first event")
        if worker != self.holder:
            raise _Broken(
                "lease_not_held", f"{tag} by {worker!r}; the last holder is {self.holder!r}"
            )
        self.holder = worker if tag == "lease.renewed" else None


class IndexGrammar(GrammarCheck):
    """``skills-index``: indexing runs and environments built by ``skills deps``."""

    def step(self, seq: int, tag: str, body: bytes) -> None:
        if tag not in INDEX_TAGS:
            raise _Broken("wrong_stream", f"{tag} in the skills index stream")


class MaintenanceGrammar(GrammarCheck):
    """``log/maintenance``: the log's own records (``log.archived``) only."""

    def step(self, seq: int, tag: str, body: bytes) -> None:
        if tag != ARCHIVED_TAG:
            raise _Broken("wrong_stream", f"{tag} in the log's maintenance stream")


class InstallGrammar(GrammarCheck):
    """``skills-installed``: installs, updates and removes only."""

    def step(self, seq: int, tag: str, body: bytes) -> None:
        if tag != INSTALL_TAG:
            raise _Broken("wrong_stream", f"{tag} in the skills install stream")


class WebhookGrammar(GrammarCheck):
    """``webhook/<delivery>``: attempts numbered from 1, each ``webhook.sending`` (written
    ahead) then its ``webhook.sent``, nothing after a ``delivered`` or ``failed`` one
    (the service's ``_notify``). A server that stopped between the two leaves the last
    attempt open: a prefix, valid as every prefix is."""

    def __init__(self, stream: str) -> None:
        super().__init__(stream)
        self.delivery = stream[len(WEBHOOK_PREFIX) :]
        self.attempt, self.open, self.final = 0, False, False

    def step(self, seq: int, tag: str, body: bytes) -> None:
        if tag not in WEBHOOK_TAGS:
            raise _Broken("wrong_stream", f"{tag} in a webhook stream")
        sent = _SENT(body) if tag == "webhook.sent" else None
        attempt = sent or _ATTEMPT(body)
        if attempt.delivery != self.delivery:
            raise _Broken(
                "webhook_wrong_delivery", f"delivery {attempt.delivery!r} in {self.stream!r}"
            )
        if self.final:
            raise _Broken(
                "webhook_after_final", f"{tag} (attempt {attempt.attempt}) after the last"
            )
        if sent is None:
            if self.open or attempt.attempt != self.attempt + 1:
                raise _Broken("webhook_order", f"attempt {attempt.attempt} after {self.attempt}")
            self.attempt, self.open = attempt.attempt, True
            return
        if not self.open or sent.attempt != self.attempt:
            raise _Broken("webhook_order", f"outcome of attempt {sent.attempt}, not announced")
        self.open, self.final = False, sent.outcome != "retrying"


class FormsGrammar(GrammarCheck):
    """``forms/<session>``: humans' answers to the session's MCP forms only
    (``mcp.form_answered``, naming that session)."""

    def __init__(self, stream: str) -> None:
        super().__init__(stream)
        self.session = stream[len(FORMS_PREFIX) :]

    def step(self, seq: int, tag: str, body: bytes) -> None:
        if tag != FORM_TAG:
            raise _Broken("wrong_stream", f"{tag} in a form answers stream")
        named = _FORM_ANSWER(body).session
        if named != self.session:
            raise _Broken("form_wrong_session", f"answers {named!r} in {self.stream!r}")


def session_grammar(stream: str) -> GrammarCheck:
    """The grammar of ``stream`` by its id: the hook :func:`eventlog.verify` takes."""
    if stream.startswith(LEASE_PREFIX):
        return LeaseGrammar(stream)
    if stream.startswith(FORMS_PREFIX):
        return FormsGrammar(stream)
    if stream.startswith(WEBHOOK_PREFIX):
        return WebhookGrammar(stream)
    if stream == INDEX_STREAM:
        return IndexGrammar(stream)
    if stream == MAINTENANCE_STREAM:
        return MaintenanceGrammar(stream)
    if stream == INSTALL_STREAM:
        return InstallGrammar(stream)
    return SessionGrammar(stream)


def check_stream(stream: str, events: Iterable[tuple[int, str, bytes]]) -> Iterator[Violation]:
    """Every violation in ``events`` (``(seq, type, body)`` in seq order) of ``stream``."""
    grammar = session_grammar(stream)
    for seq, type_, body in events:
        found = grammar.check(seq, type_, body)
        if found is not None:
            yield found
