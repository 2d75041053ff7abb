"""``skillog mcp serve --transport http``: the SDK's streamable HTTP transport at
``/mcp``, under Hypercorn's trio worker (as ``skillog serve``).

Bound to loopback by default, with the SDK's DNS-rebinding protection on (a web page
cannot reach it through a hostile DNS name). Bound beyond loopback, every request
needs a bearer token of the service's token book (``skillog serve --add-token``) with
the ``submitter`` (or ``admin``) role;
the token's name is part of the client recorded for the session.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

import trio
from mcp.server.streamable_http_manager import StreamableHTTPSessionManager
from mcp.server.transport_security import TransportSecuritySettings

from eventlog import EventStore, SkillogError

from ._server import TOKEN_KEY, SkillogMcp
from ._session import ServeConfig, ServedSession

Scope = dict[str, Any]
Receive = Callable[[], Awaitable[dict[str, Any]]]
Send = Callable[[MutableMapping[str, Any]], Awaitable[None]]
PATH = "/mcp"
ROLE = "submitter"
"""The role a token needs beyond loopback: each connection is a new session."""
LOOPBACK_HOSTS = ["127.0.0.1:*", "localhost:*", "[::1]:*"]


async def serve_http(
    store: EventStore,
    config: ServeConfig,
    bind: str,
    *,
    stop: trio.Event,
    on_end: Callable[[ServedSession], None] = lambda _: None,
    task_status: trio.TaskStatus[list[str]] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Serve MCP over HTTP on ``bind`` until ``stop`` is set; ``task_status`` gets the
    bound URLs. Every session still open then is ended."""
    try:
        from hypercorn.trio import serve as hypercorn_serve

        from ..service import TokenBook, hypercorn_config, is_loopback
    except ImportError as e:
        raise SkillogError(
            f"--transport http needs Hypercorn ({e}): pip install 'skillog[mcp,service]'"
        ) from e
    from ..skills import config_path

    loopback = is_loopback(bind)
    tokens = None if loopback else TokenBook(config_path())
    security = TransportSecuritySettings(
        enable_dns_rebinding_protection=loopback,
        allowed_hosts=LOOPBACK_HOSTS,
        allowed_origins=[f"http://{h}" for h in LOOPBACK_HOSTS],
    )
    async with trio.open_nursery() as nursery:
        app = SkillogMcp(store, config, nursery, on_end=on_end)
        manager = StreamableHTTPSessionManager(
            app=app.server,
            security_settings=security,
            session_idle_timeout=config.idle_timeout_s,
        )
        asgi = _App(app, manager, tokens, nursery)
        nursery.start_soon(asgi.reap_idle, config.idle_timeout_s, stop)
        async with manager.run():
            await hypercorn_serve(
                asgi,  # type: ignore[arg-type]
                hypercorn_config(bind),
                shutdown_trigger=stop.wait,
                task_status=task_status,
            )
        await app.end_all()


class _App:
    """The ASGI app: lifespan, the bearer token when one is needed, ``/mcp`` to the
    SDK, and the end of a session when its client deletes it."""

    def __init__(
        self,
        app: SkillogMcp,
        manager: StreamableHTTPSessionManager,
        tokens: Any,
        nursery: trio.Nursery,
    ) -> None:
        self.app = app
        self.manager = manager
        self.tokens = tokens
        self.nursery = nursery
        self.last: dict[str, float] = {}  # session key -> end of its latest request
        self.busy: dict[str, int] = {}  # session key -> its requests in flight

    async def reap_idle(self, idle_s: float, stop: trio.Event) -> None:
        """End the sessions with no request in flight and none for ``idle_s``: their
        clients left without ``DELETE`` (the MCP Inspector's CLI does, every call)."""
        async with trio.open_nursery() as watch:

            async def stopped() -> None:
                await stop.wait()
                watch.cancel_scope.cancel()

            watch.start_soon(stopped)
            while True:
                await trio.sleep(min(idle_s / 4, 30.0))
                now = trio.current_time()
                for key in [k for k in self.last if k not in self.app.sessions]:
                    del self.last[key]  # ended since (DELETE, --max-calls)
                for key in [k for k in self.app.sessions if k.startswith("http:")]:
                    last = self.last.setdefault(key, now)
                    if not self.busy.get(key) and now - last >= idle_s:
                        self.last.pop(key, None)
                        why = f"idle: no request for {idle_s:g} s; the client left without DELETE"
                        self.nursery.start_soon(self.app.end, key, why)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            await _lifespan(receive, send)
            return
        if scope["type"] != "http":
            return
        if scope["path"].rstrip("/") != PATH:
            await _reply(send, 404, f"not found: MCP is served at {PATH}")
            return
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope["headers"]}
        if self.tokens is not None:
            auth = headers.get("authorization", "")
            token = auth[7:].strip() if auth[:7].lower() == "bearer " else ""
            principal = await self.tokens.lookup(token) if token else None
            if principal is None:
                await _reply(
                    send,
                    401,
                    "a bearer token is required beyond loopback: Authorization: Bearer "
                    "TOKEN (create one with `skillog serve --add-token NAME`)",
                )
                return
            if not principal.may(ROLE):
                await _reply(
                    send,
                    403,
                    f"token {principal.name} may not start sessions: an MCP client runs "
                    f"skills, which needs the {ROLE} (or admin) role",
                )
                return
            scope[TOKEN_KEY] = principal.name
        session_id = headers.get("mcp-session-id")
        if not session_id:  # initialize: the session gets its id in the answer
            await self.manager.handle_request(scope, receive, send)
            return
        key = f"http:{session_id}"
        self.busy[key] = self.busy.get(key, 0) + 1
        try:
            await self.manager.handle_request(scope, receive, send)
        finally:
            self.busy[key] -= 1
            if not self.busy[key]:
                del self.busy[key]
            if key in self.app.sessions:
                self.last[key] = trio.current_time()
        if scope["method"] == "DELETE":
            self.last.pop(key, None)
            self.nursery.start_soon(self.app.end, key)


async def _lifespan(receive: Receive, send: Send) -> None:
    while True:
        message = await receive()
        if message["type"] == "lifespan.startup":
            await send({"type": "lifespan.startup.complete"})
        elif message["type"] == "lifespan.shutdown":
            await send({"type": "lifespan.shutdown.complete"})
            return


async def _reply(send: Send, status: int, text: str) -> None:
    body = text.encode()
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [(b"content-type", b"text/plain; charset=utf-8")],
        }
    )
    await send({"type": "http.response.body", "body": body})
