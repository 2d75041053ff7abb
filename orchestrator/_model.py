"""The canonical model request and response, and the adapter protocol.

One provider-neutral shape for what the model is shown and what it answers. The
composer builds a :class:`ModelRequest`; adapters translate it to a provider's API and
translate the answer back to a :class:`ModelResponse`. Everything here is frozen and
float-free so it can be hashed and logged byte-for-byte.
"""

from __future__ import annotations

import itertools
from collections.abc import Awaitable, Callable, Iterator, Sequence
from typing import Any, Literal, Protocol, overload, runtime_checkable

import msgspec

from eventlog import SkillogError


class TextPart(msgspec.Struct, frozen=True, kw_only=True, tag="text"):
    """Plain text from the user or the model."""

    text: str


class ToolCall(msgspec.Struct, frozen=True, kw_only=True, tag="tool_call"):
    """A tool call the model made. ``arguments`` is the JSON text exactly as received,
    kept as text so that a provider's float formatting never reaches a hash."""

    id: str
    name: str
    arguments: str


class ToolResult(msgspec.Struct, frozen=True, kw_only=True, tag="tool_result"):
    """The answer to one tool call, as the model will read it."""

    call_id: str
    content: str
    is_error: bool = False


class ToolImage(msgspec.Struct, frozen=True, kw_only=True, tag="tool_image"):
    """An image a tool call returned, shown to the model with the call's result (an MCP
    tool's image block, a PNG a skill's ``skills.read`` returned). The canonical request
    names it by ``digest``, the sha256 of its bytes, a blob of the session: the digest
    binds the bytes, so the request stays byte-reproducible. ``data`` carries the bytes
    to the adapter only (filled in just before the call by :func:`with_image_data`);
    it is never part of the canonical bytes."""

    call_id: str
    media_type: str
    digest: str
    data: bytes = b""


Part = TextPart | ToolCall | ToolResult | ToolImage
Role = Literal["user", "assistant", "tool"]


class Message(msgspec.Struct, frozen=True, kw_only=True):
    """One entry of the append-only history. Tool results travel as role ``tool``."""

    role: Role
    parts: tuple[Part, ...]


class ToolSpec(msgspec.Struct, frozen=True, kw_only=True):
    """A tool offered to the model. ``input_schema`` is a JSON Schema object; schemas
    built by skillog hold no floats."""

    name: str
    description: str
    input_schema: dict[str, Any]


class History(Sequence[Message]):
    """The first ``count`` messages of a history that only grows (a session state's
    list, which a compaction replaces rather than edits): a request's messages without
    copying the whole history every turn. Read-only; a slice is a tuple (of the slice
    only), and it equals any sequence of the same messages."""

    __slots__ = ("_count", "_messages")

    def __init__(self, messages: list[Message], count: int | None = None) -> None:
        self._messages = messages
        self._count = len(messages) if count is None else count

    def __len__(self) -> int:
        return self._count

    @overload
    def __getitem__(self, index: int) -> Message: ...

    @overload
    def __getitem__(self, index: slice) -> tuple[Message, ...]: ...

    def __getitem__(self, index: int | slice) -> Message | tuple[Message, ...]:
        if isinstance(index, slice):
            return tuple(self._messages[slice(*index.indices(self._count))])
        if not -self._count <= index < self._count:
            raise IndexError("history index out of range")
        return self._messages[index % self._count]

    def __iter__(self) -> Iterator[Message]:
        return itertools.islice(self._messages, self._count)

    def __eq__(self, other: object) -> bool:
        if isinstance(other, History) and other._messages is self._messages:
            return other._count == self._count  # the same history: the same prefix
        if not isinstance(other, Sequence) or isinstance(other, str | bytes):
            return NotImplemented
        # Compared as tuples: in C, and identical items by identity first.
        return len(other) == self._count and tuple(self) == tuple(other)

    def __hash__(self) -> int:
        return hash(tuple(self))

    def startswith(self, prefix: Sequence[Message]) -> bool:
        """Whether these messages begin with ``prefix`` (an earlier request's: at no
        cost when it is a view of the same history)."""
        if isinstance(prefix, History) and prefix._messages is self._messages:
            return prefix._count <= self._count
        return len(prefix) <= self._count and self[: len(prefix)] == tuple(prefix)

    def __repr__(self) -> str:
        return f"History({self._count} messages)"


class ModelRequest(msgspec.Struct, frozen=True, kw_only=True):
    """Everything one model call is given. ``cache_key`` names the session for a
    provider's prompt-cache routing (OpenAI's ``prompt_cache_key``): the same for every
    request of a session, derived from its id, and not part of the canonical request
    bytes (docs/context.md). ``messages``: a tuple, or a :class:`History` of the
    session's (the runtime composes with one)."""

    model: str
    system: str
    messages: Sequence[Message]
    tools: tuple[ToolSpec, ...]
    max_tokens: int
    cache_key: str = ""


class Usage(msgspec.Struct, frozen=True, kw_only=True):
    """Tokens of one call as the provider reported them. ``input_tokens`` counts every
    input token (cached or not, as OpenTelemetry counts them); of those,
    ``cache_read_input_tokens`` were read from the provider's prompt cache and
    ``cache_creation_input_tokens`` written to it (Anthropic's
    ``cache_read_input_tokens``/``cache_creation_input_tokens``, OpenAI's
    ``prompt_tokens_details.cached_tokens``)."""

    input_tokens: int = 0
    output_tokens: int = 0
    cache_read_input_tokens: int = 0
    cache_creation_input_tokens: int = 0


StopReason = Literal["end_turn", "tool_use", "max_tokens", "stop_sequence", "refusal", "other"]


class ModelResponse(msgspec.Struct, frozen=True, kw_only=True):
    """What the model answered: text and tool calls in order."""

    parts: tuple[TextPart | ToolCall, ...]
    stop_reason: StopReason
    usage: Usage = Usage()
    model: str = ""
    id: str = ""

    @property
    def tool_calls(self) -> tuple[ToolCall, ...]:
        return tuple(p for p in self.parts if isinstance(p, ToolCall))

    @property
    def text(self) -> str:
        return "".join(p.text for p in self.parts if isinstance(p, TextPart))


class Delta(msgspec.Struct, frozen=True, kw_only=True):
    """A piece of a response as it streams in, for observers only: never recorded, never
    hashed (the recorded ``model.responded`` is the same streamed or not). ``kind``
    ``text``: ``text`` was added to the text part at ``index``; ``tool_call``: the call
    at ``index`` started (``call_id`` and ``name`` set) or its arguments grew by
    ``text`` (JSON, partial)."""

    kind: Literal["text", "tool_call"]
    index: int
    text: str = ""
    call_id: str = ""
    name: str = ""


DeltaSink = Callable[[Delta], None]
"""Where an adapter's :meth:`StreamingAdapter.stream` sends deltas as they arrive."""


ModelErrorKind = Literal[
    "rate_limited", "timeout", "connection", "http", "malformed", "context_overflow", "other"
]


class ModelError(SkillogError):
    """A model call failed. ``kind`` says how; ``retryable`` whether trying again may help;
    ``retry_after_ms`` is the provider's hint, when it gave one."""

    def __init__(
        self,
        message: str,
        *,
        kind: ModelErrorKind = "other",
        retryable: bool = False,
        retry_after_ms: int | None = None,
        status: int | None = None,
    ) -> None:
        super().__init__(message)
        self.kind: ModelErrorKind = kind
        self.retryable = retryable
        self.retry_after_ms = retry_after_ms
        self.status = status


@runtime_checkable
class ModelAdapter(Protocol):
    """Translates one canonical request to a provider and back.

    ``provider`` is the OpenTelemetry ``gen_ai.provider.name`` (``anthropic``, ``openai``,
    or ``skillog.scripted``). ``complete`` raises :class:`ModelError` on failure.
    """

    @property
    def provider(self) -> str: ...

    async def complete(self, request: ModelRequest) -> ModelResponse: ...


@runtime_checkable
class StreamingAdapter(ModelAdapter, Protocol):
    """An adapter that can also stream: ``stream`` sends deltas to ``on_delta`` as they
    arrive and returns the same :class:`ModelResponse` ``complete`` would have."""

    async def stream(self, request: ModelRequest, on_delta: DeltaSink) -> ModelResponse: ...


_encoder = msgspec.json.Encoder(order="sorted")
_message_decoder = msgspec.json.Decoder(Message)
_response_decoder = msgspec.json.Decoder(ModelResponse)


def encode_canonical(value: object) -> bytes:
    """Canonical JSON: msgspec, keys sorted. The same value gives the same bytes anywhere."""
    return _encoder.encode(value)


async def with_image_data(
    request: ModelRequest, get_blob: Callable[[str], Awaitable[bytes]]
) -> ModelRequest:
    """``request`` with each image's bytes filled in from the blob store, for the
    adapter; the same canonical bytes (``request_hash``) as ``request``."""
    if not any(isinstance(p, ToolImage) for m in request.messages for p in m.parts):
        return request
    messages = []
    for message in request.messages:
        parts: list[Part] = []
        for part in message.parts:
            if isinstance(part, ToolImage) and not part.data:
                part = msgspec.structs.replace(part, data=await get_blob(part.digest))
            parts.append(part)
        messages.append(Message(role=message.role, parts=tuple(parts)))
    return msgspec.structs.replace(request, messages=tuple(messages))


def decode_message(data: bytes) -> Message:
    return _message_decoder.decode(data)


def decode_response(data: bytes) -> ModelResponse:
    return _response_decoder.decode(data)
