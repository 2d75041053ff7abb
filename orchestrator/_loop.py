"""The agent loop: compose, record, call the model, record, run tools, until done.

:class:`Agent` is what an embedding program holds: a model adapter, the skills, host
tools, policy and approver. ``await agent.run(store, task)`` drives a new session to
its end; ``await agent.resume(store, session_id)`` continues one from its log (after a
crash, a cancellation or in another process) exactly where it stopped.

How a session ends (``session.ended``): ``completed`` when the model answers without
tool calls; ``max_turns`` when the turn bound is reached; ``error`` when the model keeps
failing (after bounded retries for retryable errors, at once for others) or answers
malformed output more than ``retry.max_attempts`` times in a row;
``context_exhausted`` when the next request cannot fit the model's context window even
after compaction (docs/context.md). A session whose
tool calls wait for approvals nobody in this process can give is suspended
(``session.suspended``, status ``awaiting_approval``): ``run`` returns, and ``resume``
in any process continues once the decisions are recorded. A cancelled or crashed run
stays resumable: everything with an effect was recorded before it started
(docs/effects.md).
"""

from __future__ import annotations

import contextlib
import hashlib
import math
import time
from collections.abc import AsyncIterator, Collection, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Literal

import trio

from eventlog import Event as StoredEvent
from eventlog import EventStore, SkillogError

from ._context import CONTEXT_RULES, Tokenizer, choose_estimator, context_window_for
from ._effects import Approver, Elicitor, LiveEffects, ProgressSink, Reconciler
from ._events import (
    CANCEL_RULES,
    CatalogMode,
    Event,
    InstructionsMode,
    ModelFailed,
    ModelInterrupted,
    ModelResponded,
    PolicyConfig,
    SessionStarted,
)
from ._host_tools import HostTool
from ._index_log import record_index_run
from ._model import (
    Delta,
    DeltaSink,
    ModelAdapter,
    ModelError,
    ModelRequest,
    ModelResponse,
    StreamingAdapter,
    with_image_data,
)
from ._policy import over_budget, policy_warnings
from ._session import (
    Clock,
    ContextExhaustedError,
    Observer,
    Session,
    SummaryPending,
    refresh_context,
)
from ._visibility import Predicate
from .skills import CatalogRecord, InlineSkill, McpServerConfig, Skill, SkillWatcher

MAX_RESPONSE_CHARS = 1 << 20
VERSION = "0.1.1"


@dataclass(frozen=True)
class RetryPolicy:
    """Bounded retries of model calls: exponential backoff from ``base_ms``, capped at
    ``max_ms``, honouring the provider's retry-after hint when it is longer."""

    max_attempts: int = 4
    base_ms: int = 500
    max_ms: int = 30_000
    timeout_s: float = 120.0

    def delay_ms(self, attempt: int, hint_ms: int | None) -> int:
        backoff: int = min(self.max_ms, self.base_ms << (attempt - 1))
        return max(backoff, min(hint_ms or 0, self.max_ms))


class AgentConfigError(SkillogError):
    """An Agent configured in a way that would make its sessions ambiguous."""


@dataclass
class Agent:
    """Drives sessions: the one object an embedding program configures.

    ``params`` fill the placeholders of inline skill templates (at construction) and
    are what enabled predicates see (recorded in ``session.started``); ``enabled``
    maps skill names to predicates (an inline skill may carry its own). ``watch`` is
    the :class:`SkillWatcher` whose sources are rescanned between turns (the
    directory skills are then exactly what it finds). ``trusted_signers`` are the hex
    Ed25519 keys whose skill signatures count. ``indexed`` is the indexing run the
    skills came from, recorded (``catalog.indexed``) when a session starts or resumes.
    ``search_db`` is the SQLite file whose ``skills.search`` table (beside the skills
    index) serves searches across sessions instead of one built in memory per session.
    ``context_window`` is the model's window in tokens (None: the known window of
    ``model_name``, or unknown; docs/context.md), recorded in ``session.started``.
    ``tokenizer`` is how tokens are estimated for the context budget: ``bytes`` (a
    quarter of the bytes), ``tiktoken`` (the optional extra; an error where it cannot
    load) or ``auto`` (tiktoken where it loads, else bytes), recorded in
    ``session.started.estimator``.
    ``instructions_mode``: where the active skills' instructions reach the model,
    ``system`` (the system prompt's ``<active_skills>`` block) or ``results`` (the
    ``skills.load`` results only, so loading or unloading a skill leaves the cached
    prefix alone; docs/context.md), recorded in ``session.started``.
    ``on_delta`` receives the model's text and tool-call deltas as they arrive when
    the adapter can stream (never recorded: the log is the same either way).
    """

    model: ModelAdapter
    model_name: str
    skills: Sequence[Skill | InlineSkill] = ()
    host_tools: Sequence[HostTool] = ()
    policy: PolicyConfig = field(default_factory=PolicyConfig)
    approver: Approver | None = None
    reconcile: Reconciler | None = None
    name: str = "skillog"
    max_turns: int = 50
    max_tokens: int = 4096
    max_active_skills: int = 3
    file_access: bool = False
    hidden: Sequence[tuple[str, str]] = ()
    retry: RetryPolicy = field(default_factory=RetryPolicy)
    observers: Sequence[Observer] = ()
    clock: Clock = time.time_ns
    bwrap: str | None = None
    compact_catalog_over: int = 50
    catalog_mode: CatalogMode = ""
    params: Mapping[str, str] = field(default_factory=dict)
    enabled: Mapping[str, Predicate] = field(default_factory=dict)
    watch: SkillWatcher | None = None
    trusted_signers: Collection[str] = ()
    indexed: CatalogRecord | None = None
    search_db: str | None = None
    mcp_servers: Sequence[McpServerConfig] = ()
    instructions_in_results: bool = False
    context_window: int | None = None
    tokenizer: Tokenizer = "bytes"
    instructions_mode: InstructionsMode = "system"
    on_delta: DeltaSink | None = None
    elicitor: Elicitor | None = None
    on_progress: ProgressSink | None = None
    _effects: LiveEffects | None = field(default=None, init=False, repr=False)

    def __post_init__(self) -> None:
        self.skills = [_bind(s, self.params) for s in self.skills]
        strays = sorted(set(self.enabled) - {s.name for s in self.skills})
        if strays and self.watch is None:
            raise AgentConfigError(
                f"enabled predicates for {', '.join(map(repr, strays))}, which are not among "
                "the agent's skills; check the names"
            )
        for kind, names in (
            ("skills", [s.name for s in self.skills]),
            ("host tools", [t.name for t in self.host_tools]),
            ("MCP servers", [s.name for s in self.mcp_servers]),
        ):
            twice = sorted({n for n in names if names.count(n) > 1})
            if twice:
                raise AgentConfigError(
                    f"two {kind} are named {', '.join(map(repr, twice))}: a name must say "
                    f"which one the model means; rename or drop one"
                )

    @property
    def effects(self) -> LiveEffects:
        if self._effects is None:
            self._effects = LiveEffects(
                self.skills,
                host_tools=self.host_tools,
                approver=self.approver,
                bwrap=self.bwrap,
                predicates=self.predicates(),
                watcher=self.watch,
                trusted_signers=self.trusted_signers,
                search_db=self.search_db,
            )
            self._effects.model = self.model  # MCP servers' sampling requests
            self._effects.elicitor = self.elicitor  # and their forms
            self._effects.on_progress = self.on_progress
        return self._effects

    def session_config(self) -> SessionStarted:
        return SessionStarted(
            agent=self.name,
            provider=self.model.provider,
            model=self.model_name,
            max_tokens=self.max_tokens,
            max_turns=self.max_turns,
            max_active_skills=self.max_active_skills,
            file_access=self.file_access,
            policy=self.policy,
            host_tools=tuple(t.definition() for t in self.host_tools),
            compact_catalog_over=self.compact_catalog_over,
            catalog_mode=self.catalog_mode,
            warnings=policy_warnings(self.policy),
            version=VERSION,
            params=dict(self.params),
            instructions_in_results=self.instructions_in_results,
            context_window=(
                self.context_window
                if self.context_window is not None
                else context_window_for(self.model_name)
            ),
            summaries=True,
            estimator=choose_estimator(self.tokenizer),
            instructions_mode=self.instructions_mode,
            context_rules=CONTEXT_RULES,
            cancel_rules=CANCEL_RULES,
        )

    def predicates(self) -> dict[str, Predicate]:
        """Every enabled predicate by skill name: the inline skills' own, then
        ``enabled`` (which wins)."""
        own = {s.name: s.enabled for s in self.skills if isinstance(s, InlineSkill) and s.enabled}
        return {**own, **self.enabled}

    async def start(
        self, store: EventStore, *, session_id: str | None = None, task: str | None = None
    ) -> Session:
        """Record a new session's start, catalog and (given) first message; returns it
        ready for a message (or, with ``task``, for :func:`drive`)."""
        if self.indexed is not None:
            await record_index_run(store, self.indexed, clock=self.clock)
        config = self.session_config()
        self.effects.forms_store = store  # forms answered from other processes
        shown, hidden = self.effects.visible_catalog(refresh_context(config))
        return await Session.create(
            store,
            config,
            list(shown.values()),
            self.effects,
            hidden=[*self.hidden, *hidden],
            session_id=session_id,
            clock=self.clock,
            observers=self.observers,
            reconcile=self.reconcile,
            task=task,
        )

    async def run(self, store: EventStore, task: str, *, session_id: str | None = None) -> Session:
        """Start a session with ``task`` as the user's message and drive it to its end
        (or until it suspends for approvals)."""
        async with self.mcp_connected():
            session = await self.start(store, session_id=session_id, task=task)
            await drive(session, self.model, self.retry, on_delta=self.on_delta)
        return session

    async def resume(self, store: EventStore, session_id: str) -> Session:
        """Reopen a session from its log and drive it to its end (or until it suspends
        for approvals that are still pending)."""
        return await self._resume(store, session_id, None)

    async def _resume(
        self, store: EventStore, session_id: str, read: Sequence[tuple[StoredEvent, Event]] | None
    ) -> Session:
        """:meth:`resume` from the session's events as ``read`` (see :meth:`Session.open`)."""
        if self.indexed is not None:
            await record_index_run(store, self.indexed, clock=self.clock)
        self.effects.forms_store = store  # forms answered from other processes
        async with self.mcp_connected():
            session = await Session.open(
                store,
                session_id,
                self.effects,
                clock=self.clock,
                observers=self.observers,
                reconcile=self.reconcile,
                read=read,
            )
            await drive(session, self.model, self.retry, on_delta=self.on_delta)
        return session

    @contextlib.asynccontextmanager
    async def mcp_connected(self) -> AsyncIterator[None]:
        """Connect the agent's MCP servers for the duration of the block (``run`` and
        ``resume`` do; a program driving a session itself with :func:`drive` does it
        around that), and stop them after. One session run at a time per agent."""
        if not self.mcp_servers:
            yield
            return
        try:
            import mcp  # noqa: F401 - the SDK, an optional extra
        except ImportError as e:
            raise AgentConfigError(
                "MCP servers need the MCP SDK: pip install 'skillog[mcp]'"
            ) from e
        from .mcp import connect_servers

        effects = self.effects
        taken = frozenset(effects.tools)
        async with connect_servers(self.mcp_servers, taken=taken) as servers:
            effects.mcp = servers
            try:
                yield
            finally:
                effects.mcp = None

    def close(self) -> None:
        if self._effects is not None:
            self._effects.close()


async def drive(
    session: Session,
    model: ModelAdapter,
    retry: RetryPolicy,
    *,
    on_delta: DeltaSink | None = None,
) -> None:
    """Run turns until the session ends or suspends. Safe to call on a session reopened
    anywhere: mid-turn, mid-call, or suspended. With ``on_delta``, a model that can
    stream streams (:class:`StreamingAdapter`)."""
    state = session.state
    assert state.config is not None
    failures = 0
    while state.status != "ended":
        if state.awaiting_tools:
            if await session.run_tools():
                return  # suspended: some calls wait for an approval
            continue
        if state.summary_pending is not None:
            # A compaction asked for a summary (maybe in a process that stopped before
            # the answer): ask the model, record the answer with the compaction it makes.
            await _summarise(session, model, retry)
            continue
        last = state.messages[-1] if state.messages else None
        if last is not None and last.role == "assistant":
            await session.end("completed")
            break
        if state.turn >= state.config.max_turns:
            await session.end("max_turns")
            break
        exceeded = over_budget(
            state.config.policy.budget,
            state.config.model,
            state.input_tokens,
            state.output_tokens,
            (session.clock() - session.started_at) // 1_000_000,
            (state.cache_read_tokens, state.cache_write_tokens),
        )
        if exceeded is not None and state.open_prompt is None:
            await session.end("budget_exceeded", f"budget_exceeded: {exceeded}")
            break
        # The provider refused the last request as too long: compact (whatever the
        # estimate says), then the same turn is rendered again. Decided from the log,
        # so a process that stopped in between does the same when resumed.
        if state.overflow_pending and not await session.compact_after_overflow():
            await session.end(
                "context_exhausted",
                f"the provider refused turn {state.turn + 1}'s request as too long for "
                "the model's context window and nothing is left to compact; give the "
                "model a larger window or keep tool results smaller",
            )
            break
        await session.refresh()
        try:
            request, _ = await session.render()
        except ContextExhaustedError as e:
            await session.end("context_exhausted", str(e))
            break
        except SummaryPending:
            continue
        outcome = await _call(session, model, request, retry, on_delta)
        if outcome is None:
            break
        if outcome == "overflow":
            continue  # compacted at the top of the loop (state.overflow_pending)
        response, duration_ms = outcome
        problem = _malformed(response)
        if problem is not None:
            failures += 1
            give_up = failures >= retry.max_attempts
            await session.record_outcome(
                ModelFailed(
                    turn=session.turn,
                    kind="malformed",
                    message=problem,
                    attempt=failures,
                    will_retry=not give_up,
                    duration_ms=duration_ms,
                )
            )
            if give_up:
                await session.end("error", f"model response malformed: {problem}")
            continue
        failures = 0
        await session.record_outcome(
            ModelResponded(turn=session.turn, response=response, duration_ms=duration_ms)
        )


async def _call(
    session: Session,
    model: ModelAdapter,
    request: ModelRequest,
    retry: RetryPolicy,
    on_delta: DeltaSink | None = None,
) -> tuple[ModelResponse, int] | Literal["overflow"] | None:
    """One model call with bounded retries; records each failure. None when it gave up
    (the session is then ended); ``overflow`` when the provider said the request does
    not fit the context window for the first time this turn (compact, render again)."""
    turn = session.turn
    if session.state.images:
        request = await with_image_data(request, session.get_blob)
    for attempt in range(1, retry.max_attempts + 1):
        start = time.monotonic_ns()
        arrived = _Arrived(on_delta)
        try:
            # No limit (an MCP client calls when it calls): no cancel scope either, half
            # of this function's CPU time per call that ``skillog mcp serve`` serves.
            timeout = retry.timeout_s
            limit = trio.fail_after(timeout) if timeout != math.inf else contextlib.nullcontext()
            with limit:
                if on_delta is not None and isinstance(model, StreamingAdapter):
                    response = await model.stream(request, arrived)
                else:
                    response = await model.complete(request)
            return response, (time.monotonic_ns() - start) // 1_000_000
        except (trio.Cancelled, KeyboardInterrupt):
            # Cancelled mid-call: record what arrived before going (shielded: the
            # cancellation must not cancel its own record); the prompt stays open.
            with trio.CancelScope(shield=True):
                await session.record(
                    arrived.event(turn, attempt, (time.monotonic_ns() - start) // 1_000_000),
                    blobs=[arrived.text.encode()] if arrived.text else [],
                )
            raise
        except (ModelError, trio.TooSlowError) as e:
            error = (
                e
                if isinstance(e, ModelError)
                else ModelError(
                    f"no answer within {retry.timeout_s:g}s", kind="timeout", retryable=True
                )
            )
            overflow = error.kind == "context_overflow"
            if overflow:
                # One more try per turn, after a compaction (the prompt is closed).
                will_retry = session.state.overflowed_turn != turn
            else:
                will_retry = error.retryable and attempt < retry.max_attempts
            await session.record_outcome(
                ModelFailed(
                    turn=turn,
                    kind=error.kind,
                    message=str(error),
                    attempt=attempt,
                    will_retry=will_retry,
                    retry_after_ms=error.retry_after_ms,
                    duration_ms=(time.monotonic_ns() - start) // 1_000_000,
                )
            )
            if overflow and will_retry:
                return "overflow"
            if overflow:
                await session.end(
                    "context_exhausted",
                    f"the provider refused turn {turn}'s request as too long again after a "
                    f"compaction: {error}",
                )
                return None
            if not will_retry:
                await session.end("error", f"model call failed: {error}")
                return None
            await trio.sleep(retry.delay_ms(attempt, error.retry_after_ms) / 1000)
    return None  # pragma: no cover - the loop always returns


class _Arrived:
    """A delta sink that passes deltas on and keeps what arrived, for the
    ``model.interrupted`` of a call cancelled mid-stream."""

    def __init__(self, sink: DeltaSink | None) -> None:
        self.sink = sink
        self.texts: dict[int, list[str]] = {}
        self.calls: dict[int, str] = {}

    def __call__(self, delta: Delta) -> None:
        if delta.kind == "text":
            self.texts.setdefault(delta.index, []).append(delta.text)
        elif delta.name:
            self.calls[delta.index] = delta.name
        if self.sink is not None:
            self.sink(delta)

    @property
    def text(self) -> str:
        return "".join("".join(self.texts[i]) for i in sorted(self.texts))

    def event(self, turn: int, attempt: int, duration_ms: int) -> ModelInterrupted:
        data = self.text.encode()
        return ModelInterrupted(
            turn=turn,
            attempt=attempt,
            text_digest=hashlib.sha256(data).hexdigest() if data else "",
            text_size=len(data),
            calls=tuple(self.calls[i] for i in sorted(self.calls)),
            duration_ms=duration_ms,
        )


async def _summarise(session: Session, model: ModelAdapter, retry: RetryPolicy) -> None:
    """The pending summary call, with the bounded retries of any model call; its
    answer, or the error it ended with, is recorded with the compaction it makes (the
    attempts in between are not: the intent stays pending until an answer is)."""
    request = session.summary_request()
    for attempt in range(1, retry.max_attempts + 1):
        start = time.monotonic_ns()
        try:
            with trio.fail_after(retry.timeout_s):
                response = await model.complete(request)
        except (ModelError, trio.TooSlowError) as e:
            error = e if isinstance(e, ModelError) else ModelError("no answer", retryable=True)
            if not error.retryable or attempt == retry.max_attempts:
                await session.record_summary(
                    None,
                    error=str(error),
                    duration_ms=(time.monotonic_ns() - start) // 1_000_000,
                )
                return
            await trio.sleep(retry.delay_ms(attempt, error.retry_after_ms) / 1000)
            continue
        await session.record_summary(
            response, duration_ms=(time.monotonic_ns() - start) // 1_000_000
        )
        return


def _malformed(response: ModelResponse) -> str | None:
    if not response.parts:
        return "the response is empty"
    if sum(len(getattr(p, "text", "")) for p in response.parts) > MAX_RESPONSE_CHARS:
        return f"the response is over {MAX_RESPONSE_CHARS} characters"
    ids = [c.id for c in response.tool_calls]
    if any(not i for i in ids) or len(set(ids)) != len(ids):
        return "tool call ids are missing or repeated"
    if any(not c.name for c in response.tool_calls):
        return "a tool call has no name"
    return None


def _bind(skill: Skill | InlineSkill, params: Mapping[str, str]) -> Skill | InlineSkill:
    """An inline template filled with the agent's values; unfilled placeholders are a
    configuration error here, not a failure in the middle of a session."""
    if not isinstance(skill, InlineSkill) or not skill.template:
        return skill
    bound = skill.bind(params)
    if bound.unbound():
        raise AgentConfigError(
            f"inline skill {skill.name!r}: the template's placeholders "
            f"{', '.join('$' + p for p in bound.unbound())} have no value; pass them in "
            "Agent(params=...) or the skill's params"
        )
    return bound
