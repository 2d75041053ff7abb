"""The one door every request passes: body size limit, JSON-only writes from this
origin, authentication, security headers. Handlers then only check roles.

Callers authenticate with ``Authorization: Bearer TOKEN``, or (the console) with the
``skillog_console`` cookie set by ``POST /api/login``: the id of a console session
(``_console_sessions``), never a token; HttpOnly, so no script on a page can read it,
SameSite=Strict, so no other site's page sends it, Secure when the browser uses https
(``_proxy``). A write must be ``application/json`` (a cross-site form cannot send that
without a CORS preflight, and the service answers none) and, when the browser names an
``Origin``, come from this one. Only the login page, the login call, the liveness probe
and the console's static files are open. A method a path does not take is a 405 naming
the ones it does, before anything else is asked of the request.
"""

from __future__ import annotations

from collections.abc import Sequence

from starlette.datastructures import Headers, MutableHeaders
from starlette.requests import cookie_parser
from starlette.responses import RedirectResponse
from starlette.routing import BaseRoute, Match, Route
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from ._access import access_logged
from ._auth import Principal
from ._context import ServiceContext
from ._errors import ApiError, error_response
from ._proxy import Seen, host_refusal, seen, write_refusal

COOKIE = "skillog_console"
PROBES = frozenset({"/api/live"})
OPEN = frozenset({"/console/login", "/api/login", *PROBES})
STATIC = "/static/"
SECURITY_HEADERS = {
    "x-content-type-options": "nosniff",
    "x-frame-options": "DENY",
    "referrer-policy": "no-referrer",
    "content-security-policy": (
        "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; "
        "connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'"
    ),
}


class Guard:
    def __init__(self, app: ASGIApp, ctx: ServiceContext, routes: Sequence[BaseRoute]) -> None:
        self.app, self.ctx, self.routes = app, ctx, routes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = Headers(scope=scope)
        client = seen(scope, headers, self.ctx.proxying)
        # What the client used, for every reader of the request (url.scheme, client).
        peer = scope.get("client")
        if peer is None or client.client != peer[0]:
            scope["client"] = (client.client, 0)
        scope["scheme"] = client.scheme
        state = scope.setdefault("state", {})
        state["seen"] = client
        send = access_logged(_with_headers(send), scope, headers)
        refusal = self._refuse(scope, headers, client)
        if refusal is not None:
            await refusal(scope, receive, send)
            return
        path: str = scope["path"]
        if path not in OPEN and not path.startswith(STATIC):
            principal = await self._principal(headers)
            if principal is None:
                await _unauthenticated(path, headers)(scope, receive, send)
                return
            state["principal"] = principal
        await self.app(scope, _limited(receive, self.ctx.max_body), send)

    def _refuse(self, scope: Scope, headers: Headers, client: Seen) -> ASGIApp | None:
        if scope["path"] not in PROBES:  # a probe is addressed to the instance, not the site
            wrong_host = host_refusal(client, self.ctx.proxying)
            if wrong_host is not None:
                return error_response(421, wrong_host, "header.host")
        allowed = self._allowed(scope)
        if allowed is not None:
            response = error_response(405, f"{scope['method']} is not allowed here; use {allowed}")
            response.headers["allow"] = allowed
            return response
        length = headers.get("content-length")
        if length is not None and (not length.isdigit() or int(length) > self.ctx.max_body):
            return error_response(413, f"request bodies are limited to {self.ctx.max_body} bytes")
        if scope["method"] in ("GET", "HEAD"):
            return None
        kind = headers.get("content-type", "").split(";")[0].strip().lower()
        if kind != "application/json":
            return error_response(415, "send the request body as application/json")
        cross = write_refusal(headers.get("origin"), client, self.ctx.proxying)
        if cross is not None:
            return error_response(403, cross, "header.origin")
        return None

    def _allowed(self, scope: Scope) -> str | None:
        """The methods the path takes when the request's is not one of them, else None
        (no route, or one that takes it: the router answers)."""
        methods: set[str] = set()
        for route in self.routes:
            match, _ = route.matches(scope)
            if match is Match.FULL:
                return None
            if match is Match.PARTIAL and isinstance(route, Route) and route.methods:
                methods |= route.methods
        return ", ".join(sorted(methods)) if methods else None

    async def _principal(self, headers: Headers) -> Principal | None:
        auth = headers.get("authorization")
        if auth is not None:
            scheme, _, token = auth.partition(" ")
            if scheme.lower() != "bearer" or not token.strip():
                return None
            return await self.ctx.tokens.lookup(token.strip())
        cookie = cookie_parser(headers.get("cookie", "")).get(COOKIE)
        digest = None if not cookie else self.ctx.console.token_of(cookie)
        if digest is None:
            return None
        principal = await self.ctx.tokens.lookup_digest(digest)
        if principal is None:  # the token was removed: so are its console sessions
            self.ctx.console.close_token(digest)
        return principal


def _unauthenticated(path: str, headers: Headers) -> ASGIApp:
    if path == "/" or path.startswith("/console"):
        return RedirectResponse("/console/login", status_code=303)
    what = "invalid or revoked token" if headers.get("authorization") else "no token"
    response = error_response(401, f"{what}: send Authorization: Bearer TOKEN")
    response.headers["www-authenticate"] = 'Bearer realm="skillog"'
    return response


def _limited(receive: Receive, limit: int) -> Receive:
    """Count a body sent without (or beyond) its Content-Length: 413 past ``limit``."""
    seen = 0

    async def wrapped() -> Message:
        nonlocal seen
        message = await receive()
        if message["type"] == "http.request":
            seen += len(message.get("body", b""))
            if seen > limit:
                raise ApiError(413, f"request bodies are limited to {limit} bytes")
        return message

    return wrapped


def _with_headers(send: Send) -> Send:
    async def wrapped(message: Message) -> None:
        if message["type"] == "http.response.start":
            headers = MutableHeaders(scope=message)
            for name, value in SECURITY_HEADERS.items():
                headers.setdefault(name, value)
            headers.setdefault("cache-control", "no-store")
        await send(message)

    return wrapped
