"""Session state as a fold over the session's events.

``apply(state, event)`` is deterministic and does no I/O: the same events give the same
state on any machine. It updates the state in place and returns it, so keeping the
state current costs O(1) per event however long the session grows; take a ``copy()``
before applying when an earlier state must be kept.
"""

from __future__ import annotations

import copy
from collections.abc import Iterable
from typing import Literal

import msgspec

from eventlog import GENESIS_HASH

from ._context import apply_compaction
from ._events import (
    ApprovalRemembered,
    ApprovalRequested,
    ApprovalResolved,
    CatalogSnapshot,
    ContextCompacted,
    Event,
    McpElicitationAnswered,
    McpElicited,
    McpRoot,
    McpRootsChanged,
    McpSampleAnswered,
    McpServerFailed,
    McpTaskCreated,
    McpToolDef,
    McpToolsListed,
    ModelFailed,
    ModelInterrupted,
    ModelResponded,
    PolicyDenied,
    PromptRendered,
    ResourceRead,
    ScriptStarted,
    SessionEnded,
    SessionForked,
    SessionStarted,
    SessionSuspended,
    SkillActivated,
    SkillChanged,
    SkillDeactivated,
    SkillInfo,
    SummaryAnswered,
    SummaryRequested,
    ToolCalled,
    ToolCompleted,
    ToolDef,
    ToolImages,
    ToolInterrupted,
    UserMessage,
)
from ._model import Message, Part, TextPart, ToolCall, ToolImage, ToolResult
from .skills import ManifestEntry, SkillProperties


class ActiveSkill(msgspec.Struct, frozen=True, kw_only=True):
    """A loaded skill, pinned to the hash and files it was loaded with."""

    name: str
    hash: str
    tier: str
    source: str
    body_digest: str
    files: tuple[ManifestEntry, ...]
    allowed_tools: str | None
    tools: tuple[ToolDef, ...]
    version: str | None = None
    properties: SkillProperties | None = None
    signed_by: str | None = None

    def file(self, path: str) -> ManifestEntry | None:
        return next((f for f in self.files if f.path == path), None)


Status = Literal["new", "running", "awaiting_approval", "resumable", "ended"]
"""``awaiting_approval``: suspended until pending approvals are decided (from any
process); ``resumable``: suspended, every approval now decided, ready to resume."""

ViewChange = SkillActivated | SkillDeactivated | SkillChanged
"""The events by which a call changes the active skills or catalog later calls see."""


class TurnProgress:
    """Where the tool phase of the current turn stands, for each call of the last model
    response: what the log already holds (intent, decision, started script, view
    changes). Resume continues each call from here; nothing here is ever guessed."""

    __slots__ = (
        "approvals",
        "base_active",
        "base_catalog",
        "base_grants",
        "called",
        "changes",
        "decided_while_suspended",
        "forms",
        "installs",
        "started",
        "tasks",
    )

    def __init__(
        self,
        catalog: dict[str, SkillInfo],
        active: list[ActiveSkill],
        grants: Iterable[ApprovalRemembered] = (),
    ) -> None:
        self.base_catalog = dict(catalog)
        self.base_active = list(active)
        self.base_grants = tuple(grants)
        self.called: dict[str, ToolCalled] = {}
        self.approvals: dict[str, ApprovalResolved] = {}
        self.decided_while_suspended: set[str] = set()
        self.started: dict[str, ScriptStarted] = {}
        self.tasks: dict[str, McpTaskCreated] = {}
        # The MCP forms asked and not answered yet, by (call, index): a process that
        # died while one waited leaves it here, and the call run again asks it again.
        self.forms: dict[tuple[str, int], McpElicited] = {}
        self.changes: dict[str, list[ViewChange]] = {}
        # What each recorded approval request said a lazy install would install.
        self.installs: dict[str, tuple[str, ...]] = {}

    def copy(self) -> TurnProgress:
        other = copy.copy(self)
        other.called = dict(self.called)
        other.approvals = dict(self.approvals)
        other.decided_while_suspended = set(self.decided_while_suspended)
        other.started = dict(self.started)
        other.installs = dict(self.installs)
        other.tasks = dict(self.tasks)
        other.forms = dict(self.forms)
        other.changes = {k: list(v) for k, v in self.changes.items()}
        return other


class ActiveSkills:
    """Lookups over ``active`` (load order), shared by the session state and the view a
    tool call decides from."""

    __slots__ = ()
    active: list[ActiveSkill]
    catalog: dict[str, SkillInfo]

    def active_skill(self, name: str | None = None) -> ActiveSkill | None:
        """The named active skill, or the most recently loaded one when ``name`` is None."""
        if name is None:
            return self.active[-1] if self.active else None
        return next((s for s in self.active if s.name == name), None)

    @property
    def active_names(self) -> tuple[str, ...]:
        return tuple(s.name for s in self.active)

    def change_skills(self, event: SkillActivated | SkillDeactivated | SkillChanged) -> None:
        """Apply an activation, a deactivation or a catalog change (the session's fold
        and a tool call's view share this)."""
        match event:
            case SkillActivated():
                self.active[:] = [s for s in self.active if s.name != event.name]
                self.active.append(active_from(event))
            case SkillDeactivated():
                self.active[:] = [s for s in self.active if s.name != event.name]
            case SkillChanged():
                if event.skill is None:
                    self.catalog.pop(event.name, None)
                else:
                    self.catalog[event.name] = event.skill


class SessionState(ActiveSkills):
    """Everything the runtime decides from: built only by :func:`apply`."""

    __slots__ = (
        "active",
        "cache_read_tokens",
        "cache_write_tokens",
        "catalog",
        "cleared",
        "config",
        "denials",
        "ended",
        "forked_from",
        "grants",
        "head_hash",
        "hidden",
        "history_rewrites",
        "images",
        "input_tokens",
        "mcp_roots",
        "mcp_servers",
        "mcp_tools",
        "messages",
        "model_attempts",
        "open_prompt",
        "open_prompt_interrupted",
        "output_tokens",
        "overflow_pending",
        "overflowed_turn",
        "pending_approvals",
        "pending_calls",
        "pending_images",
        "pending_results",
        "prompt_count",
        "prompt_inputs",
        "seq",
        "session_id",
        "status",
        "summary_pending",
        "summary_tokens",
        "turn",
        "turn_progress",
        "usage_bodies",
        "usage_messages",
        "usage_tokens",
    )

    def __init__(self, session_id: str) -> None:
        self.session_id = session_id
        self.seq = -1
        self.head_hash = GENESIS_HASH
        self.config: SessionStarted | None = None
        self.forked_from: SessionForked | None = None
        self.catalog: dict[str, SkillInfo] = {}
        self.hidden: tuple[tuple[str, str], ...] = ()
        self.active: list[ActiveSkill] = []
        self.messages: list[Message] = []
        self.turn = 0
        self.prompt_count = 0
        # Moves on with every event that may change what the system prompt and the
        # tools are made of (all but PROMPT_NEUTRAL): a prompt's prefix kept from an
        # earlier turn is the same while it stays.
        self.prompt_inputs = 0
        self.pending_calls: list[ToolCall] = []
        self.pending_results: dict[str, ToolResult] = {}
        self.pending_images: dict[str, tuple[ToolImage, ...]] = {}
        # Whether any call returned images (their bytes are filled in before a model
        # call): without, a request is sent as composed, with no pass over its history.
        self.images = False
        self.pending_approvals: dict[str, ApprovalRequested] = {}
        self.grants: list[ApprovalRemembered] = []
        self.denials = 0
        self.input_tokens = 0
        self.output_tokens = 0
        self.cache_read_tokens = 0  # of the input tokens, read from the prompt cache
        self.cache_write_tokens = 0  # and written to it
        self.status: Status = "new"
        self.ended: SessionEnded | None = None
        self.open_prompt: PromptRendered | None = None
        # The open prompt's call was cancelled and model.interrupted says so: a process
        # that resumes retries it without recording the interruption again.
        self.open_prompt_interrupted = False
        self.model_attempts = 0
        self.turn_progress: TurnProgress | None = None
        # What each MCP server last offered (or that it failed), and its tools by the
        # session's names, in server-name then server order.
        self.mcp_servers: dict[str, McpToolsListed | McpServerFailed] = {}
        self.mcp_tools: dict[str, McpToolDef] = {}
        self.mcp_roots: dict[str, tuple[McpRoot, ...]] = {}  # what each server is told
        # The context budget (``_context``): the (message index, call id) of the
        # results a compaction replaced, how many compactions rewrote the history, the
        # turn whose request the provider last refused as too long, and the anchor of
        # the next estimate (the last answer's usage, history length and skill bodies).
        self.cleared: set[tuple[int, str]] = set()
        self.history_rewrites = 0
        self.overflowed_turn = 0
        self.overflow_pending = False  # refused as too long, not compacted for yet
        self.usage_tokens = 0
        self.usage_messages = 0
        self.usage_bodies: frozenset[str] = frozenset()
        # A summary call asked for and not answered yet, and the tokens (input plus
        # output) the session's summary calls used (policy.context.summary_budget_tokens).
        self.summary_pending: SummaryRequested | None = None
        self.summary_tokens = 0

    def copy(self) -> SessionState:
        """An independent copy (the lists and dicts are copied, the values are frozen)."""
        return copy.copy(self)._own_containers()

    def _own_containers(self) -> SessionState:
        self.catalog = dict(self.catalog)
        self.active = list(self.active)
        self.messages = list(self.messages)
        self.pending_calls = list(self.pending_calls)
        self.pending_results = dict(self.pending_results)
        self.pending_approvals = dict(self.pending_approvals)
        self.grants = list(self.grants)
        self.mcp_servers = dict(self.mcp_servers)
        self.mcp_tools = dict(self.mcp_tools)
        self.mcp_roots = dict(self.mcp_roots)
        self.cleared = set(self.cleared)
        if self.turn_progress is not None:
            self.turn_progress = self.turn_progress.copy()
        return self

    @property
    def awaiting_tools(self) -> bool:
        """True when the last model response asked for tools whose results are not in."""
        return bool(self.pending_calls)


PROMPT_NEUTRAL = frozenset(
    {PolicyDenied, PromptRendered, ModelFailed, ModelResponded, ToolCalled, ToolCompleted,
     UserMessage, ResourceRead}
)  # fmt: skip
"""Events that change neither the catalog, the active skills, the configuration nor the
MCP servers' tools: the system prompt and the tools stay as they were (in instructions
mode ``results`` the system prompt also depends on the history, and is not kept)."""


def apply(state: SessionState, event: Event, *, seq: int, hash: str) -> SessionState:
    """Fold one event (at ``seq`` with ``hash``) into ``state``; returns ``state``."""
    state.seq = seq
    state.head_hash = hash
    if type(event) not in PROMPT_NEUTRAL:
        state.prompt_inputs += 1
    suspended = state.status in ("awaiting_approval", "resumable")
    if suspended and not isinstance(
        event, ApprovalResolved | ApprovalRemembered | SessionSuspended
    ):
        state.status = "running"  # resumed
    progress = state.turn_progress
    call_id = getattr(event, "call_id", None)
    if progress is not None and call_id is not None:
        _progress(progress, event, call_id, suspended=suspended)
    match event:
        case SessionStarted():
            state.config = event
            state.status = "running"
        case SessionForked():
            state.forked_from = event
        case CatalogSnapshot():
            state.catalog = {s.name: s for s in event.skills}
            state.hidden = event.hidden
        case SkillActivated() | SkillDeactivated() | SkillChanged():
            state.change_skills(event)
        case UserMessage():
            state.messages.append(Message(role="user", parts=(TextPart(text=event.text),)))
        case PromptRendered():
            state.open_prompt_interrupted = False
            state.overflow_pending = False
            state.turn = event.turn
            state.prompt_count += 1
            state.open_prompt = event
            state.model_attempts = 0
        case ModelResponded():
            response = event.response
            state.messages.append(Message(role="assistant", parts=response.parts))
            state.pending_calls = list(response.tool_calls)
            state.pending_results = {}
            state.input_tokens += response.usage.input_tokens
            state.output_tokens += response.usage.output_tokens
            state.cache_read_tokens += response.usage.cache_read_input_tokens
            state.cache_write_tokens += response.usage.cache_creation_input_tokens
            state.usage_tokens = response.usage.input_tokens + response.usage.output_tokens
            state.usage_messages = len(state.messages)
            state.usage_bodies = frozenset(s.body_digest for s in state.active)
            state.open_prompt = None
            state.turn_progress = (
                TurnProgress(state.catalog, state.active, state.grants)
                if state.pending_calls
                else None
            )
        case McpSampleAnswered() if event.response is not None:
            # An MCP server's sampling request answered by the session's model: its
            # tokens count towards the budget (not towards the history's size).
            usage = event.response.usage
            state.input_tokens += usage.input_tokens
            state.output_tokens += usage.output_tokens
            state.cache_read_tokens += usage.cache_read_input_tokens
            state.cache_write_tokens += usage.cache_creation_input_tokens
        case ModelFailed() if event.kind == "context_overflow":
            # The request did not fit: it is closed, and the same turn is rendered
            # again after a compaction (or the session ends).
            state.overflowed_turn = event.turn
            state.overflow_pending = event.will_retry
            state.turn = event.turn - 1
            state.open_prompt = None
            state.usage_tokens = 0
        case ModelFailed():
            state.model_attempts = event.attempt
            state.open_prompt_interrupted = False
        case ModelInterrupted():
            state.model_attempts = event.attempt
            state.open_prompt_interrupted = True
        case ContextCompacted():
            state.messages, state.cleared = apply_compaction(state.messages, state.cleared, event)
            state.history_rewrites += 1
            state.overflow_pending = False
            state.usage_tokens = 0  # the provider's count no longer describes the history
        case SummaryRequested():
            state.summary_pending = event
        case SummaryAnswered():
            state.summary_pending = None
            if event.response is not None:
                usage = event.response.usage
                state.input_tokens += usage.input_tokens
                state.output_tokens += usage.output_tokens
                state.cache_read_tokens += usage.cache_read_input_tokens
                state.cache_write_tokens += usage.cache_creation_input_tokens
                state.summary_tokens += usage.input_tokens + usage.output_tokens
        case PolicyDenied():
            state.denials += 1
        case ApprovalRequested():
            state.pending_approvals[event.call_id] = event
        case ApprovalResolved():
            state.pending_approvals.pop(event.call_id, None)
            if state.status == "awaiting_approval" and not state.pending_approvals:
                state.status = "resumable"
        case ApprovalRemembered():
            state.grants.append(event)
        case ToolImages():
            state.images = True
            state.pending_images[event.call_id] = tuple(
                ToolImage(call_id=event.call_id, media_type=i.media_type, digest=i.digest)
                for i in event.images
            )
        case ToolCompleted():
            _complete(state, event.call_id, event.content, event.is_error)
        case ToolInterrupted():
            _complete(state, event.call_id, event.content, True)
        case McpToolsListed() | McpServerFailed():
            state.mcp_servers[event.server] = event
            state.mcp_tools = mcp_tools(state.mcp_servers)
        case McpRootsChanged():
            state.mcp_roots[event.server] = event.roots
        case SessionSuspended():
            state.status = "awaiting_approval" if state.pending_approvals else "resumable"
        case SessionEnded():
            state.status = "ended"
            state.ended = event
            state.open_prompt = None
        case _:
            pass  # audit-only events (resource.read, script.executed, ...) change no state
    return state


def fold_events(
    session_id: str, events: Iterable[tuple[Event, int, str]], state: SessionState | None = None
) -> SessionState:
    """Fold ``(body, seq, hash)`` triples into a new (or the given) state."""
    state = state if state is not None else SessionState(session_id)
    for body, seq, hash_ in events:
        apply(state, body, seq=seq, hash=hash_)
    return state


def mcp_tools(servers: dict[str, McpToolsListed | McpServerFailed]) -> dict[str, McpToolDef]:
    """The MCP tools on offer, by session name: each listed server's, servers by name."""
    return {
        tool.name: tool
        for server in sorted(servers)
        if isinstance(listing := servers[server], McpToolsListed)
        for tool in listing.tools
    }


def active_from(event: SkillActivated) -> ActiveSkill:
    """The active-skill record a ``skill.activated`` event pins."""
    return ActiveSkill(
        name=event.name,
        hash=event.hash,
        tier=event.tier,
        source=event.source,
        body_digest=event.body_digest,
        files=event.files,
        allowed_tools=event.allowed_tools,
        tools=event.tools,
        version=event.version,
        properties=event.properties,
        signed_by=event.signed_by,
    )


def _progress(progress: TurnProgress, event: Event, call_id: str, *, suspended: bool) -> None:
    match event:
        case ToolCalled():
            progress.called[call_id] = event
        case ApprovalRequested():
            progress.installs[call_id] = event.install
        case ApprovalResolved():
            progress.approvals[call_id] = event
            if suspended:
                progress.decided_while_suspended.add(call_id)
        case ScriptStarted():
            progress.started[call_id] = event
        case McpTaskCreated():
            progress.tasks[call_id] = event
        case McpElicited() if event.valid:
            progress.forms[call_id, event.index] = event
        case McpElicitationAnswered():
            progress.forms.pop((call_id, event.index), None)
        case ToolCompleted() | ToolInterrupted() if progress.forms:
            for key in [k for k in progress.forms if k[0] == call_id]:
                del progress.forms[key]
        case SkillActivated() | SkillDeactivated() | SkillChanged():
            progress.changes.setdefault(call_id, []).append(event)
        case _:
            pass


def _complete(state: SessionState, call_id: str, content: str, is_error: bool) -> None:
    """Collect a tool result; once every pending call has one, the results join the
    history as one ``tool`` message in the order the model made the calls (whatever
    order they finished in), each followed by the images it returned."""
    if not any(c.id == call_id for c in state.pending_calls):
        return
    state.pending_results[call_id] = ToolResult(call_id=call_id, content=content, is_error=is_error)
    if len(state.pending_results) == len(state.pending_calls):
        parts: list[Part] = []
        for c in state.pending_calls:
            parts += [state.pending_results[c.id], *state.pending_images.get(c.id, ())]
        state.messages.append(Message(role="tool", parts=tuple(parts)))
        state.pending_calls = []
        state.pending_results = {}
        state.pending_images = {}
        state.turn_progress = None
