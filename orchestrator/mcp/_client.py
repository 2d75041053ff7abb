"""The session's MCP servers, connected with the official SDK (``mcp``), under trio.

The SDK is written on anyio, which runs on trio as it runs on asyncio: its stdio and
streamable HTTP transports and ``ClientSession`` are used as they are. Each server's
connection lives in a task of its own in the caller's nursery, so the SDK's task
groups and cancel scopes are entered and left in one task, as anyio requires; the
session's tool calls, from any task, send requests over it.

Every step that waits on a server has a deadline: connecting (process start or HTTP
connection, ``initialize``, ``tools/list``) ``connect_timeout_ms``, each call
``call_timeout_ms``, each re-listing after ``notifications/tools/list_changed`` the
connect timeout again. A server that misses one, crashes or breaks the protocol is
reported (``mcp.server_failed``, or a call's failed ``mcp.result``) and the session
goes on without it.
"""

from __future__ import annotations

import contextlib
import importlib.metadata
import sys
import time
from collections.abc import AsyncIterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any, TextIO

import msgspec
import trio

from eventlog import SkillogError

from .._effects import McpOutcome, McpStatus, McpTask, ServerRequests, mcp_gone
from .._events import McpRoot, McpServerFailed, McpToolsListed
from .._host_tools import ToolContext
from .._model import encode_canonical
from ..skills import McpServerConfig
from ._listing import tools_listed
from ._requests import answer_elicitation, answer_roots, answer_sampling, roots_changed
from ._results import failure, outcome_of
from ._tasks import TaskCancelledError, TaskLostError, call_as_task

if TYPE_CHECKING:  # the SDK is an optional extra: imported where it is used
    from ._stdio import Lane


def _own_stdio() -> Any:
    """``orchestrator.mcp._stdio`` (a stdio server's pipes as the session's streams, tool
    calls on a lane), or None when the installed SDK lacks the private helpers it uses:
    servers are then spoken to through the SDK's own transport and calls, as before."""
    try:
        from . import _stdio
    except ImportError:
        return None
    return _stdio


MAX_HTTP_EVENT_BYTES = 64 << 20
"""The largest server-sent event (one result over streamable HTTP) read; the SDK's
default, 1 MiB, would break the connection on any larger result."""

MAX_NOTES = 100
"""The most progress notifications, and log messages, kept of one call (the last ones)."""

MAX_NOTE_CHARS = 2000
"""The longest log message or progress text kept; longer ones are cut."""

CONTEXT_META = "io.skillog/context"
"""The ``_meta`` key under which each call carries its session, call and active skills."""


class McpConfigError(SkillogError):
    """MCP servers configured in a way a session cannot use."""


class McpServers:
    """The connected servers of one session run; made by :func:`connect_servers`."""

    def __init__(self, servers: Sequence[_Server]) -> None:
        self._servers = {s.spec.name: s for s in servers}

    async def changes(self, recorded: Mapping[str, McpStatus]) -> list[McpStatus]:
        """What each server offers now that ``recorded`` (the log) does not say: a
        listing that differs, or a failure the log does not have yet (a server the log
        lists that this process does not connect counts as failed)."""
        # The SDK hands each notification to a task of its own: let those already
        # received (a list_changed sent before a call's answer) run before looking.
        await trio.lowlevel.checkpoint()
        out = mcp_gone(recorded, self._servers)
        for name in sorted(self._servers):
            status = await self._servers[name].current()
            last = recorded.get(name)
            if isinstance(status, McpServerFailed):
                if not isinstance(last, McpServerFailed):
                    out.append(status)
            elif not (
                isinstance(last, McpToolsListed)
                and (last.tools, last.rejected) == (status.tools, status.rejected)
            ):
                # The definitions compared, not their hash: a listing recorded before a
                # field was added to them (McpToolDef.task) is the same listing.
                out.append(status)
        return out

    async def set_roots(self, roots: Mapping[str, tuple[McpRoot, ...]]) -> None:
        """What each server is told from now on at ``roots/list``; a server whose roots
        changed is sent ``notifications/roots/list_changed``."""
        for name, server in self._servers.items():
            await server.set_roots(roots.get(name, ()))

    async def call(
        self,
        server: str,
        tool: str,
        arguments: str,
        context: ToolContext,
        *,
        stored_cap: int,
        model_cap: int,
        requests: ServerRequests | None = None,
        task: McpTask | None = None,
    ) -> McpOutcome:
        found = self._servers.get(server)
        if found is None:
            return failure("unavailable", f"there is no MCP server {server!r} in this process")
        if requests is None:
            return await found.call(tool, arguments, context, stored_cap, model_cap, task)
        # While the call runs, what its server asks goes to ``requests`` (_requests).
        found.inflight[context.call_id] = requests
        try:
            return await found.call(tool, arguments, context, stored_cap, model_cap, task)
        finally:
            found.inflight.pop(context.call_id, None)


@contextlib.asynccontextmanager
async def connect_servers(
    servers: Sequence[McpServerConfig],
    *,
    taken: frozenset[str] = frozenset(),
    errlog: TextIO | None = None,
) -> AsyncIterator[McpServers]:
    """Start and connect ``servers`` (concurrently, each within its connect timeout),
    yield them, and stop them on exit. A server that fails to connect does not fail
    the others: it is reported by ``changes``. ``taken``: the session's other tool
    names. ``errlog``: where stdio servers' stderr goes (default ``sys.stderr``)."""
    names = [s.name for s in servers]
    bad = sorted({n for n in names if names.count(n) > 1 or not n})
    if bad:
        raise McpConfigError(
            f"MCP servers need distinct, non-empty names; check {', '.join(map(repr, bad))}"
        )
    connections = [_Server(s, taken, errlog or sys.stderr) for s in servers]
    async with trio.open_nursery() as nursery:
        try:
            for connection in connections:
                nursery.start_soon(connection.run)
            for connection in connections:
                await connection.ready.wait()
            yield McpServers(connections)
        finally:
            for connection in connections:
                connection.close()


class _Server:
    """One server's connection, held open by :meth:`run` in its own task."""

    def __init__(self, spec: McpServerConfig, taken: frozenset[str], errlog: TextIO) -> None:
        self.spec = spec
        self.ready = trio.Event()
        self._taken = taken
        self._errlog = errlog
        self._closed = trio.Event()
        # A connected server outlives a cancellation of the run until close(): a call
        # cancelled with it still tells the server (tasks/cancel) over the connection.
        self._scope = trio.CancelScope(shield=True)
        self._session: Any = None
        self._lane: Lane | None = None  # stdio: tool calls beside the SDK's session
        self._status: McpStatus | None = None
        self._info = ""
        self._list_changed = False
        self._reported = False
        self._log: list[dict[str, Any]] = []
        self.inflight: dict[str, ServerRequests] = {}  # running calls, oldest first
        self.roots: tuple[McpRoot, ...] = ()  # what the log says it is told

    def close(self) -> None:
        self._closed.set()
        if not self.ready.is_set():  # still connecting: stop now
            self._scope.cancel()

    async def run(self) -> None:
        with self._scope:
            await self._run()

    async def _run(self) -> None:
        from mcp import ClientSession

        own = _own_stdio()
        stage: Any = "connect"
        try:
            async with (
                self._transport(own) as streams,
                ClientSession(
                    streams[0],
                    streams[1],
                    message_handler=self._on_message,
                    logging_callback=self._on_log,
                    sampling_callback=self._on_sampling,
                    list_roots_callback=self._on_roots,
                    elicitation_callback=self._on_elicitation,
                    client_info=client_info(),
                ) as session,
            ):
                with trio.fail_after(self.spec.connect_timeout_ms / 1000):
                    initialized = await session.initialize()
                    info = initialized.server_info
                    self._info = f"{info.name} {info.version}".strip()
                    stage = "list"
                    self._status = await self._list(session, "connected")
                self._session = session
                if own is not None and isinstance(streams[-1], own.Lane) and own.lane_fits(session):
                    self._lane = streams[-1]
                stage = "call"
                self.ready.set()
                await self._closed.wait()
        except Exception as e:
            if _timed_out(e):
                e = TimeoutError(f"no answer within {self.spec.connect_timeout_ms} ms")
            self._fail(stage, _describe(e))
        finally:
            self._session = self._lane = None
            if not self._closed.is_set() and not isinstance(self._status, McpServerFailed):
                self._fail(stage, "the connection closed")
            self.ready.set()

    def _transport(self, own: Any) -> contextlib.AbstractAsyncContextManager[Any]:
        """The connection's streams: over ``own`` (:func:`_own_stdio`) for a stdio server
        when the SDK has what it uses, else the SDK's transports."""
        spec = self.spec
        if spec.command is not None:
            from mcp import StdioServerParameters, stdio_client

            params = StdioServerParameters(
                command=spec.command, args=list(spec.args), env=dict(spec.env), cwd=spec.cwd
            )
            if own is None:
                return stdio_client(params, errlog=self._errlog)
            streams: contextlib.AbstractAsyncContextManager[Any] = own.stdio_streams(
                params, self._errlog, spec.name
            )
            return streams
        return _http(spec)

    async def _list(self, session: Any, reason: Any) -> McpToolsListed:
        tools: list[dict[str, Any]] = []
        cursor = None
        while True:
            from mcp.types import PaginatedRequestParams

            params = PaginatedRequestParams(cursor=cursor) if cursor else None
            page = await session.list_tools(params=params)
            tools += [
                t.model_dump(mode="json", by_alias=True, exclude_none=True) for t in page.tools
            ]
            cursor = page.next_cursor
            if not cursor:
                break
        return tools_listed(
            self.spec, tools, reason=reason, server_info=self._info, taken=self._taken
        )

    async def _on_message(self, message: Any) -> None:
        if getattr(message, "method", None) == "notifications/tools/list_changed":
            self._list_changed = True

    async def _on_log(self, params: Any) -> None:
        # Kept for the audit: the messages that arrive while calls run go with the
        # outcome of the next call to finish (mcp.result.notes).
        data = params.data if isinstance(params.data, str) else encode_canonical(params.data)
        text = data if isinstance(data, str) else data.decode()
        note = {"level": params.level, "logger": params.logger, "data": text[:MAX_NOTE_CHARS]}
        self._log = [*self._log[-(MAX_NOTES - 1) :], note]

    async def _on_sampling(self, context: Any, params: Any) -> Any:
        return await answer_sampling(self.inflight, params)

    async def _on_elicitation(self, context: Any, params: Any) -> Any:
        return await answer_elicitation(self.inflight, params)

    async def _on_roots(self, context: Any) -> Any:
        return answer_roots(self.roots)

    async def set_roots(self, roots: tuple[McpRoot, ...]) -> None:
        if roots != self.roots:
            self.roots = roots
            if self._session is not None:
                await roots_changed(self._session)

    def _fail(self, stage: Any, error: str) -> None:
        if not isinstance(self._status, McpServerFailed):
            self._status = McpServerFailed(server=self.spec.name, stage=stage, error=error)

    async def current(self) -> McpStatus:
        """The server's listing, listed again if it said its list changed. The first
        listing this process reports is ``connected`` even when the server said its
        list changed while connecting (server-everything does)."""
        session = self._session
        if self._list_changed and session is not None:
            self._list_changed = False
            reason = "list_changed" if self._reported else "connected"
            try:
                with trio.fail_after(self.spec.connect_timeout_ms / 1000):
                    self._status = await self._list(session, reason)
            except trio.TooSlowError:
                self._fail(
                    "list", f"tools/list gave no answer within {self.spec.connect_timeout_ms} ms"
                )
            except Exception as e:
                self._fail("list", _describe(e))
        assert self._status is not None
        self._reported = True
        return self._status

    async def call(
        self,
        tool: str,
        arguments: str,
        context: ToolContext,
        stored_cap: int,
        model_cap: int,
        task: McpTask | None = None,
    ) -> McpOutcome:
        session = self._session
        name = self.spec.name
        if session is None or isinstance(self._status, McpServerFailed):
            reason = self._status.error if isinstance(self._status, McpServerFailed) else ""
            return failure("unavailable", f"MCP server {name!r} is not available: {reason}")
        meta = {
            CONTEXT_META: {
                "session": context.session_id,
                "call_id": context.call_id,
                "skills": list(context.active_skills),
                "idempotency_key": context.idempotency_key,
            }
        }
        timeout_ms = self.spec.call_timeout_ms
        progress: list[dict[str, Any]] = []

        async def on_progress(done: float, total: float | None, message: str | None) -> None:
            # Decimal text: no float reaches a hashed record.
            tick = {"progress": repr(done), "total": None if total is None else repr(total)}
            tick["message"] = None if message is None else message[:MAX_NOTE_CHARS]
            progress[:] = [*progress[-(MAX_NOTES - 1) :], tick]
            if (live := self.inflight.get(context.call_id)) is not None:
                live.progress(tick["progress"] or "", tick["total"], tick["message"])

        start = time.monotonic_ns()
        try:
            if task is not None:
                args = msgspec.json.decode(arguments)
                result = await call_as_task(session, tool, args, meta, task, timeout_ms / 1000)
            elif self._lane is not None:
                from ._stdio import call_tool

                with trio.fail_after(timeout_ms / 1000):
                    result = await call_tool(
                        self._lane, session, tool, msgspec.json.decode(arguments), meta, on_progress
                    )
            else:
                with trio.fail_after(timeout_ms / 1000):
                    result = await session.call_tool(
                        tool,
                        msgspec.json.decode(arguments),
                        progress_callback=on_progress,
                        meta=meta,
                    )
        except TaskCancelledError as e:
            return failure("cancelled", f"MCP server {name!r}: {e}", duration_ms=_ms(start))
        except TaskLostError as e:
            assert task is not None
            advice = _LOST_ADVICE.get(task.effect, _LOST_ADVICE["at-most-once"])
            return failure("task_lost", f"MCP server {name!r} {e}{advice}", duration_ms=_ms(start))
        except SkillogError:  # committing the task id failed: the log's error, not the server's
            raise
        except trio.TooSlowError:
            return failure(
                "timeout",
                f"MCP server {name!r} did not answer {tool} within {timeout_ms} ms; the call "
                "may still be running there, check before retrying",
                duration_ms=_ms(start),
            )
        except Exception as e:
            if self._session is None or _is_disconnect(e):
                self._fail("call", f"the connection broke during {tool}: {_describe(e)}")
                return failure(
                    "disconnected",
                    f"MCP server {name!r} stopped answering during {tool} ({_describe(e)}); it "
                    "may or may not have acted, check before retrying; its tools are no longer "
                    "offered",
                    duration_ms=_ms(start),
                )
            return failure(
                "protocol",
                f"MCP server {name!r} refused {tool}: {_describe(e)}",
                duration_ms=_ms(start),
            )
        # The SDK hands each notification to a task of its own: let those received
        # before the answer (progress, log messages) run before taking them. The SDK's
        # loop takes each message after a checkpoint, so such a task has had its first
        # step before the answer woke this one; one still waiting to run is in the run
        # queue. When nothing is (nearly every call), a checkpoint would be a scheduler
        # pass for nothing.
        if trio.lowlevel.current_statistics().tasks_runnable:
            await trio.lowlevel.checkpoint()
        wire = result.model_dump(mode="json", by_alias=True, exclude_none=True)
        outcome = outcome_of(
            wire, stored_cap=stored_cap, model_cap=model_cap, duration_ms=_ms(start)
        )
        log, self._log = self._log, []
        if progress or log:
            notes = encode_canonical({"progress": progress, "log": log})
            outcome = msgspec.structs.replace(outcome, notes=notes)
        return outcome


_LOST_ADVICE = {
    "pure": "; the tool is read-only (pure): calling it again is safe",
    "idempotent": "; the tool is idempotent: calling it again is safe",
    "at-most-once": "; the task may or may not have acted: check before retrying",
}
"""What the outcome of a lost task adds, by the tool's effect class."""


def client_info() -> Any:
    """How skillog introduces itself to a server: ``skillog`` and its version."""
    from mcp.types import Implementation

    try:
        version = importlib.metadata.version("skillog")
    except importlib.metadata.PackageNotFoundError:
        version = "0"
    return Implementation(name="skillog", version=version)


@contextlib.asynccontextmanager
async def _http(spec: McpServerConfig) -> AsyncIterator[Any]:
    from mcp.client.streamable_http import streamable_http_client
    from mcp.shared._httpx_utils import create_mcp_http_client

    assert spec.url is not None
    # The SDK's timeouts for the HTTP layer (a response stream may stay open long);
    # the deadlines that matter are the connect and call timeouts around each step.
    async with (
        create_mcp_http_client(headers=dict(spec.headers)) as client,
        streamable_http_client(
            spec.url, http_client=client, max_sse_event_size=MAX_HTTP_EVENT_BYTES
        ) as streams,
    ):
        yield streams


def _timed_out(error: BaseException) -> bool:
    """A deadline passed (the SDK's task groups may wrap it in a group)."""
    if isinstance(error, BaseExceptionGroup):
        return any(_timed_out(e) for e in error.exceptions)
    return isinstance(error, trio.TooSlowError)


def _is_disconnect(error: BaseException) -> bool:
    from mcp import MCPError
    from mcp_types import CONNECTION_CLOSED

    return isinstance(error, MCPError) and error.code == CONNECTION_CLOSED


def _describe(error: BaseException) -> str:
    if isinstance(error, BaseExceptionGroup):
        return "; ".join(_describe(e) for e in error.exceptions)
    text = str(error) or type(error).__name__
    return f"{type(error).__name__}: {text}"[:1000]


def _ms(start: int) -> int:
    return (time.monotonic_ns() - start) // 1_000_000
