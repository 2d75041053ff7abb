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

from ._events import (
    ApprovalRequested,
    ApprovalResolved,
    CatalogSnapshot,
    Event,
    ModelFailed,
    ModelResponded,
    PolicyDenied,
    PromptRendered,
    SessionEnded,
    SessionForked,
    SessionStarted,
    SkillActivated,
    SkillChanged,
    SkillDeactivated,
    SkillInfo,
    ToolCompleted,
    ToolDef,
    UserMessage,
)
from ._model import Message, TextPart, ToolCall, ToolResult
from .skills import ManifestEntry


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

    def file(self, path: str) -> ManifestEntry | None:
        return next((f for f in self.files if f.path == path), None)


Status = Literal["new", "running", "ended"]


class ActiveSkills:
    """Lookups over ``active`` (load order), shared by the session state and the view a
    tool call decides from."""

    __slots__ = ()
    active: list[ActiveSkill]

    def active_skill(self, name: str | None = None) -> ActiveSkill | None:
        """The named active skill, or the most recently loaded one when ``name`` is None."""
        if name is None:
            return self.active[-1] if self.active else None
        return next((s for s in self.active if s.name == name), None)

    @property
    def active_names(self) -> tuple[str, ...]:
        return tuple(s.name for s in self.active)


class SessionState(ActiveSkills):
    """Everything the runtime decides from: built only by :func:`apply`."""

    __slots__ = (
        "active",
        "catalog",
        "config",
        "denials",
        "ended",
        "forked_from",
        "head_hash",
        "hidden",
        "input_tokens",
        "messages",
        "output_tokens",
        "pending_approvals",
        "pending_calls",
        "pending_results",
        "prompt_count",
        "seq",
        "session_id",
        "status",
        "turn",
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
        self.pending_calls: list[ToolCall] = []
        self.pending_results: dict[str, ToolResult] = {}
        self.pending_approvals: dict[str, ApprovalRequested] = {}
        self.denials = 0
        self.input_tokens = 0
        self.output_tokens = 0
        self.status: Status = "new"
        self.ended: SessionEnded | None = None

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
        return self

    @property
    def awaiting_tools(self) -> bool:
        """True when the last model response asked for tools whose results are not in."""
        return bool(self.pending_calls)


def apply(state: SessionState, event: Event, *, seq: int, hash: str) -> SessionState:
    """Fold one event (at ``seq`` with ``hash``) into ``state``; returns ``state``."""
    state.seq = seq
    state.head_hash = hash
    match event:
        case SessionStarted():
            state.config = event
            state.status = "running"
        case SessionForked():
            state.forked_from = event
        case CatalogSnapshot():
            state.catalog = {s.name: s for s in event.skills}
            state.hidden = event.hidden
        case SkillChanged():
            if event.skill is None:
                state.catalog.pop(event.name, None)
            else:
                state.catalog[event.name] = event.skill
        case UserMessage():
            state.messages.append(Message(role="user", parts=(TextPart(text=event.text),)))
        case PromptRendered():
            state.turn = event.turn
            state.prompt_count += 1
        case ModelResponded():
            response = event.response
            state.messages.append(Message(role="assistant", parts=response.parts))
            state.pending_calls = list(response.tool_calls)
            state.pending_results = {}
            state.input_tokens += response.usage.input_tokens
            state.output_tokens += response.usage.output_tokens
        case ModelFailed():
            pass
        case SkillActivated():
            state.active = [s for s in state.active if s.name != event.name]
            state.active.append(active_from(event))
        case SkillDeactivated():
            state.active = [s for s in state.active if s.name != event.name]
        case PolicyDenied():
            state.denials += 1
        case ApprovalRequested():
            state.pending_approvals[event.call_id] = event
        case ApprovalResolved():
            state.pending_approvals.pop(event.call_id, None)
        case ToolCompleted():
            _complete(state, event)
        case SessionEnded():
            state.status = "ended"
            state.ended = event
        case _:
            pass  # audit-only events (tool.called, resource.read, ...) change no state
    return state


def fold_events(
    session_id: str, events: Iterable[tuple[Event, int, str]], state: SessionState | None = None
) -> SessionState:
    """Fold ``(body, seq, hash)`` triples into a new (or the given) state."""
    state = state if state is not None else SessionState(session_id)
    for body, seq, hash_ in events:
        apply(state, body, seq=seq, hash=hash_)
    return state


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
    )


def _complete(state: SessionState, event: ToolCompleted) -> None:
    """Collect a tool result; once every pending call has one, the results join the
    history as one ``tool`` message in the order the model made the calls."""
    if not any(c.id == event.call_id for c in state.pending_calls):
        return
    state.pending_results[event.call_id] = ToolResult(
        call_id=event.call_id, content=event.content, is_error=event.is_error
    )
    if len(state.pending_results) == len(state.pending_calls):
        parts = tuple(state.pending_results[c.id] for c in state.pending_calls)
        state.messages.append(Message(role="tool", parts=parts))
        state.pending_calls = []
        state.pending_results = {}
