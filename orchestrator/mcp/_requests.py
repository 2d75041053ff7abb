"""What a server asks skillog: ``sampling/createMessage`` while its calls run, handed
to the runtime's handler of the call it belongs to (``ServerRequests``); ``roots/list``
at any time, answered with what the log says it is told (``_mcp_roots``).

MCP does not say which call a server's request belongs to (over stdio nothing links
them), so it goes to the server's oldest call still running; a request while none runs
is refused: skillog answers its servers only on behalf of a call its session made.
"""

from __future__ import annotations

import contextlib
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

import msgspec

from .._effects import ServerRequests
from .._events import McpRoot
from .._mcp_sampling import MAX_PARAMS_BYTES, oversize_marker
from .._model import encode_canonical

INVALID_PARAMS = -32602
"""The JSON-RPC error code of a form skillog cannot put to a human."""

REFUSED = -1
"""The JSON-RPC error code of a refused request (the MCP specification's examples use
it for a refusal by the user)."""


def pick(inflight: Mapping[str, ServerRequests]) -> ServerRequests | None:
    """The handler of the server's oldest call still running."""
    return next(iter(inflight.values()), None)


async def answer_sampling(inflight: Mapping[str, ServerRequests], params: Any) -> Any:
    """The SDK's sampling callback's answer: the result, or the error to send."""
    from mcp.types import CreateMessageResult

    async def ask(handler: ServerRequests, data: bytes) -> tuple[bytes | None, str | None]:
        if len(data) > MAX_PARAMS_BYTES:
            data = oversize_marker(len(data))
        return await handler.sample(data)

    what = "answers sampling requests"
    return await _answer(inflight, params, what, ask, REFUSED, CreateMessageResult)


async def answer_elicitation(inflight: Mapping[str, ServerRequests], params: Any) -> Any:
    """The SDK's elicitation callback's answer: the result, or the error to send."""
    from mcp.types import ElicitResult

    async def ask(handler: ServerRequests, data: bytes) -> tuple[bytes | None, str | None]:
        return await handler.elicit(data)

    what = "puts forms to a human"
    return await _answer(inflight, params, what, ask, INVALID_PARAMS, ElicitResult)


Ask = Callable[[ServerRequests, bytes], Awaitable[tuple[bytes | None, str | None]]]


async def _answer(
    inflight: Mapping[str, ServerRequests],
    params: Any,
    what: str,
    ask: Ask,
    refused: int,
    result_type: Any,
) -> Any:
    """Hand a server's request to the handler of its call: the SDK's result, or an
    ``ErrorData`` (``refused`` its code) with the handler's reason."""
    from mcp.types import ErrorData

    handler = pick(inflight)
    if handler is None:
        message = f"skillog {what} only while one of your tool calls runs"
        return ErrorData(code=REFUSED, message=message)
    wire = params.model_dump(mode="json", by_alias=True, exclude_none=True)
    result, error = await ask(handler, encode_canonical(wire))
    if result is None:
        return ErrorData(code=refused, message=error or "refused")
    return result_type.model_validate(msgspec.json.decode(result))


def answer_roots(roots: tuple[McpRoot, ...]) -> Any:
    """The SDK's roots callback's answer: the roots the log last recorded for the server."""
    from mcp.types import ListRootsResult, Root

    return ListRootsResult(
        roots=[Root.model_validate({"uri": r.uri, "name": r.name}) for r in roots]
    )


async def roots_changed(session: Any) -> None:
    """Send ``notifications/roots/list_changed`` (a server gone quiet is not an error:
    it is told again when it asks). Sent as the typed notification: the SDK's
    ``send_roots_list_changed`` warns (roots are deprecated in the 2026-07-28 revision,
    still what 2025-11-25 servers expect) and may go."""
    from mcp.types import RootsListChangedNotification

    with contextlib.suppress(Exception):
        await session.send_notification(RootsListChangedNotification())
