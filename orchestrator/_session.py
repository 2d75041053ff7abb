"""A session: one event stream, its folded state, and the steps that extend it.

Every step appends events (durably, optimistically at the next seq) and only then
folds them into the state and tells the observers, so the state never runs ahead of
the log. Appends from concurrent tool calls of one session are group-committed: while
one append is in flight the others queue, and the next goes out as one transaction.
A session opened from an existing stream refolds its events and continues exactly
where it stopped.
"""

from __future__ import annotations

import contextlib
import hashlib
import time
import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from types import MappingProxyType

import trio

from eventlog import Event as StoredEvent
from eventlog import EventStore, NewEvent, SkillogError, closing

from ._calls import CallContext, Recorded, Recorder, View
from ._context import (
    BYTES_ESTIMATOR,
    Estimator,
    EstimatorError,
    Reason,
    apply_compaction,
    budget_of,
    plan_compaction,
    summary_compaction,
    summary_request,
    tokens_of,
)
from ._effects import Effects, Reconciler
from ._events import (
    CODEC,
    ActivationTrigger,
    ApprovalRemembered,
    ApprovalResolved,
    CatalogSnapshot,
    ContextCompacted,
    Event,
    ModelFailed,
    ModelResponded,
    PromptRendered,
    SessionEnded,
    SessionStarted,
    SessionSuspended,
    SkillActivated,
    SkillInfo,
    SummaryAnswered,
    SummaryRequested,
    ToolCalled,
    UserMessage,
)
from ._mcp_roots import roots_changes
from ._model import Message, ModelRequest, ModelResponse, ToolCall, ToolSpec
from ._pipeline import Hooks, first_group, intent, run_call, run_turn_tools, without_effect
from ._prompt import (
    compose,
    message_line,
    prefix_key,
    request_bytes,
    request_hash,
    skills_in_block,
    system_prompt,
    tail_line,
    tool_specs,
)
from ._state import SessionState, apply
from ._tools import activate, activate_triggered, message_triggers, plan_call
from ._visibility import RefreshContext, SkillContext

Observer = Callable[[StoredEvent], None]
Clock = Callable[[], int]


DECISION_POLL_S = 0.1
"""How often a driver whose approver is asking looks for a decision from elsewhere."""


class SessionNotFoundError(SkillogError):
    """No session with that id in the database."""


class SessionStateError(SkillogError):
    """The session cannot take that step in its current state."""


class ContextExhaustedError(SkillogError):
    """The next request cannot fit the model's context window, even after compaction:
    the loop ends the session with ``context_exhausted`` and this message."""


class SummaryPending(Exception):
    """Raised by :meth:`Session.render` after it recorded a summary call's intent
    (``context.summary_requested``): the loop asks for the summary
    (:meth:`Session.summary_request`, :meth:`Session.record_summary`), then renders
    again."""


def refresh_context(config: SessionStarted, state: SessionState | None = None) -> RefreshContext:
    """What catalog visibility is decided from: the recorded configuration and, once
    the session has one, its recorded state."""
    return RefreshContext(
        catalog=state.catalog if state is not None else {},
        skill_context=SkillContext(
            params=MappingProxyType(config.params),  # read-only: predicates only look
            turn=state.turn if state is not None else 0,
            active=state.active_names if state is not None else (),
        ),
        require_signatures=config.policy.require_signatures,
        file_access=config.file_access,
    )


class _PromptHasher:
    """The request hash, kept incrementally: history lines are hashed once, each turn
    adds only its new messages and the tail (see ``_prompt`` for the layout). A
    compaction rewrites the history (``state.history_rewrites`` moves on): the next
    request then hashes, and names as new, every message again."""

    def __init__(self) -> None:
        self._hash = hashlib.sha256()
        self.count = 0
        self.size = 0  # bytes of the lines hashed
        self.epoch = 0  # the history_rewrites the hashed lines belong to

    def update(self, state: SessionState) -> list[bytes]:
        if state.history_rewrites != self.epoch:
            self._hash, self.count, self.size = hashlib.sha256(), 0, 0
            self.epoch = state.history_rewrites
        lines = [message_line(m) for m in state.messages[self.count :]]
        for line in lines:
            self._hash.update(line)
            self.size += len(line)
        self.count = len(state.messages)
        return lines

    def prime(self, messages: Sequence[Message], epoch: int) -> None:
        """Start from history already named by recorded ``prompt.rendered`` events."""
        for m in messages:
            line = message_line(m)
            self._hash.update(line)
            self.size += len(line)
        self.count = len(messages)
        self.epoch = epoch

    def history_bytes(self, state: SessionState) -> int:
        """The bytes of the canonical lines of ``state.messages`` (each new line is
        encoded again by :meth:`update`; only the messages of one turn)."""
        base, start = (self.size, self.count) if state.history_rewrites == self.epoch else (0, 0)
        return base + sum(len(message_line(m)) for m in state.messages[start:])

    def digest(self, tail: bytes) -> str:
        h = self._hash.copy()
        h.update(tail)
        return h.hexdigest()


class _Queued:
    """One append waiting for the session's next transaction (``tail``: the digest of
    the prompt tail among its blobs, which later prompts leave out once it is stored)."""

    __slots__ = ("blobs", "bodies", "done", "error", "events", "tail")

    def __init__(
        self,
        bodies: list[Event],
        events: list[NewEvent],
        blobs: list[bytes],
        tail: str | None = None,
    ) -> None:
        self.bodies = bodies
        self.events = events
        self.blobs = blobs
        self.tail = tail
        self.done = False
        self.error: BaseException | None = None


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
        reconcile: Reconciler | None = None,
    ) -> None:
        self.store = store
        self.state = state
        self.effects = effects
        self.clock = clock
        self.observers = list(observers)
        self.reconcile = reconcile
        self._blobs: dict[str, bytes] = {}
        self._texts: dict[str, str] = {}
        self._kept_prefix: tuple[int | None, tuple[str, tuple[ToolSpec, ...]]] | None = None
        self._kept_tail: tuple[tuple[object, ...], bytes, str] | None = None
        self._stored_tail: str | None = None  # the tail blob this session has committed
        self._hasher = _PromptHasher()
        self._lock = trio.Lock()
        self._queue: list[_Queued] = []
        # A prompt the log holds unanswered when the session is opened was being sent
        # (or waited on) by a process that stopped.
        # (Unless a model.interrupted already says so: the process was cancelled.)
        self._interrupted_prompt = (
            state.open_prompt is not None and not state.open_prompt_interrupted
        )
        self._fresh_intents: frozenset[str] = frozenset()
        self.pure_at_once = False
        """A response that is one call without effect (``_pipeline.without_effect``)
        runs it before anything is recorded and commits the response, the intent and
        the outcome in one transaction: the events are the same as in two, and whoever
        waits for the outcome (an MCP client of ``skillog mcp serve``) waits for one
        commit. Not for a model's answer, which must be durable once it arrived."""
        self.defer_prompts = False
        """A ``prompt.rendered`` is not committed on its own: it joins the session's
        next transaction, ahead of what follows it (the answer to it, or the end), so
        the log holds the same events in the same order. Only for a model that is sent
        nothing (an MCP client of ``skillog mcp serve``, which has its context
        already: the results it read): write-ahead guards what is sent, and a prompt
        lost in a crash was seen by nobody. Each call then commits once."""
        self.woke_repliers: Callable[[], bool] = lambda: True
        """With :attr:`defer_prompts`: whether the last commit woke a task that replies
        to the model's side (it runs before the next prompt is composed)."""
        self.when_durable: Callable[[Sequence[Event]], Callable[[], None] | None] | None = None
        """Given what a transaction is about to commit: what to run the moment it is
        durable, in the store's writer thread, before the session's task is scheduled
        again (``EventStore.append``'s ``on_durable``): ``skillog mcp serve`` writes
        a call's reply there. None: nothing."""
        self._deferred: _Queued | None = None
        self._estimator: Estimator | None = None
        self.started_at = clock()  # replaced by the recorded start when opened

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
        reconcile: Reconciler | None = None,
        task: str | None = None,
    ) -> Session:
        """Start a new session: records ``session.started``, the catalog it sees and,
        given a ``task``, the user's first message, all in one transaction (a session
        is never in the log without what it was asked to do)."""
        session = cls(
            store,
            SessionState(session_id or uuid.uuid4().hex),
            effects,
            clock=clock,
            observers=observers,
            reconcile=reconcile,
        )
        await session._load_estimator(config)
        first = [UserMessage(text=task)] if task is not None else []
        await session.record(
            *preface, config, CatalogSnapshot(skills=tuple(catalog), hidden=tuple(hidden)), *first
        )
        if task is not None:
            await session._activate_named(task)
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
        reconcile: Reconciler | None = None,
        read: Sequence[tuple[StoredEvent, Event]] | None = None,
    ) -> Session:
        """Reopen a session from its log: refold its events, reload the blobs the next
        prompt needs, and continue where it stopped. ``read``: the stream's events from
        its start, already read and decoded by a caller that holds the session's lease
        (a fleet worker reads it once for the configuration, whether it ended and the
        fold); only what was appended since (an approval decided while the agent's MCP
        servers connected) is read here."""
        start = read[-1][0].seq + 1 if read else 0
        read = [
            *(read or ()),
            *[(e, CODEC.decode(e)) async for e in store.read(session_id, from_seq=start)],
        ]
        state = SessionState(session_id)
        named = epoch = 0
        started_at = 0
        for event, body in read:
            if isinstance(body, SessionStarted):
                started_at = event.recorded_at
            if isinstance(body, PromptRendered):
                named, epoch = body.message_count, state.history_rewrites
            apply(state, body, seq=event.seq, hash=event.hash)
        if state.seq < 0:
            raise SessionNotFoundError(
                f"no session {session_id!r} in this database; `skillog sessions` lists them"
            )
        session = cls(store, state, effects, clock=clock, observers=observers, reconcile=reconcile)
        if state.config is not None:
            await session._load_estimator(state.config)
        session.started_at = started_at
        for skill in state.active:
            session._blobs[skill.body_digest] = await store.get_blob(skill.body_digest)
        # Messages added after the last recorded prompt (the answer and tool results of
        # a turn that stopped) were never stored as blobs: the next prompt must name
        # them as new, or its recorded request could not be rebuilt from the log. A
        # prompt recorded but never answered names exactly the messages so far.
        # A compaction after the last prompt rewrote the history: the next prompt names
        # every message again (the epoch differs).
        session._hasher.prime(state.messages[:named], epoch)
        return session

    # -- recording ---------------------------------------------------------------------

    async def record(self, *bodies: Event, blobs: Iterable[bytes] = ()) -> None:
        """Append events now (stamped with the clock) with the blobs they refer to."""
        now = self.clock()
        await self._append(
            list(bodies), [CODEC.encode(b, recorded_at=now) for b in bodies], list(blobs)
        )

    async def _append(
        self,
        bodies: list[Event],
        events: list[NewEvent],
        blobs: list[bytes],
        alone: bool = False,
        tail: str | None = None,
    ) -> None:
        """Commit in the session's next transaction, behind a deferred prompt
        (:attr:`defer_prompts`). The lock's yield lets appends that are ready at the
        same moment (parallel calls) join this one's transaction; an ``alone`` append
        (no other call is running) takes a free lock without it (one scheduler pass
        less on the common path). Cancellation is the same either way."""
        if not events and self._deferred is None:
            return
        item = _Queued(bodies, events, blobs, tail)
        self._queue.append(item)
        try:
            if alone:
                await trio.lowlevel.checkpoint_if_cancelled()
            if not (alone and _took(self._lock)):
                await self._lock.acquire()
        except BaseException:
            if item in self._queue:  # cancelled before any transaction took it
                self._queue.remove(item)
            raise
        try:
            if not item.done:
                batch, self._queue = self._queue, []
                if self._deferred is not None:
                    batch.insert(0, self._deferred)
                    self._deferred = None
                # Once sent, the outcome reaches the state (or the state would run
                # behind the log), and the batch's other appends their outcome:
                # EventStore.append is never cancelled, so no shield is needed (its
                # cancel scope cost as much as the rest of this function).
                await self._commit_batch(batch)
        finally:
            self._lock.release()
        if item.error is not None:
            raise item.error

    async def _commit_batch(self, batch: list[_Queued]) -> None:
        bodies = [b for item in batch for b in item.bodies]
        try:
            committed = await self.store.append(
                self.id,
                [e for item in batch for e in item.events],
                expected_seq=self.state.seq + 1,
                blobs=[b for item in batch for b in item.blobs],
                on_durable=self.when_durable(bodies) if self.when_durable is not None else None,
            )
        except BaseException as e:
            for item in batch:
                item.done, item.error = True, e
            return
        for body, event in zip(bodies, committed, strict=True):
            apply(self.state, body, seq=event.seq, hash=event.hash)
        for item in batch:
            item.done = True
            if item.tail is not None:
                self._stored_tail = item.tail
        for event in committed:
            for observer in self.observers:
                observer(event)

    async def get_blob(self, digest: str) -> bytes:
        data = self._blobs.get(digest)
        return data if data is not None else await self.store.get_blob(digest)

    # -- steps -------------------------------------------------------------------------

    async def add_user_message(self, text: str) -> None:
        """Record a user message. ``/skill-name`` at the start of a line activates that
        skill (user-explicit activation) before the model sees the message; then the
        skills whose declared triggers the message fires (trigger ``triggered``)."""
        await self.record(UserMessage(text=text))
        await self._activate_named(text)

    async def _activate_named(self, text: str) -> None:
        """The skills the message names (``/skill-name``), then those whose declared
        triggers it fires."""
        await self._activate_slash(text)
        fired = message_triggers(self.state.catalog, text)
        if fired:
            ctx = self._context(ToolCall(id="", name="", arguments=""), View.of(self.state))
            await activate_triggered(ctx, fired)
            await ctx.commit()

    async def _activate_slash(self, text: str) -> None:
        names = [
            line.split()[0][1:]
            for line in text.splitlines()
            if line.startswith("/") and line.split()[0][1:] in self.state.catalog
        ]
        if names:
            await self._run_activation(list(dict.fromkeys(names)), trigger="user")

    async def _run_activation(self, names: list[str], *, trigger: ActivationTrigger) -> None:
        ctx = self._context(ToolCall(id="", name="", arguments=""), View.of(self.state))
        with contextlib.suppress(SkillogError):  # recorded as skill.activation_failed
            await activate(ctx, names, mode="add", trigger=trigger)
        await ctx.commit()

    async def refresh(self) -> None:
        """Between turns: record how the catalog changed (sources rescanned, enabled
        predicates asked again) before the next prompt is composed from it. Nothing
        when a recorded prompt is still unanswered: it is sent again as it was."""
        state = self.state
        if state.open_prompt is not None or state.config is None:
            return
        config = state.config
        changes = await self.effects.refresh(lambda: refresh_context(config, state))
        if changes:
            await self.record(*changes)

    async def render(self) -> tuple[ModelRequest, str]:
        """Compose the next request and commit its ``prompt.rendered`` (with the
        request's blobs) before anything sends it; returns it and its hash.

        First, what changed in the MCP servers' tools since the log last said is
        recorded (``mcp.tools_listed``, ``mcp.server_failed``). When the log already
        holds a prompt nobody answered, the request is composed
        again and checked to be the same bytes: a retry after ``model.failed`` records
        nothing more; in a session reopened with the prompt unanswered (the process
        stopped during the model call) ``model.failed`` (kind ``interrupted``) first
        records that the next attempt retries it. When the compaction that makes the
        request fit asks for a summary, its intent is recorded and
        :class:`SummaryPending` raised instead: the loop asks for the summary, then
        renders again.
        """
        if self.state.status == "ended":
            raise SessionStateError(f"session {self.id} has ended")
        if self.defer_prompts and self.woke_repliers():
            # Nobody waits for a deferred prompt: the tasks the last commit woke (the
            # SDK's task writing the reply to the client's call) run first, and this one
            # while the client reads; not when none did (a pass of the scheduler for
            # nothing: the lane's reply left as the outcome became durable). Not a
            # cancellation point of its own: where a loop is cancelled stays as it was.
            await trio.lowlevel.cancel_shielded_checkpoint()
        await self._append([], [], [])  # a deferred prompt, still unanswered: now
        if self.state.open_prompt is None:
            # What the MCP servers offer is recorded before the prompt that offers it,
            # so the prompt re-renders from the log alone.
            changes = await self.effects.mcp_changes(self.state.mcp_servers)
            if changes:
                await self.record(*changes)
            roots = roots_changes(self.state)
            if roots:
                await self.record(*roots)
            await self.effects.mcp_roots(self.state.mcp_roots)
        bodies = await self._bodies()
        request = compose(self.state, bodies, self._prefix(bodies))
        if self.state.open_prompt is None:
            request = await self._fit(request, bodies)
        lines = self._hasher.update(self.state)
        tail, tail_digest = self._tail(request)
        digest = self._hasher.digest(tail)
        recorded = self.state.open_prompt
        if recorded is None:
            prompt = PromptRendered(
                turn=self.state.turn + 1,
                request_hash=digest,
                message_count=len(request.messages),
                new_message_digests=tuple(hashlib.sha256(line).hexdigest() for line in lines),
                tail_digest=tail_digest,
            )
            # The tail (system prompt and tools) is the same turn after turn: stored
            # once, by content, and left out of the appends that follow.
            blobs = lines if tail_digest == self._stored_tail else [*lines, tail]
            event = CODEC.encode(prompt, recorded_at=self.clock())
            if self.defer_prompts:
                self._deferred = _Queued([prompt], [event], blobs, tail_digest)
            else:
                await self._append([prompt], [event], blobs, tail=tail_digest)
        elif recorded.request_hash != digest:
            raise SessionStateError(
                f"session {self.id}: the unanswered request of turn {recorded.turn} "
                f"recomposes to {digest}, not the recorded {recorded.request_hash}; "
                "`skillog replay` shows where the log and this code part ways"
            )
        elif self._interrupted_prompt:
            self._interrupted_prompt = False
            await self.record(
                ModelFailed(
                    turn=recorded.turn,
                    kind="interrupted",
                    message="the process stopped before the model answered; "
                    "the same request is sent again",
                    attempt=self.state.model_attempts + 1,
                    will_retry=True,
                )
            )
        return request, digest

    def _prefix(self, bodies: Mapping[str, str]) -> tuple[str, tuple[ToolSpec, ...]]:
        """The next request's system prompt and tools: those of the last one while
        nothing they are made of changed (turn after turn of tool calls)."""
        key = prefix_key(self.state)
        kept = self._kept_prefix
        if key is None or kept is None or kept[0] != key:
            kept = self._kept_prefix = (
                key,
                (system_prompt(self.state, bodies), tool_specs(self.state)),
            )
        return kept[1]

    def _tail(self, request: ModelRequest) -> tuple[bytes, str]:
        """The request's tail line and its sha256, kept for the same prefix."""
        kept = self._kept_tail
        of = (request.system, request.tools, request.model, request.max_tokens)
        if kept is None or kept[0] != of:  # the same objects, turn after turn: compared by identity
            tail = tail_line(request)
            kept = self._kept_tail = (of, tail, hashlib.sha256(tail).hexdigest())
        return kept[1], kept[2]

    async def _bodies(self) -> dict[str, str]:
        return {s.body_digest: await self._text(s.body_digest) for s in self.state.active}

    async def _text(self, digest: str) -> str:
        """An active skill's body as text, decoded once (content-addressed: the same
        digest is the same text, and the same object turn after turn)."""
        text = self._texts.get(digest)
        if text is None:
            text = self._texts[digest] = (await self.get_blob(digest)).decode()
        return text

    async def _load_estimator(self, config: SessionStarted) -> None:
        """Load the estimator the session records (a tiktoken encoding reads files, off
        the trio loop) before anything is recorded or driven: a session that cannot
        count as it did is refused whole, not stopped at its first estimate."""
        if config.estimator in ("", BYTES_ESTIMATOR):
            self._estimator = Estimator()
            return
        try:
            self._estimator = await trio.to_thread.run_sync(Estimator, config.estimator)
        except EstimatorError as e:
            cause = e.__cause__
            why = f"{type(cause).__name__}: {cause}" if cause is not None else str(e)
            raise EstimatorError(
                f"session {self.id} counts tokens with {config.estimator!r} "
                "(session.started.estimator), and a resume or re-drive counts as the session "
                f"did, but it cannot be loaded here ({why}); install it with pip install "
                "'skillog[tiktoken]' where its encoding files can be fetched or are cached"
            ) from e

    @property
    def estimator(self) -> Estimator:
        """The token estimator the session recorded (loaded once)."""
        if self._estimator is None:
            config = self.state.config
            self._estimator = Estimator(config.estimator if config is not None else "")
        return self._estimator

    def estimate(self, request: ModelRequest, bodies: Mapping[str, str]) -> int:
        """The estimated tokens of ``request`` (composed from the state now): the last
        answer's usage plus what was added since, or a quarter of its bytes when there
        is no usage to start from (docs/context.md). A pure function of the log."""
        state, count = self.state, self.estimator
        if state.usage_tokens:
            added = [message_line(m) for m in state.messages[state.usage_messages :]]
            new = [s for s in state.active if s.body_digest not in state.usage_bodies]
            config = state.config
            if new and config is not None and config.context_rules >= 1:
                # Mode results: a body a load result shows is in that result's line,
                # counted above, and not in the system prompt (sessions recorded before
                # context_rules 1 counted it twice, and re-drive so).
                block = {s.body_digest for s in skills_in_block(state, bodies)}
                new = [s for s in new if s.body_digest in block]
            added += [bodies[s.body_digest].encode() for s in new]
            return state.usage_tokens + count.tokens(added)
        if count.exact_bytes:  # the lines' sizes are known without encoding them again
            return tokens_of(self._hasher.history_bytes(state) + len(tail_line(request)))
        return count.tokens([*map(message_line, state.messages), tail_line(request)])

    async def _fit(self, request: ModelRequest, bodies: Mapping[str, str]) -> ModelRequest:
        """Compact before a request over the threshold, and refuse one that cannot fit
        the budget (:class:`ContextExhaustedError`); nothing when the window is unknown."""
        config = self.state.config
        assert config is not None
        if not config.context_window:
            return request
        budget, threshold = budget_of(
            config.context_window, config.max_tokens, config.policy.context
        )
        tokens = self.estimate(request, bodies)
        if tokens <= threshold:
            return request
        # Once compacting, down to the target: a request that only just fits would
        # compact again next turn, and every compaction breaks the provider's cache.
        target = budget * config.policy.context.compact_to_percent // 100
        events = self._plan("budget", tokens, request, target)
        if events:
            await self._record_plan(events)
            if self.state.summary_pending is not None:
                raise SummaryPending
            request = compose(self.state, bodies)
            tokens = self.estimate(request, bodies)
        if tokens > budget:
            raise ContextExhaustedError(
                f"the request for turn {self.state.turn + 1} needs about {tokens} tokens, over "
                f"the budget of {budget} (a context window of {config.context_window} less "
                f"{config.max_tokens} for the answer) even after compaction; give the model a "
                "larger window (--context-window) or keep tool results smaller "
                "(policy.read_max_bytes, policy.output_cap_bytes)"
            )
        return request

    def _plan(
        self, reason: Reason, tokens: int, request: ModelRequest, until: int | None
    ) -> list[ContextCompacted | SummaryRequested]:
        state = self.state
        assert state.config is not None
        policy = state.config.policy.context
        summarise = (
            state.config.summaries
            and policy.summarise
            and state.summary_tokens < policy.summary_budget_tokens
        )
        return plan_compaction(
            state.messages,
            state.cleared,
            state.active_names,
            state.config,
            reason=reason,
            tokens=tokens,
            tail=tail_line(request),
            until=until,
            summarise=request_hash if summarise else None,
            estimator=self.estimator,
        )

    async def _record_plan(self, events: Sequence[ContextCompacted | SummaryRequested]) -> None:
        """Record a compaction's steps in one transaction, with the summary request's
        bytes when it ends asking for one (the blob its ``request_hash`` names)."""
        blobs: list[bytes] = []
        last = events[-1] if events else None
        if isinstance(last, SummaryRequested):
            history = self.state.messages
            for event in events[:-1]:
                assert isinstance(event, ContextCompacted)
                history, _ = apply_compaction(history, set(), event)
            assert self.state.config is not None
            blobs.append(request_bytes(summary_request(history, last.dropped, self.state.config)))
        await self.record(*events, blobs=blobs)

    def summary_request(self) -> ModelRequest:
        """The pending summary call's request, composed again from the log and checked
        to be the bytes its intent recorded (also after a restart)."""
        pending, config = self.state.summary_pending, self.state.config
        if pending is None or config is None:
            raise SessionStateError(f"session {self.id} has no summary call pending")
        request = summary_request(self.state.messages, pending.dropped, config)
        if request_hash(request) != pending.request_hash:
            raise SessionStateError(
                f"session {self.id}: the pending summary request recomposes to "
                f"{request_hash(request)}, not the recorded {pending.request_hash}; "
                "`skillog replay` shows where the log and this code part ways"
            )
        return request

    async def record_summary(
        self, response: ModelResponse | None, *, error: str = "", duration_ms: int = 0
    ) -> None:
        """Record the pending summary call's answer (or its failure) and the compaction
        it makes, in one transaction; the summary text is a blob of the session."""
        pending, config = self.state.summary_pending, self.state.config
        assert pending is not None and config is not None
        bodies = await self._bodies()
        tail = tail_line(compose(self.state, bodies))
        answered = SummaryAnswered(response=response, error=error, duration_ms=duration_ms)
        event = summary_compaction(
            self.state.messages, pending, response, config, tail=tail, estimator=self.estimator
        )
        summary = [] if response is None else [response.text.strip().encode()]
        if event is None or not event.summary_digest:
            summary = []
        await self.record(answered, *([event] if event else []), blobs=summary)

    async def compact_after_overflow(self) -> bool:
        """After the provider refused the last request as too long: every compaction
        step that changes anything, whatever the estimate said, recorded together.
        False when none did."""
        bodies = await self._bodies()
        request = compose(self.state, bodies)
        events = self._plan("overflow", self.estimate(request, bodies), request, None)
        await self._record_plan(events)
        return bool(events)

    @property
    def turn(self) -> int:
        """The turn of the last composed request (recorded, or deferred)."""
        deferred = self._deferred
        if deferred is not None:
            prompt = deferred.bodies[0]
            assert isinstance(prompt, PromptRendered)
            return prompt.turn
        return self.state.turn

    async def record_outcome(self, outcome: ModelResponded | ModelFailed) -> None:
        """Record the answer to (or failure of) the last composed request. A response
        that asks for tools is committed with the intents of the calls the turn starts
        with (one transaction instead of two; nothing has run yet either way)."""
        intents: list[ToolCalled] = []
        if isinstance(outcome, ModelResponded):
            view = View.of(self.state)  # the response does not change catalog or skills
            calls = outcome.response.tool_calls
            if self.pure_at_once and len(calls) == 1 and await self._at_once(outcome, view):
                return
            for call in first_group(calls):
                ctx = self._context(call, view.copy())
                ctx.turn = outcome.turn
                intents.append(intent(ctx, plan_call(ctx)))
        await self.record(outcome, *intents)
        self._fresh_intents = frozenset(i.call_id for i in intents)

    async def _at_once(self, outcome: ModelResponded, view: View) -> bool:
        """Run the one call of ``outcome`` and commit the response, its intent and its
        outcome together (:attr:`pure_at_once`); False, with nothing done, when the
        call has an effect: it then takes the write-ahead path."""
        ctx = self._context(outcome.response.tool_calls[0], view)
        ctx.turn, ctx.alone = outcome.turn, True
        plan = plan_call(ctx)
        if not without_effect(plan):
            return False
        ctx.rec.add(outcome)
        ctx.rec.add(intent(ctx, plan))
        await run_call(ctx, plan, Hooks(clock=self.clock, reconcile=self.reconcile))
        return True

    async def run_tools(self) -> list[str]:
        """Run the tool calls of the last model response through the write-ahead
        pipeline (``_pipeline``). Calls whose approval nobody here can give are left
        pending and the session is suspended (``session.suspended``); returns their
        ids. A cancelled turn stays resumable: each call continues from what the log
        holds for it."""
        hooks = Hooks(clock=self.clock, reconcile=self.reconcile)
        before = self.state.seq
        fresh, self._fresh_intents = self._fresh_intents, frozenset()
        waiting = await run_turn_tools(self.state, self._call_context, hooks, fresh)
        if waiting and not (self.state.status == "awaiting_approval" and self.state.seq == before):
            await self.record(
                SessionSuspended(reason="awaiting_approval", call_ids=tuple(sorted(waiting)))
            )
        return waiting

    async def end(self, reason: str, error: str | None = None) -> None:
        if self.state.status != "ended":
            await self.record(
                SessionEnded(reason=reason, turns=self.state.turn, error=error)  # type: ignore[arg-type]
            )

    def _call_context(self, index: int, view: View, recorded: Recorded) -> CallContext:
        return self._context(self.state.pending_calls[index], view, recorded)

    def _context(self, call: ToolCall, view: View, recorded: Recorded | None = None) -> CallContext:
        return CallContext(
            session_id=self.id,
            turn=self.state.turn,
            call=call,
            view=view,
            rec=Recorder(self.clock),
            effects=self.effects,
            get_blob=self.get_blob,
            commit_recorder=self._commit,
            recorded=recorded or Recorded(),
            decided_elsewhere=self._decided_elsewhere,
        )

    async def _decided_elsewhere(
        self, call_id: str, *, wait: bool = True
    ) -> ApprovalResolved | None:
        """A decision on ``call_id`` that another process appended to this session's
        stream while this driver asked its own approver (``skillog approve`` writes
        there, as it does for a suspended session): what it appended (the decision, a
        remembered grant and the calls it covers) is applied to the state as if
        appended here, so the next append follows it. Anything else another process
        appended is left unread; the next append then finds the session moved on."""
        while True:
            async with self._lock:
                with trio.CancelScope(shield=True):  # the state follows what it read
                    await self._adopt_decisions()
            progress = self.state.turn_progress
            decided = progress.approvals.get(call_id) if progress is not None else None
            if decided is not None or not wait:
                return decided
            await trio.sleep(DECISION_POLL_S)

    async def _adopt_decisions(self) -> None:
        async with closing(self.store.read(self.id, from_seq=self.state.seq + 1)) as events:
            async for event in events:
                body = CODEC.decode(event)
                if not isinstance(body, ApprovalResolved | ApprovalRemembered):
                    return
                apply(self.state, body, seq=event.seq, hash=event.hash)
                for observer in self.observers:
                    observer(event)

    async def _commit(self, rec: Recorder, *, alone: bool = False) -> None:
        await self._append(rec.bodies, rec.events, list(rec.blobs.values()), alone=alone)
        # Keep the active skills' files at hand: every prompt needs the bodies and
        # skills.read is the common call. Content-addressed, so the cache cannot go stale.
        for body in rec.bodies:
            if isinstance(body, SkillActivated):
                for digest in (body.body_digest, *(f.sha256 for f in body.files)):
                    self._blobs[digest] = rec.blobs[digest]


def _took(lock: trio.Lock) -> bool:
    """Take ``lock`` if it is free, without yielding."""
    try:
        lock.acquire_nowait()
    except trio.WouldBlock:
        return False
    return True
