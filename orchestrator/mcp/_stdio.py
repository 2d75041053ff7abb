"""A stdio transport for the SDK's ``ClientSession`` without the transport's own tasks.

The SDK's ``stdio_client`` runs two tasks per server: one takes each outgoing message
from a memory stream and writes it to the server's stdin, one reads its stdout and hands
each message over another memory stream to the session's receive loop. Every request
and every answer therefore crosses two task hand-offs more than it needs (each a trio
scheduler pass and the memory streams' work). Here the session's streams are the pipes
themselves (``ClientSession`` takes any pair with ``send``/``receive``, the SDK's
``ReadStream``/``WriteStream`` protocols): a message is written to stdin by the task that
sends it, and the session's receive loop reads and parses stdout lines itself.

What the SDK's transport does otherwise is kept, with its own helpers: the process is
started and stopped the same way (environment, stderr to ``errlog``, stdin closed, the
process tree terminated after a grace period), each line is parsed by the same
function (a line that does not parse reaches the session as the exception it is) and
the server's stdout is drained while it stops. (The SDK is pinned: pyproject.toml.)

Tool calls go further: :class:`Lane` sends ``tools/call`` requests beside the session
and takes their answers off stdout before the SDK parses them, and :func:`call_tool`
types the result as the session would have (docs/mcp.md, "Performance").
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any, Self, TextIO, TypeGuard

import anyio
import msgspec
import trio

# The SDK's own process handling, used as its stdio_client uses it.
from mcp.client import stdio as _sdk_stdio
from mcp.client.stdio import (
    StdioServerParameters,
    _create_platform_compatible_process,
    _drain_stdout,
    _get_executable_command,
    _parse_line,
    _stop_server_process,
    get_default_environment,
)
from mcp.shared.exceptions import MCPError
from mcp_types import CONNECTION_CLOSED, INTERNAL_ERROR

from orchestrator._lines import MAX_LINE, LineSplitter
from orchestrator._lines import Stream as _Stream

logger = logging.getLogger(__name__)

READ_BYTES = 65536
"""Bytes read from the server's stdout at a time (the SDK's transport reads the same)."""

ABANDON_WRITE_S = 1.0
"""How long the notice that a request was given up (``notifications/cancelled``) may
take to write."""

_CLOSED = (anyio.ClosedResourceError, anyio.BrokenResourceError, ConnectionError, OSError)


class _Stdout(_Stream):
    """The session's read stream: reads the server's stdout when the session's receive
    loop asks, one parsed line at a time, and ends at EOF. A line over MAX_LINE is
    dropped as it comes and reaches the session as the error a line that does not
    parse is; the next line is read as usual."""

    def __init__(self, stdout: Any, encoding: str, errors: str, lane: Lane, name: str) -> None:
        self._stdout = stdout
        self._name = name
        self._lane = lane
        self._encoding = encoding
        self._errors = errors
        self._splitter = LineSplitter(MAX_LINE)
        self._lines: list[bytes | None] = []  # complete lines not handed out yet, in reverse
        self._ended = False

    async def receive(self) -> Any:
        while True:
            line = await self._line()
            if line is None:
                return _bad_line(
                    f"the MCP server {self._name!r} wrote a line over "
                    f"{self._splitter.limit} bytes to its stdout; it was dropped (a message "
                    "in it is lost: a call it answers gets no answer). The server must send "
                    "smaller messages, one JSON-RPC message per line."
                )
            try:
                # The same text as the SDK's transport decodes from the whole stream:
                # in UTF-8 (what skillog asks of a server) a "\n" byte is a line end.
                text = line.decode(self._encoding, self._errors)
            except UnicodeDecodeError as e:
                return _bad_line(
                    f"the MCP server {self._name!r} wrote a line to its stdout that is not "
                    f"{self._encoding} ({e.reason} at byte {e.start}); it was dropped. The "
                    f"server must write {self._encoding} JSON-RPC, one message per line."
                )
            if not (self._lane.pending and await self._lane.took(text)):
                return _parse_line(text)

    async def _line(self) -> bytes | None:
        if self._lines:
            # As between the SDK transport's messages: what the session spawned for
            # the last message (a notification's handler) runs before the next one
            # (the answer) is taken; a read below checkpoints by itself.
            await trio.lowlevel.checkpoint()
        while not self._lines:
            if self._ended:
                raise anyio.EndOfStream
            try:
                chunk = await self._stdout.receive(READ_BYTES)
            except (anyio.EndOfStream, *_CLOSED):
                # The server is gone (or our own shutdown closed the pipe): the session
                # sees the connection end, as with the SDK's transport (a last line
                # without "\n" is not a message).
                self._ended = True
                self._lane.close()
                raise anyio.EndOfStream from None
            self._lines = self._splitter.feed(chunk)
            self._lines.reverse()
        return self._lines.pop()

    def __aiter__(self) -> Self:
        return self

    async def __anext__(self) -> Any:
        try:
            return await self.receive()
        except anyio.EndOfStream:
            raise StopAsyncIteration from None

    async def aclose(self) -> None:
        self._ended = True


class _Stdin(_Stream):
    """The session's write stream: each message is written to the server's stdin by
    the task that sends it, one whole line at a time."""

    def __init__(self, stdin: Any, encoding: str, errors: str) -> None:
        self._stdin = stdin
        self._encoding = encoding
        self._errors = errors
        self._lock = trio.StrictFIFOLock()
        self._closed = False

    async def send(self, item: Any) -> None:
        if self._closed:
            raise anyio.ClosedResourceError
        json = item.message.model_dump_json(by_alias=True, exclude_unset=True)
        await self.send_line((json + "\n").encode(self._encoding, self._errors))

    async def send_line(self, data: bytes) -> None:
        """Write one encoded message line."""
        if self._closed:
            raise anyio.ClosedResourceError
        # Parallel calls write whole lines one after another. A free lock is taken
        # without the scheduler pass of acquire() (the pipe's write checkpoints anyway).
        lock = self._lock
        if lock.locked() or lock.statistics().tasks_waiting:
            await lock.acquire()
        else:
            lock.acquire_nowait()
        try:
            await self._stdin.send(data)
        except _CLOSED as e:
            self._closed = True
            raise anyio.BrokenResourceError from e
        finally:
            lock.release()

    async def aclose(self) -> None:
        self._closed = True


@contextlib.asynccontextmanager
async def stdio_streams(
    server: StdioServerParameters, errlog: TextIO, name: str = "stdio"
) -> AsyncIterator[tuple[_Stdout, _Stdin, Lane]]:
    """Start ``server`` and yield the session's read and write streams over its stdio,
    and the :class:`Lane` for its tool calls (``name``: the server's, for errors);
    on exit stop it as the SDK's ``stdio_client`` does (stdin closed, a grace period,
    then the process tree terminated), draining its stdout meanwhile."""
    command = await _get_executable_command(server.command)
    process = await _create_platform_compatible_process(
        command=command,
        args=server.args,
        env=get_default_environment() | (server.env or {}),
        errlog=errlog,
        cwd=server.cwd,
    )
    assert process.stdin is not None and process.stdout is not None
    encoding, errors = server.encoding, server.encoding_error_handler
    write = _Stdin(process.stdin, encoding, errors)
    lane = Lane(write)
    read = _Stdout(process.stdout, encoding, errors, lane, name)
    try:
        yield read, write, lane
    finally:
        lane.close()
        await write.aclose()
        await read.aclose()
        # Stopping must finish even when the caller is cancelled, or the server
        # would outlive the session; every wait in it is bounded.
        with trio.CancelScope(shield=True):
            async with trio.open_nursery() as nursery:
                # A server blocked writing its stdout cannot read the closed stdin.
                nursery.start_soon(_drain_stdout, process)
                await _stop_server_process(process)
                nursery.cancel_scope.cancel()


class _Waiter:
    __slots__ = ("answer", "done", "on_progress")

    def __init__(self, on_progress: ProgressFn) -> None:
        self.on_progress = on_progress
        self.answer: dict[str, Any] | None = None
        self.done = trio.Event()


ProgressFn = Callable[[float, float | None, str | None], Awaitable[None]]


class Lane:
    """``tools/call`` requests sent and answered beside the SDK's session, on the same
    pipes: the request is encoded once (msgspec) and written by the calling task, the
    answer is taken off stdout by the session's receive loop (:class:`_Stdout`) before
    the SDK parses it, and handed back raw. The SDK's typed request, its dispatcher's
    per-request memory stream and span, and the parse of the answer into a pydantic
    message are skipped; :func:`call_tool` types the result as the SDK does, so what
    is recorded is the same. Ids are strings
    (``skillog-N``), so they never meet the SDK's integer ids; each request's id is
    its progress token, and progress notifications for it are taken here too.
    Everything else the server sends (log messages, its own requests) goes to the SDK.
    """

    def __init__(self, stdin: _Stdin) -> None:
        self._stdin = stdin
        self._next = 0
        self.pending: dict[str, _Waiter] = {}
        self.closed = False

    async def request(
        self, method: str, params: dict[str, Any], on_progress: ProgressFn
    ) -> dict[str, Any]:
        """Send ``method`` with ``params`` (their ``_meta`` gets the progress token) and
        wait for the result; the SDK's ``MCPError`` for an error answer, and for the
        connection closing (code ``CONNECTION_CLOSED``)."""
        if self.closed:
            raise MCPError(CONNECTION_CLOSED, "Connection closed")
        self._next += 1
        request_id = f"skillog-{self._next}"
        params["_meta"] = {**params.get("_meta", {}), "progressToken": request_id}
        message = {"jsonrpc": "2.0", "id": request_id, "method": method, "params": params}
        waiter = self.pending[request_id] = _Waiter(on_progress)
        written = False
        try:
            line = msgspec.json.encode(message) + b"\n"
            written = True
            try:
                await self._stdin.send_line(line)
            except (anyio.BrokenResourceError, anyio.ClosedResourceError):
                # The server's stdin is gone: the connection closed, as the SDK says.
                raise MCPError(CONNECTION_CLOSED, "Connection closed") from None
            await waiter.done.wait()
        except BaseException:
            if written and not self.closed:
                # As the SDK does for a request it gives up on: tell the server.
                with trio.move_on_after(ABANDON_WRITE_S) as scope:
                    scope.shield = True
                    cancel = {
                        "jsonrpc": "2.0",
                        "method": "notifications/cancelled",
                        "params": {"requestId": request_id, "reason": "caller cancelled"},
                    }
                    with contextlib.suppress(Exception):
                        await self._stdin.send_line(msgspec.json.encode(cancel) + b"\n")
            raise
        finally:
            del self.pending[request_id]
        answer = waiter.answer
        if answer is None:
            raise MCPError(CONNECTION_CLOSED, "Connection closed")
        result = answer.get("result")
        if isinstance(result, dict):
            return result
        error = answer.get("error")
        if isinstance(error, dict):
            code, text = error.get("code"), error.get("message")
            code = code if isinstance(code, int) else INTERNAL_ERROR
            raise MCPError(code, str(text), error.get("data"))
        raise MCPError(INTERNAL_ERROR, "the answer has neither a result nor an error")

    async def took(self, line: str) -> bool:
        """Whether ``line`` is the answer to, or a progress notification of, one of
        this lane's requests (then it is handled here and the SDK never sees it)."""
        try:
            message = msgspec.json.decode(line)
        except msgspec.DecodeError:
            return False  # the SDK reports it
        if not isinstance(message, dict):
            return False
        request_id = message.get("id")
        if "method" not in message:
            waiter = self.pending.get(request_id) if isinstance(request_id, str) else None
            if waiter is None:
                return False
            waiter.answer = message
            waiter.done.set()
            return True
        if message["method"] != "notifications/progress" or request_id is not None:
            return False
        params = message.get("params")
        token = params.get("progressToken") if isinstance(params, dict) else None
        waiter = self.pending.get(token) if isinstance(token, str) else None
        if waiter is None:
            return False
        assert isinstance(params, dict)
        done, total, text = params.get("progress"), params.get("total"), params.get("message")
        if not _number(done):
            return False  # the SDK's dispatcher would not take it either
        # As the SDK's dispatcher hands them on: floats (1 -> 1.0), a total that is not
        # a number as None. Here the tick is taken before the next message is read.
        try:
            await waiter.on_progress(
                float(done),
                float(total) if isinstance(total, int | float) else None,
                text if isinstance(text, str) else None,
            )
        except Exception:  # as the SDK's dispatcher: a failing callback costs only its tick
            logger.exception("progress callback for %r raised", token)
        return True

    def close(self) -> None:
        """The connection is gone: every waiting request ends with CONNECTION_CLOSED."""
        self.closed = True
        for waiter in self.pending.values():
            waiter.done.set()


def _bad_line(text: str) -> ValueError:
    """The error for a line of a server's stdout that was dropped, logged as the SDK's
    transport logs a line that does not parse (without a traceback: nothing of ours
    failed)."""
    _sdk_stdio.logger.error("Failed to parse JSONRPC message from server: %s", text)
    return ValueError(text)


def _number(value: object) -> TypeGuard[float]:
    return isinstance(value, int | float) and not isinstance(value, bool)


def lane_fits(session: Any) -> bool:
    """Whether ``session`` (the SDK's ``ClientSession``) and its module have what
    :func:`call_tool` uses of them; otherwise calls take the SDK's own path."""
    try:
        from mcp.client.extension import UnexpectedClaimedResult  # noqa: F401
        from mcp.client.session import (  # noqa: F401
            _clamp_inbound_ttl,
            _input_required_unexpected,
            _later_revision_fields,
        )
        from mcp_types import methods  # noqa: F401
    except ImportError:
        return False
    return all(hasattr(session, a) for a in ("_stamp", "_negotiated_version", "_call_tool_adapter"))


async def call_tool(
    lane: Lane,
    session: Any,
    name: str,
    arguments: Any,
    meta: dict[str, Any],
    on_progress: ProgressFn,
) -> Any:
    """``session.call_tool(name, arguments, progress_callback=on_progress, meta=meta)``
    with the request and its answer on ``lane``: the request stamped as the session
    stamps it, the result checked and typed as ``ClientSession.send_request`` and
    ``call_tool`` of the pinned SDK do it."""
    from mcp import types
    from mcp.client.extension import UnexpectedClaimedResult
    from mcp.client.session import (
        _clamp_inbound_ttl,
        _input_required_unexpected,
        _later_revision_fields,
    )
    from mcp_types import methods

    params: dict[str, Any] = {"name": name, "_meta": meta}
    if arguments is not None:
        params["arguments"] = arguments
    data: dict[str, Any] = {"method": "tools/call", "params": params}
    session._stamp(data, {})
    raw = await lane.request("tools/call", data["params"], on_progress)
    _clamp_inbound_ttl(raw)
    version = session._negotiated_version or "2025-11-25"
    with contextlib.suppress(KeyError):
        methods.validate_server_result("tools/call", version, raw)
    if not (foreign := _later_revision_fields("tools/call", version)).isdisjoint(raw):
        raw = {key: value for key, value in raw.items() if key not in foreign}
    result = session._call_tool_adapter.validate_python(raw, by_name=False)
    if isinstance(result, types.CallToolResult) and not result.is_error:
        await session.validate_tool_result(name, result)
    if isinstance(result, types.InputRequiredResult):
        raise _input_required_unexpected("call_tool")
    if not isinstance(result, types.CallToolResult):
        raise UnexpectedClaimedResult(result)
    return result
