"""One MCP client connection of ``skillog mcp serve``: one session of the log.

The session is an ordinary one, driven by ``_loop.drive`` with the client as its
model (``_client_model``): the client's calls go through the same write-ahead
pipeline, policy and events as a model's. Approvals are asked of the client's user
with MCP elicitation when the client supports it; otherwise they are refused, with
the reason recorded (nobody could be asked, and an MCP client waits for its answer,
so the session cannot suspend as a native one would).
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import trio
from mcp.server.context import ServerRequestContext

from eventlog import Event as StoredEvent
from eventlog import EventStore, SkillogError

from .._effects import ApprovalDecision, ApprovalRequest
from .._events import PolicyConfig, ToolCompleted, ToolInterrupted
from .._fleet import DRIVER_LEASE_MS, Lease, LeaseLostError, acquire, driver_name, hold, release
from .._loop import Agent, drive
from .._model import ToolCall, ToolResult, encode_canonical
from .._session import Session
from ..skills import Skill
from ._client_model import CLIENT_RETRY, ClientModel, Pending

log = logging.getLogger("skillog.mcp")

CLOSE_GRACE_S = 60.0
"""How long a closing connection waits for the calls it left running to finish."""

OUTCOMES = frozenset({ToolCompleted.event_type, ToolInterrupted.event_type})

APPROVAL_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "approve": {
            "type": "boolean",
            "title": "Approve",
            "description": "Run it (true) or refuse it (false)",
        },
        "reason": {"type": "string", "title": "Reason", "description": "Optional, recorded"},
    },
    "required": ["approve"],
}


@dataclass(frozen=True)
class ServeConfig:
    """What every session of one ``skillog mcp serve`` gets."""

    skills: tuple[Skill, ...]
    hidden: tuple[tuple[str, str], ...] = ()
    policy: PolicyConfig = field(default_factory=PolicyConfig)
    max_calls: int = 10_000
    idle_timeout_s: float = 600.0
    """Over HTTP: a session with no request for this long is ended (its client left
    without ``DELETE``), recorded as ``closed`` with the reason."""


class ServedSession:
    """The session of one client connection; :meth:`call` runs one client call."""

    def __init__(self, client: str, config: ServeConfig) -> None:
        self.model = ClientModel(client)
        self.agent = Agent(
            model=self.model,
            model_name=client,
            skills=config.skills,
            hidden=config.hidden,
            policy=config.policy,
            approver=self._approve,
            name="skillog-mcp",
            max_turns=config.max_calls,
            instructions_in_results=True,
            observers=[self._committed],
        )
        self.session: Session | None = None
        self.lease: Lease | None = None
        self._lease_scope = trio.CancelScope()
        self._lease_done = trio.Event()
        self.stopped = trio.Event()
        self._scope = trio.CancelScope()
        self._contexts: dict[str, ServerRequestContext[Any, Any]] = {}
        self._forms: dict[str, trio.CancelScope] = {}  # call id -> its open approval form
        self.lane = False
        """Whether the connection's served-call lane may take its calls (_lane.fits)."""

    async def start(self, store: EventStore, nursery: trio.Nursery) -> None:
        """Take the new session's lease, record its start and catalog; its loop runs
        in ``nursery``, under the lease, until :meth:`close`."""
        session_id = uuid.uuid4().hex
        ttl = DRIVER_LEASE_MS * 1_000_000
        self.lease = await acquire(store, session_id, driver_name("mcp"), ttl_ns=ttl)
        self._store = store
        nursery.start_soon(self._keep_lease, store, self.lease, ttl)
        self.session = await self.agent.start(store, session_id=session_id)
        # The client's reply waits for a call's outcome: a call without effect commits
        # once (intent and outcome together, after it ran), not twice.
        self.session.pure_at_once = True
        # And the context the client has after a reply (the next turn's prompt) is
        # committed with its next call, not on its own while the client calls again.
        self.session.defer_prompts = True
        self.session.woke_repliers = self.model.woke_callers
        # A reply the served-call lane can write leaves as its outcome is durable.
        self.session.when_durable = self.model.when_durable
        nursery.start_soon(self._drive)

    async def _keep_lease(self, store: EventStore, lease: Lease, ttl_ns: int) -> None:
        """Renew the lease until :meth:`close`; stop driving when it was taken over."""
        try:
            with self._lease_scope:
                async with hold(store, lease, ttl_ns):
                    await trio.sleep_forever()
        except LeaseLostError:
            log.error(
                "skillog mcp serve: session %s: lease taken over; stopped acting on it",
                lease.session,
            )
            self.lease = None
            self._scope.cancel()
        finally:
            self._lease_done.set()

    @property
    def id(self) -> str:
        assert self.session is not None
        return self.session.id

    async def call(
        self, name: str, arguments: dict[str, Any] | None, ctx: ServerRequestContext[Any, Any]
    ) -> ToolResult:
        """Record and run one call of the client; its result as the log holds it."""
        pending = Pending(self._tool_call(name, arguments))
        call = pending.call
        self._contexts[call.id] = ctx
        try:
            self.model.submit(pending)
        except trio.ClosedResourceError:
            return ToolResult(call_id=call.id, content=self._stopped_reason(), is_error=True)
        try:
            await pending.done.wait()
        finally:
            self._contexts.pop(call.id, None)
            form = self._forms.get(call.id)
            if form is not None and not pending.done.is_set():
                form.cancel()  # the client gave up on the call: withdraw its form
        assert pending.result is not None
        return pending.result

    def submit(
        self,
        name: str,
        arguments: dict[str, Any] | None,
        then: Callable[[ToolResult], None],
        when_durable: Callable[[ToolResult], Callable[[], None]] | None = None,
    ) -> None:
        """Record and run one call of the client, as :meth:`call` does, without waiting:
        ``then`` gets its result (the served-call lane: no approval, no form), and
        ``when_durable`` the result about to commit (:attr:`Pending.when_durable`)."""
        pending = Pending(self._tool_call(name, arguments), then=then, when_durable=when_durable)
        try:
            self.model.submit(pending)
        except trio.ClosedResourceError:
            pending.finish(
                ToolResult(call_id=pending.call.id, content=self._stopped_reason(), is_error=True)
            )

    def _tool_call(self, name: str, arguments: dict[str, Any] | None) -> ToolCall:
        return ToolCall(
            id=self.model.next_id(),
            name=name,
            arguments=encode_canonical(arguments or {}).decode(),
        )

    def active(self) -> tuple[tuple[str, str], ...]:
        assert self.session is not None
        return tuple((s.name, s.hash) for s in self.session.state.active)

    async def close(self, why: str | None = None) -> None:
        """The client went away: let its calls finish, then end the session (``why``:
        recorded with the end when the client did not say it was leaving)."""
        self.model.close()
        with trio.move_on_after(CLOSE_GRACE_S):
            await self.model.idle.wait()
        self._scope.cancel()
        await self.stopped.wait()
        session = self.session
        assert session is not None
        with trio.CancelScope(shield=True):
            if session.state.status != "ended":
                # The model side went away while its next turn's prompt waited for it:
                # not "completed" (no final answer was given), and not an error.
                await session.end("closed", why)
            self._lease_scope.cancel()
            await self._lease_done.wait()  # no renewal in flight when releasing
            if self.lease is not None:
                await release(self._store, self.lease, "ended", time.time_ns())
        self.agent.close()

    async def _drive(self) -> None:
        assert self.session is not None
        try:
            with self._scope:
                await drive(self.session, self.model, CLIENT_RETRY)
        except SkillogError as e:
            log.error("skillog mcp serve: session %s stopped: %s", self.id, e)
        finally:
            self.stopped.set()
            self.model.idle.set()
            # Results the loop recorded but had no next turn to hand back (the session
            # reached --max-calls), then the reason for every call still waiting.
            self.model.deliver(self.session.state.messages)
            self.model.fail_waiting(self._stopped_reason())

    def _committed(self, event: StoredEvent) -> None:
        """A call's outcome is durable: its caller may read it now, without waiting
        for the next prompt to be composed and committed."""
        if event.type in OUTCOMES and self.session is not None:
            self.model.deliver_results(self.session.state.pending_results.values())
            self.model.deliver(self.session.state.messages)

    def _stopped_reason(self) -> str:
        assert self.session is not None
        state = self.session.state
        if state.status == "ended" and state.ended is not None:
            return f"session {self.id} has ended ({state.ended.reason}); reconnect for a new one"
        return f"session {self.id} is closing; reconnect for a new one"

    async def _approve(self, request: ApprovalRequest) -> ApprovalDecision:
        """Ask the client's user (MCP elicitation), or refuse when nobody can be asked."""
        client = self.model.client
        ctx = self._contexts.get(request.call_id)
        if ctx is None:
            return ApprovalDecision(
                approved=False,
                decided_by=f"skillog mcp serve: {client} is no longer waiting for the call",
                reason="the client cancelled the call or went away before it could be asked",
            )
        capabilities = ctx.session.client_capabilities
        if (
            capabilities is None
            or capabilities.elicitation is None
            or not ctx.session.can_send_request
        ):
            return ApprovalDecision(
                approved=False,
                decided_by=f"skillog mcp serve: {client} cannot answer elicitation requests",
                reason=(
                    f"this call needs an approval ({request.tier} skill {request.skill}) and "
                    "the MCP client does not support elicitation, so nobody could be asked; "
                    "use a client that supports elicitation, or serve skills you trust at "
                    "a tier that needs none (--tier org)"
                ),
            )
        what = f"skill {request.skill} ({request.tier})" if request.skill else "a tool"
        form = self._forms[request.call_id] = trio.CancelScope()
        try:
            with form:
                result = await ctx.session.elicit_form(
                    f"skillog: allow {what} to {request.action}?",
                    APPROVAL_SCHEMA,
                    related_request_id=ctx.request_id,
                )
        except Exception as e:  # the client's answer is outside input: refuse, say why
            return ApprovalDecision(
                approved=False,
                decided_by=f"{client} (MCP elicitation failed)",
                reason=f"the elicitation request failed: {e}",
            )
        finally:
            self._forms.pop(request.call_id, None)
        if form.cancel_called:
            # The server stops waiting for the form: an answer given later finds no
            # request and runs nothing. (An answer that arrived right behind the
            # cancellation may have woken this task before the cancellation reached
            # it: the client had cancelled first, so the answer counts for nothing.)
            return ApprovalDecision(
                approved=False,
                decided_by=f"{client} (cancelled the call)",
                reason="the client cancelled the call while its approval form was open: "
                "the form was withdrawn and nothing ran",
            )
        content = result.content or {}
        given = content.get("reason")
        reason = given if isinstance(given, str) and given else None
        if result.action != "accept":
            reason = f"the user chose {result.action}"
        return ApprovalDecision(
            approved=result.action == "accept" and content.get("approve") is True,
            decided_by=f"{client} (MCP elicitation)",
            reason=reason,
        )
