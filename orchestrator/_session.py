"""A session: one event stream, its folded state, and the steps that extend it.

Every step appends events (durably, optimistically at the next seq) and only then
folds them into the state and tells the observers, so the state never runs ahead of
the log. A session opened from an existing stream refolds its events and continues
exactly where it stopped.
"""

from __future__ import annotations

import contextlib
import hashlib
import time
import uuid
from collections.abc import Callable, Iterable, Sequence

import trio

from eventlog import Event as StoredEvent
from eventlog import EventStore, NewEvent, SkillogError

from ._effects import Effects
from ._events import (
    CODEC,
    ActivationTrigger,
    CatalogSnapshot,
    Event,
    ModelFailed,
    ModelResponded,
    PromptRendered,
    SessionEnded,
    SessionStarted,
    SkillActivated,
    SkillInfo,
    UserMessage,
)
from ._model import Message, ModelRequest, ToolCall
from ._prompt import compose, message_line, tail_line
from ._state import SessionState, apply
from ._tools import CallContext, Recorder, View, activate, handle_call

Observer = Callable[[StoredEvent], None]
Clock = Callable[[], int]


class SessionNotFoundError(SkillogError):
    """No session with that id in the database."""


class SessionStateError(SkillogError):
    """The session cannot take that step in its current state."""


class _PromptHasher:
    """The request hash, kept incrementally: history lines are hashed once, each turn
    adds only its new messages and the tail (see ``_prompt`` for the layout)."""

    def __init__(self) -> None:
        self._hash = hashlib.sha256()
        self.count = 0

    def update(self, state: SessionState) -> list[bytes]:
        lines = [message_line(m) for m in state.messages[self.count :]]
        for line in lines:
            self._hash.update(line)
        self.count = len(state.messages)
        return lines

    def prime(self, messages: Sequence[Message]) -> None:
        """Start from history already named by recorded ``prompt.rendered`` events."""
        for m in messages:
            self._hash.update(message_line(m))
        self.count = len(messages)

    def digest(self, tail: bytes) -> str:
        h = self._hash.copy()
        h.update(tail)
        return h.hexdigest()


class Session:
    """A running session. Create one with :meth:`create` or :meth:`open`."""

    def __init__(
        self,
        store: EventStore,
        state: SessionState,
        effects: Effects,
        *,
        clock: Clock = time.time_ns,
        observers: Sequence[Observer] = (),
    ) -> None:
        self.store = store
        self.state = state
        self.effects = effects
        self.clock = clock
        self.observers = list(observers)
        self._blobs: dict[str, bytes] = {}
        self._hasher = _PromptHasher()
        self._prompt: tuple[PromptRendered, list[bytes]] | None = None

    @property
    def id(self) -> str:
        return self.state.session_id

    # -- lifecycle ---------------------------------------------------------------------

    @classmethod
    async def create(
        cls,
        store: EventStore,
        config: SessionStarted,
        catalog: Sequence[SkillInfo],
        effects: Effects,
        *,
        hidden: Sequence[tuple[str, str]] = (),
        session_id: str | None = None,
        clock: Clock = time.time_ns,
        observers: Sequence[Observer] = (),
        preface: Sequence[Event] = (),
    ) -> Session:
        """Start a new session: records ``session.started`` and the catalog it sees."""
        session = cls(
            store,
            SessionState(session_id or uuid.uuid4().hex),
            effects,
            clock=clock,
            observers=observers,
        )
        await session.record(
            *preface, config, CatalogSnapshot(skills=tuple(catalog), hidden=tuple(hidden))
        )
        return session

    @classmethod
    async def open(
        cls,
        store: EventStore,
        session_id: str,
        effects: Effects,
        *,
        clock: Clock = time.time_ns,
        observers: Sequence[Observer] = (),
    ) -> Session:
        """Reopen a session from its log: refold its events, reload the blobs the next
        prompt needs, and continue where it stopped."""
        state = SessionState(session_id)
        named = 0
        async for event in store.read(session_id):
            body = CODEC.decode(event)
            if isinstance(body, PromptRendered):
                named = body.message_count
            apply(state, body, seq=event.seq, hash=event.hash)
        if state.seq < 0:
            raise SessionNotFoundError(
                f"no session {session_id!r} in this database; `skillog sessions` lists them"
            )
        session = cls(store, state, effects, clock=clock, observers=observers)
        for skill in state.active:
            session._blobs[skill.body_digest] = await store.get_blob(skill.body_digest)
        # Messages added after the last recorded prompt (the answer and tool results of
        # a turn that stopped) were never stored as blobs: the next prompt must name
        # them as new, or its recorded request could not be rebuilt from the log.
        session._hasher.prime(state.messages[:named])
        return session

    # -- recording ---------------------------------------------------------------------

    async def record(self, *bodies: Event, blobs: Iterable[bytes] = ()) -> None:
        """Append events now (stamped with the clock) with the blobs they refer to."""
        now = self.clock()
        await self._append(
            list(bodies), [CODEC.encode(b, recorded_at=now) for b in bodies], list(blobs)
        )

    async def _append(
        self, bodies: list[Event], events: list[NewEvent], blobs: list[bytes]
    ) -> None:
        if not events:
            return
        committed = await self.store.append(
            self.id, events, expected_seq=self.state.seq + 1, blobs=blobs
        )
        for body, event in zip(bodies, committed, strict=True):
            apply(self.state, body, seq=event.seq, hash=event.hash)
        for event in committed:
            for observer in self.observers:
                observer(event)

    async def get_blob(self, digest: str) -> bytes:
        data = self._blobs.get(digest)
        return data if data is not None else await self.store.get_blob(digest)

    # -- steps -------------------------------------------------------------------------

    async def add_user_message(self, text: str) -> None:
        """Record a user message. ``/skill-name`` at the start of a line activates that
        skill (user-explicit activation) before the model sees the message."""
        await self.record(UserMessage(text=text))
        names = [
            line.split()[0][1:]
            for line in text.splitlines()
            if line.startswith("/") and line.split()[0][1:] in self.state.catalog
        ]
        if names:
            await self._run_activation(list(dict.fromkeys(names)), trigger="user")

    async def _run_activation(self, names: list[str], *, trigger: ActivationTrigger) -> None:
        rec = Recorder(self.clock)
        ctx = self._context(ToolCall(id="", name="", arguments=""), View.of(self.state), rec)
        with contextlib.suppress(SkillogError):  # recorded as skill.activation_failed
            await activate(ctx, names, mode="add", trigger=trigger)
        await self._commit(rec)

    async def render(self) -> tuple[ModelRequest, str]:
        """Compose the next request; returns it and its hash.

        Its ``prompt.rendered`` event (with the request's blobs) is committed together
        with the outcome of the call (response or failure), saving a durable write per
        turn. Nothing is lost if the process dies in between: the request is a pure
        function of the log, so it is composed again, byte for byte.
        """
        if self.state.status == "ended":
            raise SessionStateError(f"session {self.id} has ended")
        bodies = {
            s.body_digest: (await self.get_blob(s.body_digest)).decode() for s in self.state.active
        }
        request = compose(self.state, bodies)
        lines = self._hasher.update(self.state)
        tail = tail_line(request)
        digest = self._hasher.digest(tail)
        self._prompt = (
            PromptRendered(
                turn=self.state.turn + 1,
                request_hash=digest,
                message_count=len(request.messages),
                new_message_digests=tuple(hashlib.sha256(line).hexdigest() for line in lines),
                tail_digest=hashlib.sha256(tail).hexdigest(),
            ),
            [*lines, tail],
        )
        return request, digest

    @property
    def turn(self) -> int:
        """The turn of the last composed request (pending or recorded)."""
        return self._prompt[0].turn if self._prompt else self.state.turn

    async def record_outcome(self, outcome: ModelResponded | ModelFailed) -> None:
        """Record the answer to (or failure of) the last composed request, with the
        ``prompt.rendered`` it answers if that is not recorded yet."""
        prompt, self._prompt = self._prompt, None
        if prompt is None:
            await self.record(outcome)
        else:
            await self.record(prompt[0], outcome, blobs=prompt[1])

    async def run_tools(self) -> None:
        """Run the tool calls of the last model response and record all of their events
        in one append, in the order the model made the calls.

        Calls that change the active skills run in order; the others run concurrently,
        each deciding from its own view of the state at its position. If the turn is
        cancelled nothing is recorded and the calls run again when the session resumes.
        """
        calls = list(self.state.pending_calls)
        view = View.of(self.state)
        recorders: list[Recorder] = []
        async with trio.open_nursery() as nursery:
            for call in calls:
                rec = Recorder(self.clock)
                recorders.append(rec)
                if call.name in ("skills.load", "skills.unload"):
                    await handle_call(self._context(call, view, rec))
                else:
                    nursery.start_soon(handle_call, self._context(call, view.copy(), rec))
        merged = Recorder(self.clock)
        for rec in recorders:
            merged.bodies += rec.bodies
            merged.events += rec.events
            merged.blobs.update(rec.blobs)
        await self._commit(merged)

    async def end(self, reason: str, error: str | None = None) -> None:
        if self.state.status != "ended":
            await self.record(
                SessionEnded(reason=reason, turns=self.state.turn, error=error)  # type: ignore[arg-type]
            )

    def _context(self, call: ToolCall, view: View, rec: Recorder) -> CallContext:
        return CallContext(
            session_id=self.id,
            turn=self.state.turn,
            call=call,
            view=view,
            rec=rec,
            effects=self.effects,
            get_blob=self.get_blob,
        )

    async def _commit(self, rec: Recorder) -> None:
        await self._append(rec.bodies, rec.events, list(rec.blobs.values()))
        # Keep the active skills' files at hand: every prompt needs the bodies and
        # skills.read is the common call. Content-addressed, so the cache cannot go stale.
        for body in rec.bodies:
            if isinstance(body, SkillActivated):
                for digest in (body.body_digest, *(f.sha256 for f in body.files)):
                    self._blobs[digest] = rec.blobs[digest]
