"""The OpenAI Chat Completions adapter (optional extra: ``pip install 'skillog[openai]'``).

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
    ToolResult,
    Usage,
    encode_canonical,
)
from ._sdk_adapter import SdkAdapter
from ._translate import check_history, decode_body, texts
from ._wire import WireNames, to_wire

if TYPE_CHECKING:
    import openai

PROVIDER = "openai"

_STOP_REASONS: dict[str, StopReason] = {
    "stop": "end_turn",
    "tool_calls": "tool_use",
    "function_call": "tool_use",
    "length": "max_tokens",
    "content_filter": "refusal",
}


def openai_request(request: ModelRequest, *, model: str) -> dict[str, Any]:
    """The Chat Completions parameters for a canonical request.

    The system prompt is the first message (role ``system``); each tool result is its own
    ``tool`` message, placed before any text of the same canonical message (which follows
    as a ``user`` message), since tool messages must directly follow the assistant's
    calls. ``max_tokens`` is sent as ``max_completion_tokens``. Tool names go out in wire
    form (see :class:`WireNames`, which refuses colliding sets). The ``is_error`` flag of
    a tool result has no place on this wire: the result's text must say it.
    """
    check_history(request, provider=PROVIDER)
    messages: list[dict[str, Any]] = []
    if request.system:
        messages.append({"role": "system", "content": request.system})
    for message in request.messages:
        messages.extend(_messages(message))
    params: dict[str, Any] = {
        "model": model,
        "messages": messages,
        "max_completion_tokens": request.max_tokens,
    }
    if request.cache_key:
        # The same key for every request of a session routes them to the same prompt
        # cache (OpenAI caches prompt prefixes automatically).
        params["prompt_cache_key"] = request.cache_key
    if request.tools:
        params["tools"] = [
            {
                "type": "function",
                "function": {
                    "name": to_wire(t.name),
                    "description": t.description,
                    "parameters": t.input_schema,
                },
            }
            for t in request.tools
        ]
    return params


def _content(parts: list[str]) -> str | list[dict[str, str]]:
    return parts[0] if len(parts) == 1 else [{"type": "text", "text": t} for t in parts]


def _messages(message: Message) -> list[dict[str, Any]]:
    text = texts(message)
    if message.role == "assistant":
        calls = [
            {
                "id": p.id,
                "type": "function",
                "function": {"name": to_wire(p.name), "arguments": p.arguments},
            }
            for p in message.parts
            if isinstance(p, ToolCall)
        ]
        if not text and not calls:
            return []
        out: dict[str, Any] = {"role": "assistant", "content": _content(text) if text else None}
        if calls:
            out["tool_calls"] = calls
        return [out]
    results: list[dict[str, Any]] = [
        {"role": "tool", "tool_call_id": p.call_id, "content": p.content}
        for p in message.parts
        if isinstance(p, ToolResult)
    ]
    images = [p for p in message.parts if isinstance(p, ToolImage)]
    if images:
        # A tool message holds text only: the images of the results follow them as one
        # user message, each after a line naming the call it came from.
        content: list[dict[str, Any]] = []
        for image in images:
            url = f"data:{image.media_type};base64,{base64.b64encode(image.data).decode()}"
            content.append({"type": "text", "text": f"image from tool call {image.call_id}:"})
            content.append({"type": "image_url", "image_url": {"url": url}})
        results.append({"role": "user", "content": content})
    if text:
        results.append({"role": "user", "content": _content(text)})
    return results


class _Function(msgspec.Struct):
    name: str
    arguments: str


class _ToolCall(msgspec.Struct):
    id: str
    function: _Function


class _Message(msgspec.Struct):
    content: str | None = None
    refusal: str | None = None
    tool_calls: list[_ToolCall] | None = None


class _Choice(msgspec.Struct):
    message: _Message
    finish_reason: str | None = None


class _PromptDetails(msgspec.Struct):
    cached_tokens: int | None = None


class _Usage(msgspec.Struct):
    prompt_tokens: int = 0
    completion_tokens: int = 0
    prompt_tokens_details: _PromptDetails | None = None


class _Completion(msgspec.Struct):
    choices: list[_Choice]
    id: str = ""
    model: str = ""
    usage: _Usage | None = None


def openai_response(body: bytes, names: WireNames) -> ModelResponse:
    """The canonical response for a Chat Completions response body (its first choice).

    Text comes before the tool calls, whose ``arguments`` are kept exactly as received
    but must be valid JSON. A refusal becomes the text, with stop reason ``refusal``.
    A body that does not fit raises ``ModelError(kind="malformed")``.
    """
    completion = decode_body(body, _Completion, provider=PROVIDER)
    if not completion.choices:
        raise ModelError(
            f"{PROVIDER}: the API answered with no choices", kind="malformed", retryable=True
        )
    choice = completion.choices[0]
    message = choice.message
    parts: list[TextPart | ToolCall] = []
    stop_reason = _STOP_REASONS.get(choice.finish_reason or "", "other")
    if message.content:
        parts.append(TextPart(text=message.content))
    if message.refusal:
        parts.append(TextPart(text=message.refusal))
        stop_reason = "refusal"
    for index, call in enumerate(message.tool_calls or ()):
        try:
            msgspec.json.decode(call.function.arguments)
        except msgspec.DecodeError as e:
            raise ModelError(
                f"{PROVIDER}: tool call {index} ({call.function.name}) has arguments that "
                f"are not valid JSON ({e}): {call.function.arguments[:200]!r}",
                kind="malformed",
                retryable=True,
            ) from e
        parts.append(
            ToolCall(
                id=call.id,
                name=names.from_wire(call.function.name),
                arguments=call.function.arguments,
            )
        )
    usage = completion.usage or _Usage()
    return ModelResponse(
        parts=tuple(parts),
        stop_reason=stop_reason,
        usage=Usage(
            input_tokens=usage.prompt_tokens,
            output_tokens=usage.completion_tokens,
            cache_read_input_tokens=(
                usage.prompt_tokens_details.cached_tokens or 0
                if usage.prompt_tokens_details is not None
                else 0
            ),
        ),
        model=completion.model,
        id=completion.id,
    )


class ChunkAssembler:
    """Builds, from Chat Completions stream chunks fed one at a time, the completion
    body they amount to (what a request without ``stream`` answers), sending text and
    tool-call deltas to ``on_delta`` as they come (tool names as on the wire). Text is
    index 0 of the deltas, the calls follow it, as in the canonical response."""

    def __init__(self, on_delta: DeltaSink) -> None:
        self.on_delta = on_delta
        self.completion: dict[str, Any] = {}
        self.text: list[str] = []
        self.refusal: list[str] = []
        self.calls: dict[int, dict[str, Any]] = {}
        self.finish_reason: str | None = None
        self.broken = ""  # the error the stream carried, if it did

    def feed(self, chunk: dict[str, Any]) -> None:
        error = chunk.get("error")
        if error:  # the server gave up inside a 200: what came is not an answer
            message = error.get("message") if isinstance(error, dict) else None
            self.broken = self.broken or str(message or error)
        if self.broken:
            return
        for key in ("id", "model"):
            if chunk.get(key):
                self.completion[key] = chunk[key]
        if chunk.get("usage"):
            self.completion["usage"] = chunk["usage"]
        for choice in chunk.get("choices") or ():
            if choice.get("index", 0) != 0:
                continue
            self.finish_reason = choice.get("finish_reason") or self.finish_reason
            delta = choice.get("delta") or {}
            if delta.get("content"):
                self.text.append(delta["content"])
                self.on_delta(Delta(kind="text", index=0, text=delta["content"]))
            if delta.get("refusal"):
                self.refusal.append(delta["refusal"])
            for piece in delta.get("tool_calls") or ():
                self._call(piece)

    def _call(self, piece: dict[str, Any]) -> None:
        index = piece.get("index", 0)
        function = piece.get("function") or {}
        call = self.calls.get(index)
        if call is None:
            call = {"id": piece.get("id", ""), "function": {"name": "", "arguments": ""}}
            self.calls[index] = call
        call["function"]["name"] += function.get("name") or ""
        if piece.get("id") and call["id"] != piece["id"]:
            call["id"] = piece["id"]
        at = 1 + index  # after the text, as the canonical response orders them
        if piece.get("id"):
            self.on_delta(
                Delta(
                    kind="tool_call", index=at, call_id=piece["id"], name=function.get("name", "")
                )
            )
        if function.get("arguments"):
            call["function"]["arguments"] += function["arguments"]
            self.on_delta(Delta(kind="tool_call", index=at, text=function["arguments"]))

    def body(self) -> bytes:
        message: dict[str, Any] = {"role": "assistant", "content": "".join(self.text) or None}
        if self.refusal:
            message["refusal"] = "".join(self.refusal)
        if self.calls:
            message["tool_calls"] = [
                {**self.calls[i], "type": "function"} for i in sorted(self.calls)
            ]
        choice = {"index": 0, "message": message, "finish_reason": self.finish_reason}
        return encode_canonical({**self.completion, "choices": [choice]})


class OpenAIAdapter(SdkAdapter):
    """A :class:`ModelAdapter` for the OpenAI Chat Completions API.

    Without a ``client``, one is made from the environment (``OPENAI_API_KEY``, and
    ``OPENAI_BASE_URL`` if set, which also reaches compatible servers). The SDK's own
    retries are always disabled (``max_retries=0``): the agent loop's bounded retry
    policy is the only one, so every attempt is recorded in the log and retries never
    multiply. ``model`` is used when a request names none.
    """

    PROVIDER = "openai"
    _MODULE = "openai"
    _CLIENT_CLASS = "AsyncOpenAI"
    _BASE_ERROR = "OpenAIError"
    _KEY_VARIABLES = ("OPENAI_API_KEY",)

    def __init__(
        self,
        client: openai.AsyncOpenAI | None = None,
        *,
        model: str = "",
        base_url: str | None = None,
    ) -> None:
        """``base_url`` points the SDK at an OpenAI-compatible server (vLLM, Ollama,
        a LiteLLM proxy, Azure's OpenAI endpoint), e.g. ``http://127.0.0.1:8000/v1``;
        ``OPENAI_BASE_URL`` does the same from the environment."""
        super().__init__(client, model=model, base_url=base_url)

    def _params(self, request: ModelRequest, model: str) -> dict[str, Any]:
        return openai_request(request, model=model)

    async def _create(self, params: dict[str, Any]) -> Any:
        return await self._client.chat.completions.with_raw_response.create(**params)

    async def _stream(self, params: dict[str, Any], on_delta: DeltaSink) -> bytes:
        assembler = ChunkAssembler(on_delta)
        # The raw server-sent events, read to their end (the SDK's stream object stops
        # at [DONE] and leaves its generators for the garbage collector).
        async with self._client.chat.completions.with_streaming_response.create(
            **params, stream=True, stream_options={"include_usage": True}
        ) as response:
            done = False
            async for line in response.iter_lines():
                data = line.removeprefix("data:").strip() if line.startswith("data:") else ""
                done = done or data == "[DONE]"
                if data and data != "[DONE]":
                    assembler.feed(msgspec.json.decode(data))
        # Read to the end even past an error (see above); then neither a stream that
        # carried an error nor one cut before [DONE] is an answer.
        if assembler.broken or not done:
            why = f"broke off: {assembler.broken}" if assembler.broken else "ended before [DONE]"
            raise ModelError(
                f"openai: the stream {why}; the call may be retried",
                kind="connection",
                retryable=True,
            )
        return assembler.body()

    def _response(self, body: bytes, names: WireNames) -> ModelResponse:
        return openai_response(body, names)
