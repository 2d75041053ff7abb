"""What one tool call works with: its view of the session, what the log already holds
for it, where its events go, and the error a call reports to the model.

A :class:`CallContext` is handed down the pipeline (``_pipeline``). Events that must
be durable before the next step (the intent, an approval request, a script start) go
through :meth:`CallContext.commit`; the events of the outcome are staged in ``rec`` and
committed together with ``tool.completed``.
"""

from __future__ import annotations

import hashlib
from collections.abc import Awaitable, Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from eventlog import NewEvent, SkillogError

from ._effects import Effects, GetBlob
from ._events import (
    CODEC,
    ApprovalRemembered,
    ApprovalRequested,
    ApprovalResolved,
    Event,
    McpElicited,
    McpTaskCreated,
    McpToolDef,
    ScriptStarted,
    SessionStarted,
    SkillInfo,
    ToolCalled,
)
from ._model import ToolCall
from ._state import ActiveSkill, ActiveSkills, SessionState


class ToolError(SkillogError):
    """A tool call failed in a way the model should read and act on."""

    def __init__(self, message: str, *, error_type: str = "tool_error") -> None:
        super().__init__(message)
        self.error_type = error_type


@dataclass
class View(ActiveSkills):
    """What a tool call decides from: the session's configuration, catalog and active
    skills as they stand at the call's position in the turn. Calls that change them
    (load, unload) run in order; every other call gets its own copy, so concurrent
    calls cannot see each other and the recorded events do not depend on timing.
    ``grants`` are the remembered grants recorded before the turn's calls were taken up
    (a grant given during a turn applies from the next one: same log, same plans)."""

    config: SessionStarted
    catalog: dict[str, SkillInfo]
    active: list[ActiveSkill]
    grants: tuple[ApprovalRemembered, ...] = ()
    mcp: dict[str, McpToolDef] = field(default_factory=dict)
    """The MCP tools on offer, by session name (they change only between turns)."""

    @classmethod
    def of(cls, state: SessionState) -> View:
        assert state.config is not None
        return cls(
            state.config,
            dict(state.catalog),
            list(state.active),
            tuple(state.grants),
            state.mcp_tools,
        )

    def copy(self) -> View:
        return View(self.config, dict(self.catalog), list(self.active), self.grants, self.mcp)


@dataclass(frozen=True)
class Recorded:
    """What the log held for a call when this process took it up (all None for a call
    it has never seen). ``fresh``: the intent was committed by this process (with the
    model response) and nothing has acted on it yet. ``decided_while_suspended`` marks
    an approval recorded by another process while the session was suspended: no
    process acted on it yet. ``task``: the MCP task an earlier process created for
    the call. ``forms``: its server's forms an earlier process recorded and nobody
    answered before it stopped."""

    called: ToolCalled | None = None
    fresh: bool = False
    requested: ApprovalRequested | None = None
    decision: ApprovalResolved | None = None
    decided_while_suspended: bool = False
    started: ScriptStarted | None = None
    install: tuple[str, ...] | None = None  # a recorded request's lazy install (None: none)
    task: McpTaskCreated | None = None
    forms: tuple[McpElicited, ...] = ()  # forms asked by an earlier run, not answered


@dataclass
class Recorder:
    """Collects the events (with their bodies) and blobs of a call's outcome, stamped
    with the clock as they happen."""

    clock: Callable[[], int]
    bodies: list[Event] = field(default_factory=list)
    events: list[NewEvent] = field(default_factory=list)
    blobs: dict[str, bytes] = field(default_factory=dict)

    def add(self, body: Event) -> None:
        self.bodies.append(body)
        self.events.append(CODEC.encode(body, recorded_at=self.clock()))

    def blob(self, data: bytes) -> str:
        digest = hashlib.sha256(data).hexdigest()
        self.blobs[digest] = data
        return digest

    def take(self) -> Recorder:
        """Everything staged so far, leaving this recorder empty."""
        taken = Recorder(self.clock, self.bodies, self.events, self.blobs)
        self.bodies, self.events, self.blobs = [], [], {}
        return taken


class Commit(Protocol):
    """Durably append a recorder's events; ``alone``: no other call of the session can
    be appending at the same time, so there is nothing to wait for to share the
    transaction with."""

    def __call__(self, rec: Recorder, *, alone: bool = False) -> Awaitable[None]: ...


class DecidedElsewhere(Protocol):
    """The decision on ``call_id`` another process (``skillog approve``, the service)
    recorded in the session's stream, taken into the session's state; with ``wait``,
    looked for until there is one (cancel to stop), else None when there is none yet."""

    def __call__(
        self, call_id: str, *, wait: bool = True
    ) -> Awaitable[ApprovalResolved | None]: ...


@dataclass
class CallContext:
    session_id: str
    turn: int
    call: ToolCall
    view: View
    rec: Recorder
    effects: Effects
    get_blob: GetBlob
    commit_recorder: Commit
    recorded: Recorded = field(default_factory=Recorded)
    alone: bool = False
    """The only call of its turn running (the pipeline runs it in its own task)."""
    decided_elsewhere: DecidedElsewhere | None = None
    """The decision on a call recorded by another process while this one asked."""

    async def commit(self, bodies: Sequence[Event] = (), blobs: Iterable[bytes] = ()) -> None:
        """Durably append what ``rec`` staged, then ``bodies`` (with their blobs)."""
        for body in bodies:
            self.rec.add(body)
        for data in blobs:
            self.rec.blob(data)
        await self.commit_recorder(self.rec.take(), alone=self.alone)


def idempotency_key(session_id: str, call_id: str) -> str:
    """The key an idempotent tool gets for a call: the same for every run of that call,
    in any process, and different for every other call."""
    digest = hashlib.sha256(f"{session_id}\x00{call_id}".encode()).hexdigest()
    return f"skillog-{digest[:32]}"
