"""The served-call lane of ``skillog mcp serve`` on a stdio connection.

The SDK serves a ``tools/call`` with a task of its own, pydantic validation of the
message and again of its params, its middleware and the result's serialization and
sieve: about 40% of the trio thread per served call, and two of its scheduler passes
(the request's task, the reply). The lane takes the calls it can serve exactly as the
SDK would straight from the wire: the line is parsed once (msgspec), the call is
handed to the session's loop (``ServedSession.submit``) and its result is encoded
once, before the commit that holds it, and written by the store's writer thread the
moment that commit is durable (:class:`_Answer`), with no task per call and no wait
for the loop to be scheduled again.

What it takes, only: ``tools/call`` of ``skills.read`` (a call no policy asks
approval for, that sends no progress and no elicitation), after the connection's
session started, at a protocol revision whose result shape it writes, with no
middleware but the SDK's OpenTelemetry span and no tracer provider configured; and
``notifications/cancelled`` of a call it took (the reply is then never written, as
the SDK drops a cancelled request's). Everything else, and every message it does not
recognise in full, is left to the SDK, and so is all of it when an SDK release lacks
what the lane checks (:func:`fits`). ``SKILLOG_MCP_LANE=off`` turns it off (to compare
with the SDK's path). The events recorded are the same either way: the lane submits
the call the SDK's handler would.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import msgspec

from .._model import ToolResult

if TYPE_CHECKING:
    from ._server import SkillogMcp
    from ._stdio import LineWriter

LANE_TOOLS = frozenset({"skills.read"})
"""The tools the lane serves: never asked approval for (``_policy.decide``), no
progress, no elicitation, and the tool and resource lists stay as they are."""
PROTOCOLS = frozenset({"2024-11-05", "2025-03-26", "2025-06-18", "2025-11-25"})
"""The protocol revisions whose ``tools/call`` result the lane writes as the SDK does
(tests/orchestrator/test_mcp_serve_lane.py compares them); others take the SDK."""
PARAMS = frozenset({"name", "arguments", "_meta"})

RequestId = int | str


class _Message(msgspec.Struct):
    jsonrpc: str
    method: str
    id: RequestId | msgspec.UnsetType = msgspec.UNSET
    params: dict[str, Any] | None = None


class _Reply(msgspec.Struct):
    jsonrpc: str
    id: RequestId
    result: dict[str, Any]


_decode = msgspec.json.Decoder(_Message).decode
_encode = msgspec.json.Encoder().encode


def fits(app: SkillogMcp, protocol: str | None) -> bool:
    """Whether the lane may serve calls for ``app`` at ``protocol`` (checked once per
    connection, when its session starts)."""
    if os.environ.get("SKILLOG_MCP_LANE", "").lower() in {"off", "0", "no"}:
        return False
    if protocol not in PROTOCOLS:
        return False
    middleware = getattr(app.server, "middleware", None)
    if not isinstance(middleware, list) or any(
        type(m).__name__ != "OpenTelemetryMiddleware" for m in middleware
    ):
        return False  # someone's middleware must see every request
    try:
        from opentelemetry import trace
    except ImportError:
        return True
    # The SDK's span per request is a no-op unless a tracer provider is configured.
    return isinstance(trace.get_tracer_provider(), trace.ProxyTracerProvider)


def _taken_params(params: dict[str, Any] | None) -> tuple[str, dict[str, Any] | None] | None:
    """The call's tool and arguments when the lane serves it, else None."""
    if params is None or not PARAMS.issuperset(params):
        return None
    name = params.get("name")
    arguments = params.get("arguments")
    if name not in LANE_TOOLS or not (arguments is None or isinstance(arguments, dict)):
        return None
    meta = params.get("_meta")
    if meta is not None and not (
        isinstance(meta, dict)
        and set(meta) <= {"progressToken"}
        and all(isinstance(v, str | int) and not isinstance(v, bool) for v in meta.values())
    ):
        return None
    assert isinstance(name, str)
    return name, arguments


def result_body(result: ToolResult) -> dict[str, Any]:
    """The ``tools/call`` result the SDK writes for ``result`` (its keys in the SDK's
    order: the sieve of its serialization puts a content block's ``text`` first)."""
    return {"content": [{"text": result.content, "type": "text"}], "isError": result.is_error}


class Lane:
    """The lane of one stdio connection: :meth:`take` is offered each line read."""

    def __init__(self, app: SkillogMcp, writer: LineWriter, key: str) -> None:
        self._app = app
        self.writer = writer
        self._key = key
        self._open: set[RequestId] = set()  # the calls taken and not yet answered
        self._closed = False

    def take(self, line: bytes) -> bool:
        """Serve ``line`` when it is a message the lane takes (True); else the SDK
        gets it (False)."""
        if self._closed or not (b"tools/call" in line or b"notifications/cancelled" in line):
            return False
        served = self._app.sessions.get(self._key)
        if served is None or not served.lane:
            return False  # not started yet (its first request starts it), or no fit
        try:
            message = _decode(line)
        except (msgspec.DecodeError, msgspec.ValidationError):
            return False
        if message.jsonrpc != "2.0":
            return False
        if message.method == "notifications/cancelled":
            return self._cancel(message)
        request_id = message.id
        if message.method != "tools/call" or isinstance(request_id, msgspec.UnsetType):
            return False
        call = _taken_params(message.params)
        if call is None or request_id in self._open:
            return False
        self._open.add(request_id)
        answer = _Answer(self, request_id)
        served.submit(*call, answer.written_or_write, answer.when_durable)
        return True

    def _cancel(self, message: _Message) -> bool:
        if not isinstance(message.id, msgspec.UnsetType) or message.params is None:
            return False
        request_id = message.params.get("requestId")
        # One of the lane's: never answered (the call itself runs on, recorded); any
        # other is the SDK's to apply.
        if not isinstance(request_id, int | str) or isinstance(request_id, bool):
            return False
        return self.settle(request_id)

    def answering(self, request_id: RequestId) -> bool:
        """Whether the call is still to be answered (not cancelled, the wire open)."""
        return request_id in self._open

    def settle(self, request_id: RequestId) -> bool:
        """Whether the call was still to be answered; it is not from now on."""
        if request_id not in self._open:
            return False
        self._open.remove(request_id)
        return True

    def close(self) -> None:
        """The wire ended: the calls still open are not answered (as the SDK cancels
        its handlers at the end of the wire)."""
        self._closed = True
        self._open.clear()


class _Answer:
    """The reply to one call the lane took, written once: from the store's writer
    thread the moment the call's outcome is durable, when the wire takes it there at
    once (:meth:`when_durable`; the client reads it without waiting for this loop to
    run again), else by the session loop's task once it applied the outcome
    (:meth:`written_or_write`)."""

    def __init__(self, lane: Lane, request_id: RequestId) -> None:
        self._lane = lane
        self._id = request_id
        self._written = False  # set in the writer thread, read after it woke this one

    def when_durable(self, result: ToolResult) -> Callable[[], None]:
        line = self._line(result)

        def write() -> None:
            if self._lane.answering(self._id):
                self._written = self._lane.writer.write_now(line)

        return write

    def written_or_write(self, result: ToolResult) -> None:
        """The outcome is committed and applied (in the session loop's task: nothing
        here may raise)."""
        if self._written:
            self._lane.settle(self._id)
            self._lane.writer.finish_soon()
        elif self._lane.settle(self._id):
            self._lane.writer.write_soon(self._line(result))

    def _line(self, result: ToolResult) -> bytes:
        reply = _Reply(jsonrpc="2.0", id=self._id, result=result_body(result))
        return _encode(reply) + b"\n"
