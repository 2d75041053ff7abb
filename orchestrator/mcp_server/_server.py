"""``skillog mcp serve``: the skills runtime as an MCP server, over stdio or HTTP.

Built on the official SDK's low-level ``Server`` (anyio, so it runs on trio, the
runtime's loop). Each client connection is one session of the log
(``_server_session``): the connection of a stdio server, the ``Mcp-Session-Id`` of the
streamable HTTP transport. The session starts at the client's first request after
``initialize`` (its name and version become the session's model) and ends when the
connection closes (stdin closed, HTTP ``DELETE``, or the server stopping).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

import mcp.types as types
import trio
from mcp.server.context import ServerRequestContext
from mcp.server.lowlevel import NotificationOptions, Server
from mcp.server.runner import serve_loop
from mcp.shared.exceptions import MCPError

from eventlog import EventStore

from .._loop import VERSION
from . import _views as views
from ._lane import Lane
from ._lane import fits as lane_fits
from ._session import ServeConfig, ServedSession
from ._stdio import LineReader, LineWriter, stdio_streams

log = logging.getLogger("skillog.mcp")

Ctx = ServerRequestContext[Any, Any]
STDIO = "stdio"
TOKEN_KEY = "skillog.token"
"""Where the HTTP transport leaves the name of the bearer token a request used."""
INVALID_REQUEST = -32600
INVALID_PARAMS = -32602
NOTIFICATIONS = NotificationOptions(tools_changed=True, resources_changed=True)


class _Server(Server[Any]):
    """The SDK's server, whose initialization options say the tool and resource lists
    change (they do: loading a skill changes both) on every transport: the HTTP session
    manager starts each connection with the server's defaults, not with the options
    stdio passes."""

    def create_initialization_options(self, *args: Any, **kwargs: Any) -> Any:
        if not args and "notification_options" not in kwargs:
            args = (NOTIFICATIONS,)
        return super().create_initialization_options(*args, **kwargs)


class SkillogMcp:
    """The MCP handlers over one store, and the sessions of the connections so far."""

    def __init__(
        self,
        store: EventStore,
        config: ServeConfig,
        nursery: trio.Nursery,
        *,
        on_end: Callable[[ServedSession], None] = lambda _: None,
    ) -> None:
        self.store = store
        self.config = config
        self.nursery = nursery
        self.on_end = on_end
        self.sessions: dict[str, ServedSession] = {}
        self._lock = trio.Lock()
        self.server: Server[Any] = _Server(
            "skillog",
            version=VERSION,
            title="skillog skills runtime",
            instructions=views.INSTRUCTIONS,
            on_list_tools=self._list_tools,
            on_call_tool=self._call_tool,
            on_list_resources=self._list_resources,
            on_read_resource=self._read_resource,
            on_list_resource_templates=self._list_templates,
        )

    def initialization_options(self) -> Any:
        return self.server.create_initialization_options()

    async def run(self, read: Any, write: Any) -> None:
        """Serve one connection on ``read`` and ``write`` until ``read`` ends.

        A client that opens with ``initialize`` (every protocol revision up to
        2025-11-25) is served by the SDK's handshake loop straight from the wire: the
        SDK's ``Server.run`` peeks at the first request to choose the protocol era and
        then relays every message through a memory stream and a task of its own, two
        scheduler passes per message. Any other opening takes ``Server.run``."""
        if isinstance(read, LineReader) and isinstance(write, LineWriter):
            write.nursery = self.nursery
            read.lane = Lane(self, write, STDIO)
        opening = await read.opening() if isinstance(read, LineReader) else None
        if opening is None or opening.method != "initialize":
            await self.server.run(read, write, self.initialization_options())
            return
        async with self.server.lifespan(self.server) as state:
            await serve_loop(
                self.server,
                read,
                write,
                lifespan_state=state,
                init_options=self.initialization_options(),
            )

    async def session_for(self, ctx: Ctx) -> ServedSession:
        """The session of ``ctx``'s connection, started on its first request."""
        key = connection_key(ctx)
        served = self.sessions.get(key)
        if served is not None:  # every request but the first: no lock, no yield
            return served
        async with self._lock:
            served = self.sessions.get(key)
            if served is None:
                served = ServedSession(client_name(ctx), self.config)
                protocol = getattr(ctx, "protocol_version", None)
                served.lane = key == STDIO and lane_fits(self, protocol)
                await served.start(self.store, self.nursery)
                self.sessions[key] = served
                log.info(
                    "skillog mcp serve: session %s for %s%s",
                    served.id,
                    served.model.client,
                    "; skills.read calls take the served-call lane" if served.lane else "",
                )
        return served

    async def end(self, key: str, why: str | None = None) -> None:
        """The connection ``key`` closed: end its session (if it had one)."""
        async with self._lock:
            served = self.sessions.pop(key, None)
        if served is not None:
            await served.close(why)
            self.on_end(served)

    async def end_all(self) -> None:
        for key in list(self.sessions):
            await self.end(key)

    # -- handlers ----------------------------------------------------------------------

    async def _list_tools(
        self, ctx: Ctx, params: types.PaginatedRequestParams | None
    ) -> types.ListToolsResult:
        served = await self.session_for(ctx)
        assert served.session is not None
        return types.ListToolsResult(tools=views.tools(served.session.state))

    async def _call_tool(
        self, ctx: Ctx, params: types.CallToolRequestParams
    ) -> types.CallToolResult:
        served = await self.session_for(ctx)
        result = await self._run(served, ctx, params.name, params.arguments)
        return types.CallToolResult(
            content=[types.TextContent(type="text", text=result.content)],
            is_error=result.is_error,
        )

    async def _list_resources(
        self, ctx: Ctx, params: types.PaginatedRequestParams | None
    ) -> types.ListResourcesResult:
        served = await self.session_for(ctx)
        assert served.session is not None
        return types.ListResourcesResult(resources=views.resources(served.session.state))

    async def _list_templates(
        self, ctx: Ctx, params: types.PaginatedRequestParams | None
    ) -> types.ListResourceTemplatesResult:
        return types.ListResourceTemplatesResult(resource_templates=[views.SKILL_TEMPLATE])

    async def _read_resource(
        self, ctx: Ctx, params: types.ReadResourceRequestParams
    ) -> types.ReadResourceResult:
        served = await self.session_for(ctx)
        assert served.session is not None
        uri = str(params.uri)
        if uri == views.CATALOG_URI:
            text = views.catalog_json(served.session.state)
            return types.ReadResourceResult(
                contents=[
                    types.TextResourceContents(uri=uri, mime_type="application/json", text=text)
                ]
            )
        target = views.parse_skill_uri(uri)
        if target is None:
            raise MCPError(
                INVALID_PARAMS,
                f"unknown resource {uri[:200]!r}: this server has {views.CATALOG_URI} and "
                "skill://SKILL/PATH for the files of loaded skills (resources/list)",
            )
        skill, path = target
        # Recorded as the skills.read call it is: policy, events and the pinned snapshot.
        result = await self._run(served, ctx, "skills.read", {"skill": skill, "path": path})
        if result.is_error:
            raise MCPError(INVALID_PARAMS, f"{uri[:200]}: {result.content}")
        state = served.session.state
        content = views.file_contents(state, uri, skill, path, result.content)
        return types.ReadResourceResult(contents=[content])

    async def _run(
        self, served: ServedSession, ctx: Ctx, name: str, arguments: dict[str, Any] | None
    ) -> Any:
        before = served.active()
        result = await served.call(name, arguments, ctx)
        if served.active() != before:  # the tools offered and the files listed changed
            await ctx.session.send_tool_list_changed()
            await ctx.session.send_resource_list_changed()
        return result


def connection_key(ctx: Ctx) -> str:
    """Which connection ``ctx`` came on: the HTTP transport's session id, else stdio
    (one connection per process). An HTTP request without a session (a stateless
    protocol revision) has no connection a session of the log could follow."""
    headers = getattr(ctx.request, "headers", None)
    if headers is None:
        return STDIO
    session_id = headers.get("mcp-session-id")
    if not session_id:
        raise MCPError(
            INVALID_REQUEST,
            "skillog records each MCP connection as one session of its log and needs an "
            "MCP session: connect with initialize (protocol revisions up to 2025-11-25) "
            "and send its Mcp-Session-Id",
        )
    return f"http:{session_id}"


def client_name(ctx: Ctx) -> str:
    """The client as it named itself in ``initialize`` (``name/version``), with the
    name of the bearer token it came with, if any."""
    params = ctx.session.client_params
    name = "unknown-mcp-client"
    if params is not None:
        name = f"{params.client_info.name}/{params.client_info.version}"[:200]
    token = getattr(ctx.request, "scope", {}).get(TOKEN_KEY)
    return name if token is None else f"{name} (token {token})"


async def serve_stdio(
    store: EventStore,
    config: ServeConfig,
    *,
    on_end: Callable[[ServedSession], None] = lambda _: None,
) -> None:
    """Serve one client on this process's stdin and stdout until stdin closes."""
    async with trio.open_nursery() as nursery:
        app = SkillogMcp(store, config, nursery, on_end=on_end)
        async with stdio_streams() as (read, write):
            await app.run(read, write)
        await app.end_all()
