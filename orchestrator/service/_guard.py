"""The one door every request passes: body size limit, JSON-only writes from this
origin, authentication, security headers. Handlers then only check roles.

Callers authenticate with ``Authorization: Bearer TOKEN``, or (the console) with the
``skillog_token`` cookie set by ``POST /api/login``: HttpOnly, so no script on a page
can read it, and SameSite=Strict, so no other site's page sends it. A write must be
``application/json`` (a cross-site form cannot send that without a CORS preflight, and
the service answers none) and, when the browser names an ``Origin``, come from this
one. Only the login page, the login call and the console's static files are open.
"""

from __future__ import annotations

from starlette.datastructures import Headers, MutableHeaders
from starlette.requests import cookie_parser
from starlette.responses import RedirectResponse
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from ._auth import Principal
from ._context import ServiceContext
from ._errors import ApiError, error_response

COOKIE = "skillog_token"
PUBLIC = ("/console/login", "/api/login", "/static/")
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
    def __init__(self, app: ASGIApp, ctx: ServiceContext) -> None:
        self.app, self.ctx = app, ctx

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        send = _with_headers(send)
        headers = Headers(scope=scope)
        refusal = self._refuse(scope, headers)
        if refusal is not None:
            await refusal(scope, receive, send)
            return
        path: str = scope["path"]
        if not path.startswith(PUBLIC):
            principal = await self._principal(headers)
            if principal is None:
                await _unauthenticated(path, headers)(scope, receive, send)
                return
            scope.setdefault("state", {})["principal"] = principal
        await self.app(scope, _limited(receive, self.ctx.max_body), send)

    def _refuse(self, scope: Scope, headers: Headers) -> ASGIApp | None:
        length = headers.get("content-length")
        if length is not None and (not length.isdigit() or int(length) > self.ctx.max_body):
            return error_response(413, f"request bodies are limited to {self.ctx.max_body} bytes")
        if scope["method"] in ("GET", "HEAD"):
            return None
        kind = headers.get("content-type", "").split(";")[0].strip().lower()
        if kind != "application/json":
            return error_response(415, "send the request body as application/json")
        origin = headers.get("origin")
        host = headers.get("host")
        if origin is not None and origin not in (f"http://{host}", f"https://{host}"):
            return error_response(403, "cross-origin writes are refused", "header.origin")
        return None

    async def _principal(self, headers: Headers) -> Principal | None:
        auth = headers.get("authorization")
        if auth is not None:
            scheme, _, token = auth.partition(" ")
            if scheme.lower() != "bearer" or not token.strip():
                return None
            return await self.ctx.tokens.lookup(token.strip())
        cookie = cookie_parser(headers.get("cookie", "")).get(COOKIE)
        return None if not cookie else await self.ctx.tokens.lookup(cookie)


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
