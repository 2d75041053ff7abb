"""The Anthropic Messages API adapter (optional extra: ``pip install 'skillog[anthropic]'``).

The SDK is imported when an adapter is constructed, never when this module is, so
``orchestrator.adapters`` imports without it.
"""

from __future__ import annotations

import base64
from typing import TYPE_CHECKING, Any

import msgspec

from .._model import (
    Message,
    ModelError,
    ModelRequest,
    ModelResponse,
    StopReason,
    TextPart,
    ToolCall,
    ToolImage,
    Usage,
    encode_canonical,
)
from ._sdk_adapter import SdkAdapter
from ._translate import check_history, decode_body
from ._wire import WireNames, to_wire

if TYPE_CHECKING:
    import anthropic

PROVIDER = "anthropic"

_STOP_REASONS: dict[str, StopReason] = {
    "end_turn": "end_turn",
    "tool_use": "tool_use",
    "max_tokens": "max_tokens",
    "model_context_window_exceeded": "max_tokens",
    "stop_sequence": "stop_sequence",
    "refusal": "refusal",
}


def anthropic_request(request: ModelRequest, *, model: str) -> dict[str, Any]:
    """The Messages API parameters for a canonical request.

    The system prompt goes in ``system``; tool results travel as ``tool_result`` blocks
    in a user message; consecutive messages that land on the same wire role are merged
    (the API would merge them anyway, and a tool result must open its user turn).
    Empty texts and messages left empty are dropped, since the API refuses them. Tool
    names go out in wire form (see :class:`WireNames`, which refuses colliding sets).
    """
    check_history(request, provider=PROVIDER)
    messages: list[dict[str, Any]] = []
    for message in request.messages:
        role = "assistant" if message.role == "assistant" else "user"
        blocks = _blocks(message)
        if not blocks:
            continue
        if messages and messages[-1]["role"] == role:
            messages[-1]["content"].extend(blocks)
        else:
            messages.append({"role": role, "content": blocks})
    params: dict[str, Any] = {
        "model": model,
        "max_tokens": request.max_tokens,
        "messages": messages,
    }
    if request.system:
        params["system"] = request.system
    if request.tools:
        params["tools"] = [
            {"name": to_wire(t.name), "description": t.description, "input_schema": t.input_schema}
            for t in request.tools
        ]
    return params


def _blocks(message: Message) -> list[dict[str, Any]]:
    blocks: list[dict[str, Any]] = []
    for part in message.parts:
        if isinstance(part, TextPart):
            if part.text:
                blocks.append({"type": "text", "text": part.text})
        elif isinstance(part, ToolCall):
            blocks.append(
                {
                    "type": "tool_use",
                    "id": part.id,
                    "name": to_wire(part.name),
                    "input": _input_object(part.arguments),
                }
            )
        elif isinstance(part, ToolImage):
            _attach_image(blocks, part)
        else:
            block: dict[str, Any] = {
                "type": "tool_result",
                "tool_use_id": part.call_id,
                "content": part.content,
            }
            if part.is_error:
                block["is_error"] = True
            blocks.append(block)
    if message.role != "assistant":
        # The API wants a user turn's tool results before its text; the sort is stable.
        blocks.sort(key=lambda b: b["type"] != "tool_result")
    return blocks


def _attach_image(blocks: list[dict[str, Any]], image: ToolImage) -> None:
    """An image goes into its call's ``tool_result`` (whose content becomes a list of
    blocks); one whose result is not in this message travels as a block of its own."""
    source = {
        "type": "base64",
        "media_type": image.media_type,
        "data": base64.b64encode(image.data).decode(),
    }
    block = {"type": "image", "source": source}
    for result in reversed(blocks):
        if result["type"] == "tool_result" and result["tool_use_id"] == image.call_id:
            if isinstance(result["content"], str):
                result["content"] = [{"type": "text", "text": result["content"]}]
            result["content"].append(block)
            return
    blocks.append(block)


def _input_object(arguments: str) -> dict[str, Any]:
    # A call whose arguments were not a JSON object (a malformed call the runtime already
    # answered with an error) is replayed as {}: the API only takes an object here.
    try:
        value = msgspec.json.decode(arguments)
    except msgspec.DecodeError:
        return {}
    return value if isinstance(value, dict) else {}


class _Usage(msgspec.Struct):
    input_tokens: int = 0
    output_tokens: int = 0
    cache_creation_input_tokens: int | None = None
    cache_read_input_tokens: int | None = None


class _Message(msgspec.Struct):
    content: list[dict[str, Any]]
    stop_reason: str
    id: str = ""
    model: str = ""
    usage: _Usage = msgspec.field(default_factory=_Usage)


class _TextBlock(msgspec.Struct):
    text: str


class _ToolUseBlock(msgspec.Struct):
    id: str
    name: str
    input: dict[str, Any]


def anthropic_response(body: bytes, names: WireNames) -> ModelResponse:
    """The canonical response for a Messages API response body.

    Text and ``tool_use`` blocks are kept in order (other block types, such as thinking,
    are dropped); a tool call's ``input`` object becomes canonical JSON text (sorted
    keys); input tokens include cache reads and writes, as OpenTelemetry counts them.
    A body that does not fit raises ``ModelError(kind="malformed")``.
    """
    message = decode_body(body, _Message, provider=PROVIDER)
    parts: list[TextPart | ToolCall] = []
    for index, block in enumerate(message.content):
        kind = block.get("type")
        try:
            if kind == "text":
                parts.append(TextPart(text=msgspec.convert(block, _TextBlock).text))
            elif kind == "tool_use":
                use = msgspec.convert(block, _ToolUseBlock)
                parts.append(
                    ToolCall(
                        id=use.id,
                        name=names.from_wire(use.name),
                        arguments=encode_canonical(use.input).decode(),
                    )
                )
        except msgspec.ValidationError as e:
            raise ModelError(
                f"{PROVIDER}: malformed {kind} block at $.content[{index}]: {e}",
                kind="malformed",
                retryable=True,
            ) from e
    usage = message.usage
    cached = (usage.cache_creation_input_tokens or 0) + (usage.cache_read_input_tokens or 0)
    return ModelResponse(
        parts=tuple(parts),
        stop_reason=_STOP_REASONS.get(message.stop_reason, "other"),
        usage=Usage(input_tokens=usage.input_tokens + cached, output_tokens=usage.output_tokens),
        model=message.model,
        id=message.id,
    )


class AnthropicAdapter(SdkAdapter):
    """A :class:`ModelAdapter` for the Anthropic Messages API.

    Without a ``client``, one is made from the environment (``ANTHROPIC_API_KEY``, and
    ``ANTHROPIC_BASE_URL`` if set). The SDK's own retries are always disabled
    (``max_retries=0``): the agent loop's bounded retry policy is the only one, so every
    attempt is recorded in the log and retries never multiply. ``model`` is used when a
    request names none.
    """

    PROVIDER = "anthropic"
    _MODULE = "anthropic"
    _CLIENT_CLASS = "AsyncAnthropic"
    _BASE_ERROR = "AnthropicError"
    _KEY_VARIABLES = ("ANTHROPIC_API_KEY", "ANTHROPIC_AUTH_TOKEN")

    def __init__(self, client: anthropic.AsyncAnthropic | None = None, *, model: str = "") -> None:
        super().__init__(client, model=model)

    def _params(self, request: ModelRequest, model: str) -> dict[str, Any]:
        return anthropic_request(request, model=model)

    async def _create(self, params: dict[str, Any]) -> Any:
        return await self._client.messages.with_raw_response.create(**params)

    def _response(self, body: bytes, names: WireNames) -> ModelResponse:
        return anthropic_response(body, names)
