"""Pure helpers the provider adapters share when translating requests and responses."""

from __future__ import annotations

from typing import TypeVar

import msgspec

from .._model import (
    Message,
    ModelError,
    ModelRequest,
    TextPart,
    ToolCall,
    ToolImage,
    ToolResult,
)

T = TypeVar("T")

_ALLOWED = {
    "assistant": (TextPart, ToolCall),
    "user": (TextPart, ToolResult, ToolImage),
    "tool": (TextPart, ToolResult, ToolImage),
}


def check_history(request: ModelRequest, *, provider: str) -> None:
    """Refuse a history no provider accepts: tool calls outside assistant messages, tool
    results inside them. Such a request is a bug in the caller, so it is not retryable."""
    for index, message in enumerate(request.messages):
        allowed = _ALLOWED[message.role]
        for part_index, part in enumerate(message.parts):
            if not isinstance(part, allowed):
                raise ModelError(
                    f"{provider}: request message {index} (role {message.role}) holds a "
                    f"{type(part).__name__} at part {part_index}; tool calls belong in "
                    "assistant messages and tool results in tool messages",
                    kind="other",
                )


def model_name(request: ModelRequest, default: str, *, provider: str) -> str:
    """The model to call: the request's, else the adapter's default."""
    model = request.model or default
    if not model:
        raise ModelError(
            f"{provider}: no model named: set ModelRequest.model or the adapter's model",
            kind="other",
        )
    return model


def texts(message: Message) -> list[str]:
    """The message's non-empty texts (providers refuse empty text blocks)."""
    return [p.text for p in message.parts if isinstance(p, TextPart) and p.text]


def decode_body(body: bytes, type_: type[T], *, provider: str) -> T:
    """Decode a response body strictly; a body that does not fit is ``malformed``."""
    try:
        return msgspec.json.decode(body, type=type_)
    except msgspec.DecodeError as e:
        raise ModelError(
            f"{provider}: the API answered with a malformed body: {e} "
            f"(first bytes: {body[:120]!r})",
            kind="malformed",
            retryable=True,
        ) from e
