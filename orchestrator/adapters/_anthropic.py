"""The Anthropic Messages API adapter (optional extra: ``pip install 'skillog[anthropic]'``).

The SDK is imported when an adapter is constructed, never when this module is, so
``orchestrator.adapters`` imports without it.
"""

from __future__ import annotations

import base64
from typing import TYPE_CHECKING, Any

import msgspec

from .._model import (
    Delta,
    DeltaSink,
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


CACHE_CONTROL = {"type": "ephemeral"}
MAX_BREAKPOINTS = 4  # the API's limit of cache_control blocks per request


def anthropic_request(request: ModelRequest, *, model: str, cache: bool = True) -> dict[str, Any]:
    """The Messages API parameters for a canonical request.

    The system prompt goes in ``system``; tool results travel as ``tool_result`` blocks
    in a user message; consecutive messages that land on the same wire role are merged
    (the API would merge them anyway, and a tool result must open its user turn).
    Empty texts and messages left empty are dropped, since the API refuses them. Tool
    names go out in wire form (see :class:`WireNames`, which refuses colliding sets).

    With ``cache``, prompt-caching breakpoints (``cache_control``) mark what the next
    request repeats, in the API's cache order (tools, system, messages): after the
    system prompt (after the tools when there is none), after the last message of the
    previous request (the one before the last answer: a cache the previous request
    wrote is read there however many blocks were added since), and after the last
    message (written for the next request). When skills are active, the system prompt
    travels as two blocks, the active skills' instructions in the second, with a
    breakpoint after each: a skill loaded or unloaded leaves the first one's prefix
    cached. At most the API's four (docs/context.md).
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
    if cache:
        _mark_breakpoints(params, messages)
    return params


ACTIVE_BLOCK = "\n\n<active_skills>"  # the system prompt's mutable end (orchestrator._prompt)


def _mark_breakpoints(params: dict[str, Any], messages: list[dict[str, Any]]) -> None:
    marked: list[dict[str, Any]] = []
    if "system" in params:
        # Loading or unloading a skill rewrites the active skills' block at the end of
        # the system prompt: a breakpoint before it keeps tools, rules and catalog
        # cached across the change (bench/long_session.py --skill-every measures it).
        stable, cut, active = params["system"].partition(ACTIVE_BLOCK)
        blocks = [{"type": "text", "text": stable}]
        if cut and stable:
            blocks.append({"type": "text", "text": cut + active})
        params["system"] = blocks
        marked += blocks
    elif "tools" in params:
        marked.append(params["tools"][-1])
    ends = [len(messages) - 3, len(messages) - 1]  # the previous request's end, this one's
    for index in ends:
        if index >= 0 and messages[index]["content"]:
            marked.append(messages[index]["content"][-1])
    for block in marked[:MAX_BREAKPOINTS]:
        block["cache_control"] = CACHE_CONTROL


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
    keys); input tokens include cache reads and writes, as OpenTelemetry counts them,
    and the usage says how many of them each was.
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
    read, written = usage.cache_read_input_tokens or 0, usage.cache_creation_input_tokens or 0
    return ModelResponse(
        parts=tuple(parts),
        stop_reason=_STOP_REASONS.get(message.stop_reason, "other"),
        usage=Usage(
            input_tokens=usage.input_tokens + read + written,
            output_tokens=usage.output_tokens,
            cache_read_input_tokens=read,
            cache_creation_input_tokens=written,
        ),
        model=message.model,
        id=message.id,
    )


class StreamAssembler:
    """Builds, from a stream of server-sent events fed one at a time, the Messages API
    body they amount to (the same JSON a request without ``stream`` answers), sending
    text and tool-call deltas to ``on_delta`` as they come (tool names as on the wire)."""

    def __init__(self, on_delta: DeltaSink) -> None:
        self.on_delta = on_delta
        self.message: dict[str, Any] = {"content": []}
        self._partial: dict[int, list[str]] = {}

    def feed(self, event: dict[str, Any]) -> None:
        kind = event.get("type")
        content: list[dict[str, Any]] = self.message["content"]
        if kind == "message_start":
            self.message = {**event["message"], "content": content}
        elif kind == "content_block_start":
            index, block = event["index"], dict(event["content_block"])
            content.append(block)
            if block.get("type") == "tool_use":
                self._partial[index] = []
                self.on_delta(
                    Delta(kind="tool_call", index=index, call_id=block["id"], name=block["name"])
                )
        elif kind == "content_block_delta":
            index, delta = event["index"], event["delta"]
            if delta.get("type") == "text_delta":
                content[index]["text"] = content[index].get("text", "") + delta["text"]
                self.on_delta(Delta(kind="text", index=index, text=delta["text"]))
            elif delta.get("type") == "input_json_delta":
                self._partial[index].append(delta["partial_json"])
                self.on_delta(Delta(kind="tool_call", index=index, text=delta["partial_json"]))
        elif kind == "content_block_stop":
            text = "".join(self._partial.pop(event["index"], []))
            if text:
                content[event["index"]]["input"] = msgspec.json.decode(text)
        elif kind == "message_delta":
            self.message.update({k: v for k, v in event["delta"].items() if v is not None})
            usage = dict(self.message.get("usage") or {})
            usage.update({k: v for k, v in (event.get("usage") or {}).items() if v is not None})
            self.message["usage"] = usage
        elif kind == "error":
            error = event.get("error") or {}
            raise ModelError(
                f"{PROVIDER}: the stream broke off: {error.get('message', error)}",
                kind="rate_limited" if error.get("type") == "overloaded_error" else "connection",
                retryable=True,
            )

    def body(self) -> bytes:
        return encode_canonical(self.message)


class AnthropicAdapter(SdkAdapter):
    """A :class:`ModelAdapter` for the Anthropic Messages API.

    Without a ``client``, one is made from the environment (``ANTHROPIC_API_KEY``, and
    ``ANTHROPIC_BASE_URL`` if set). The SDK's own retries are always disabled
    (``max_retries=0``): the agent loop's bounded retry policy is the only one, so every
    attempt is recorded in the log and retries never multiply. ``model`` is used when a
    request names none. ``cache``: mark prompt-caching breakpoints (on by default; see
    :func:`anthropic_request`).
    """

    PROVIDER = "anthropic"
    _MODULE = "anthropic"
    _CLIENT_CLASS = "AsyncAnthropic"
    _BASE_ERROR = "AnthropicError"
    _KEY_VARIABLES = ("ANTHROPIC_API_KEY", "ANTHROPIC_AUTH_TOKEN")

    def __init__(
        self, client: anthropic.AsyncAnthropic | None = None, *, model: str = "", cache: bool = True
    ) -> None:
        super().__init__(client, model=model)
        self.cache = cache

    def _params(self, request: ModelRequest, model: str) -> dict[str, Any]:
        return anthropic_request(request, model=model, cache=self.cache)

    async def _create(self, params: dict[str, Any]) -> Any:
        return await self._client.messages.with_raw_response.create(**params)

    def _response(self, body: bytes, names: WireNames) -> ModelResponse:
        return anthropic_response(body, names)

    async def _stream(self, params: dict[str, Any], on_delta: DeltaSink) -> bytes:
        assembler = StreamAssembler(on_delta)
        stream = await self._client.messages.create(**params, stream=True)
        async with stream:  # closed however it ends
            async for event in stream:
                assembler.feed(event.to_dict())
        return assembler.body()
