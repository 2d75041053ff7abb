"""The model side of a ``skillog mcp serve`` session: the MCP client.

An MCP client decides which tools to call, as a model does in a native session. So
each connection's session is driven by the ordinary agent loop (``_loop.drive``)
with :class:`ClientModel` as its model adapter: a model call waits for the client's
next ``tools/call`` and answers with it as a tool call, the write-ahead pipeline runs
it, and its result goes back to the client as soon as its outcome is committed (the
next request the loop composes carries it too). The log therefore holds, per call,
the context the client had (``prompt.rendered``), what it sent (``model.responded``)
and what it received (``tool.completed``, the same text), and replay proves it like
any session.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field

import trio

from .._events import Event, ToolCompleted
from .._loop import RetryPolicy
from .._model import Message, ModelError, ModelRequest, ModelResponse, ToolCall, ToolResult

MAX_RECORDED_ARGUMENT_BYTES = 1 << 20
"""A call whose arguments are larger is refused before it is recorded as a call (it
is recorded as ``model.failed``): the runtime's tools take at most 64 KiB anyway."""

CLIENT_RETRY = RetryPolicy(max_attempts=2**31, base_ms=0, max_ms=0, timeout_s=math.inf)
"""The loop's retry policy for a client: wait as long as the client takes to call, and
go on after a refused call at once, however many there are."""


@dataclass
class Pending:
    """A client's call on its way: the tool call to record and where its result goes."""

    call: ToolCall
    done: trio.Event = field(default_factory=trio.Event)
    result: ToolResult | None = None
    then: Callable[[ToolResult], None] | None = None
    """Called with the result as it is set (the served-call lane writes its reply)."""
    when_durable: Callable[[ToolResult], Callable[[], None]] | None = None
    """Given the result a transaction is about to commit: what to run in the store's
    writer thread once it is durable (the lane writes its reply there, if it can)."""

    def finish(self, result: ToolResult) -> bool:
        """Set the result; whether it woke a task waiting for it."""
        self.result = result
        woke = self.done.statistics().tasks_waiting > 0
        self.done.set()
        if self.then is not None:
            self.then(result)
        return woke


class ClientModel:
    """A :class:`ModelAdapter` whose answers are the client's calls, in arrival order.

    Calls that arrive together are answered as one response, so the pipeline runs
    them concurrently as it would a model's parallel calls. ``complete`` first hands
    each finished call its result from the request (the composed history holds it).
    """

    provider = "mcp"

    def __init__(self, client: str) -> None:
        self.client = client
        self._send, self._receive = trio.open_memory_channel[Pending](math.inf)
        self._waiting: dict[str, Pending] = {}
        self._held: list[Pending] = []
        self._seen = 0
        self._count = 0
        self._woke = False
        self.idle = trio.Event()
        """Set once the client has gone and every call it made has its result."""

    def next_id(self) -> str:
        self._count += 1
        return f"mcp-{self._count}"

    def submit(self, pending: Pending) -> None:
        self._send.send_nowait(pending)

    def close(self) -> None:
        """The client went away: no more calls come."""
        self._send.close()

    def fail_waiting(self, reason: str) -> None:
        """The session stopped: every call still waiting reads ``reason``."""
        self.close()
        for pending in [*self._waiting.values(), *self._held, *_drain(self._receive)]:
            pending.finish(ToolResult(call_id=pending.call.id, content=reason, is_error=True))
        self._waiting.clear()
        self._held = []

    async def complete(self, request: ModelRequest) -> ModelResponse:
        self.deliver(request.messages)
        batch, self._held = self._held, []
        if not batch:
            try:
                batch.append(await self._receive.receive())
            except trio.EndOfChannel:
                self.idle.set()
                await trio.sleep_forever()
        batch += _drain(self._receive)
        oversized = [
            p for p in batch if len(p.call.arguments.encode()) > MAX_RECORDED_ARGUMENT_BYTES
        ]
        if oversized:
            # Refused before they are recorded as calls; the others go next.
            for pending in oversized:
                pending.finish(_oversized(pending.call))
            self._held = [p for p in batch if p not in oversized]
            raise ModelError(_oversized(oversized[0].call).content, kind="other", retryable=True)
        for pending in batch:
            self._waiting[pending.call.id] = pending
        return ModelResponse(
            parts=tuple(p.call for p in batch), stop_reason="tool_use", model=self.client
        )

    def when_durable(self, bodies: Sequence[Event]) -> Callable[[], None] | None:
        """What the waiting calls whose outcomes ``bodies`` are about to commit run
        once they are durable (``Session.when_durable``): each gets the result the
        state will hold for it (``_state._complete``)."""
        runs = [
            pending.when_durable(
                ToolResult(call_id=body.call_id, content=body.content, is_error=body.is_error)
            )
            for body in bodies
            if isinstance(body, ToolCompleted)
            and (pending := self._waiting.get(body.call_id)) is not None
            and pending.when_durable is not None
        ]
        if not runs:
            return None

        def run_all() -> None:
            for run in runs:
                run()

        return run_all

    def deliver(self, messages: Sequence[Message]) -> None:
        """Hand each waiting call its result from the session's history."""
        for message in messages[self._seen :]:
            self.deliver_results(p for p in message.parts if isinstance(p, ToolResult))
        self._seen = len(messages)

    def deliver_results(self, results: Iterable[ToolResult]) -> None:
        """Hand each waiting call among ``results`` its result (committed: the log
        holds it before the client reads it)."""
        for result in results:
            pending = self._waiting.pop(result.call_id, None)
            if pending is not None and pending.finish(result):
                self._woke = True

    def woke_callers(self) -> bool:
        """Whether a result handed out since the last ask woke a task waiting for it
        (the SDK's handler of the call, which writes its reply)."""
        woke, self._woke = self._woke, False
        return woke


def _drain(receive: trio.MemoryReceiveChannel[Pending]) -> list[Pending]:
    out = []
    while True:
        try:
            out.append(receive.receive_nowait())
        except (trio.WouldBlock, trio.EndOfChannel, trio.ClosedResourceError):
            return out


def _oversized(call: ToolCall) -> ToolResult:
    size = len(call.arguments)
    return ToolResult(
        call_id=call.id,
        content=(
            f"the arguments of this {call.name} call are {size} bytes of JSON; skillog records "
            f"at most {MAX_RECORDED_ARGUMENT_BYTES} and its tools take at most 65536: send "
            "smaller arguments (a skill's files are read with skills.read, not passed in)"
        ),
        is_error=True,
    )
