"""The access log: one line per request, in the Combined Log Format nginx and Apache
write (so the tools that read theirs read this), on the ``skillog.access`` logger.

The user field is the token's name (a console login shows its token's), so an
operator sees who was refused (401) and who approved or denied what (the path names
the session and the call). No header value is logged but the user agent and referer,
and no body: a token, a cookie or a task never reaches the log. Every field a client
chose is quoted with its control characters, quotes and backslashes escaped.
"""

from __future__ import annotations

import logging
import time

from starlette.datastructures import Headers
from starlette.types import Message, Scope, Send

from eventlog._terminal import visible

access = logging.getLogger("skillog.access")


def _quoted(text: str) -> str:
    return visible(text.replace("\\", "\\\\").replace('"', '\\"'))


def line(scope: Scope, headers: Headers, status: int, size: int, now: float) -> str:
    client = scope.get("client")
    principal = scope.get("state", {}).get("principal")
    user = "-" if principal is None else _quoted(principal.name)
    target = scope.get("raw_path", scope["path"].encode()).decode("latin-1")
    if scope.get("query_string"):
        target += "?" + scope["query_string"].decode("latin-1")
    request = f"{scope['method']} {target} HTTP/{scope.get('http_version', '1.1')}"
    stamp = time.strftime("%d/%b/%Y:%H:%M:%S +0000", time.gmtime(now))
    return (
        f'{client[0] if client else "-"} - {user} [{stamp}] "{_quoted(request)}" {status} '
        f'{size or "-"} "{_quoted(headers.get("referer", "-"))}" '
        f'"{_quoted(headers.get("user-agent", "-"))}"'
    )


def access_logged(send: Send, scope: Scope, headers: Headers) -> Send:
    """``send``, logging the request when its response starts streaming or ends."""
    status, size = 0, 0

    async def wrapped(message: Message) -> None:
        nonlocal status, size
        if message["type"] == "http.response.start":
            status = message["status"]
        elif message["type"] == "http.response.body":
            size += len(message.get("body", b""))
            if not message.get("more_body", False) or scope["path"].endswith("/stream"):
                if status and access.isEnabledFor(logging.INFO):
                    access.info("%s", line(scope, headers, status, size, time.time()))
                status = 0  # once per request (a stream logs when it opens)
        await send(message)

    return wrapped
