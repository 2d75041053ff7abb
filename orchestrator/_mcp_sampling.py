"""An MCP server's sampling requests: the session's model answers a server during one
of its calls (``sampling/createMessage``), under policy, recorded like a model call.

The server must be named by ``policy.mcp.sampling`` (none is by default: a server
that samples spends the session's budget and reads what its model writes, which the
operator grants, not the server), and may ask at most ``max_samples_per_call`` times
per call. Each request is recorded (``mcp.sampled``, its parameters a blob) before
the model is asked, write-ahead, and the answer after (``mcp.sample_answered``, whose
usage the budget counts); a refused request is recorded with the reason and answered
with an error. The model request is a pure function of the recorded parameters and
the session's configuration (:func:`sampling_request`), so replay re-derives it byte
for byte and re-drive answers from the recording with no server and no model.
"""

from __future__ import annotations

import time
from typing import Any

import msgspec
import trio

from ._calls import CallContext
from ._effects import McpProgress
from ._events import McpSampleAnswered, McpSampled, SessionStarted
from ._mcp_elicit import elicit
from ._model import Message, ModelError, ModelRequest, ModelResponse, TextPart, encode_canonical
from ._prompt import request_hash as _request_hash

MAX_PARAMS_BYTES = 1 << 20
"""The largest sampling request (its parameters as JSON) taken up; larger ones are refused."""

_STOP = {"end_turn": "endTurn", "max_tokens": "maxTokens", "stop_sequence": "stopSequence"}


class SamplingRefusedError(ValueError):
    """A sampling request skillog does not take up; the message says why."""


def sampling_request(config: SessionStarted, params: bytes) -> ModelRequest:
    """The canonical model request for a server's sampling parameters (canonical JSON):
    the session's model, the server's ``systemPrompt`` and text messages, at most the
    session's ``max_tokens``, no tools. Raises :class:`SamplingRefusedError` for what
    it cannot carry (content that is not text, a missing or odd field)."""
    try:
        value = msgspec.json.decode(params)
    except msgspec.DecodeError as e:
        raise SamplingRefusedError(f"the parameters are not JSON ({e})") from None
    if not isinstance(value, dict):
        raise SamplingRefusedError("the parameters are not a JSON object")
    messages = value.get("messages")
    if not isinstance(messages, list) or not messages:
        raise SamplingRefusedError("`messages` must be a non-empty list")
    wanted = value.get("maxTokens")
    if not isinstance(wanted, int) or isinstance(wanted, bool) or wanted < 1:
        raise SamplingRefusedError("`maxTokens` must be a positive integer")
    if value.get("tools"):
        raise SamplingRefusedError("skillog does not offer tools to sampling requests")
    system = value.get("systemPrompt") or ""
    if not isinstance(system, str):
        raise SamplingRefusedError("`systemPrompt` must be a string")
    return ModelRequest(
        model=config.model,
        system=system,
        messages=tuple(_message(m, i) for i, m in enumerate(messages)),
        tools=(),
        max_tokens=min(wanted, config.max_tokens),
    )


def _message(message: Any, index: int) -> Message:
    where = f"`messages[{index}]`"
    if not isinstance(message, dict) or message.get("role") not in ("user", "assistant"):
        raise SamplingRefusedError(f"{where} needs the role user or assistant")
    content = message.get("content")
    blocks = content if isinstance(content, list) else [content]
    parts = []
    for block in blocks:
        if not isinstance(block, dict) or block.get("type") != "text":
            kind = block.get("type") if isinstance(block, dict) else type(block).__name__
            raise SamplingRefusedError(f"{where} holds {kind!s} content; skillog samples text only")
        text = block.get("text")
        if not isinstance(text, str):
            raise SamplingRefusedError(f"{where} has a text block without text")
        parts.append(TextPart(text=text))
    return Message(role=message["role"], parts=tuple(parts))


def sampling_result(response: ModelResponse, model: str) -> bytes:
    """What the server receives: the model's text as one assistant message."""
    result = {
        "role": "assistant",
        "content": {"type": "text", "text": response.text},
        "model": response.model or model,
        "stopReason": _STOP.get(response.stop_reason, response.stop_reason),
    }
    return encode_canonical(result)


def oversize_marker(size: int) -> bytes:
    """What stands for parameters over :data:`MAX_PARAMS_BYTES` (not kept: a flood of
    bytes is not worth a blob), recorded in their place."""
    return encode_canonical({"oversized": size})


def oversized(params: bytes) -> int | None:
    """The size :func:`oversize_marker` recorded, or None for real parameters."""
    if len(params) > 40 or not params.startswith(b'{"oversized":'):
        return None
    size = msgspec.json.decode(params).get("oversized")
    return size if isinstance(size, int) else None


QUESTION_KEY = "skillogSampling"
"""Marks skillog's own form asking a human about a sampling request (re-drive leaves it
to the sampling request that asks it)."""


def sampling_question(server: str, index: int, request: ModelRequest) -> bytes:
    """The form ``policy.mcp.sampling_ask`` puts to a human before the model is asked:
    what the server would send the model, and ``approve``/``reason``."""
    text = " / ".join(p.text for m in request.messages for p in m.parts if isinstance(p, TextPart))
    message = (
        f"MCP server {server} asks the session's model (request {index} of its call, "
        f"at most {request.max_tokens} tokens). System: {(request.system or '-')[:300]}. "
        f"Messages: {text[:1000]}. Let it?"
    )
    schema = {
        "type": "object",
        "properties": {"approve": {"type": "boolean"}, "reason": {"type": "string"}},
        "required": ["approve"],
    }
    return encode_canonical({"message": message, "requestedSchema": schema, QUESTION_KEY: index})


def is_sampling_question(params: bytes) -> bool:
    """Whether recorded form parameters are skillog's own sampling question."""
    try:
        value = msgspec.json.decode(params)
    except msgspec.DecodeError:
        return False
    return isinstance(value, dict) and QUESTION_KEY in value


def allows(servers: tuple[str, ...], server: str) -> bool:
    return "*" in servers or server in servers


class CallRequests:
    """What the server of one MCP call asks while it runs (``Effects.call_mcp``'s
    ``requests``): sampling here, forms in ``_mcp_elicit``. Taken one at a time, in
    the order they arrive, so their indices and their events follow one order, which
    re-drive reproduces."""

    def __init__(self, ctx: CallContext, server: str) -> None:
        self._ctx = ctx
        self._server = server
        self._count = 0
        self._forms = 0
        self._lock = trio.Lock()

    def progress(self, progress: str, total: str | None, message: str | None) -> None:
        ctx = self._ctx
        ctx.effects.mcp_progress(
            McpProgress(
                session_id=ctx.session_id,
                call_id=ctx.call.id,
                server=self._server,
                progress=progress,
                total=total,
                message=message,
            )
        )

    async def elicit(self, params: bytes) -> tuple[bytes | None, str | None]:
        async with self._lock:
            index, self._forms = self._forms, self._forms + 1
            return await elicit(self._ctx, self._server, index, params)

    async def sample(self, params: bytes) -> tuple[bytes | None, str | None]:
        async with self._lock:
            index, self._count = self._count, self._count + 1
            return await self._sample(index, params)

    async def _sample(self, index: int, params: bytes) -> tuple[bytes | None, str | None]:
        ctx, server = self._ctx, self._server
        config = ctx.view.config
        rules = config.policy.mcp
        size = oversized(params)
        if size is not None:
            refusal = f"the request is {size} bytes; the limit is {MAX_PARAMS_BYTES}"
        elif not allows(rules.sampling, server) and not allows(rules.sampling_ask, server):
            refusal = (
                f"policy does not let MCP server {server!r} sample the session's model "
                "(policy.mcp.sampling)"
            )
        elif index >= rules.max_samples_per_call:
            refusal = (
                f"MCP server {server!r} asked for more than {rules.max_samples_per_call} "
                "samples during one call (policy.mcp.max_samples_per_call)"
            )
        else:
            refusal = None
        request: ModelRequest | None = None
        if refusal is None:
            try:
                request = sampling_request(config, params)
            except SamplingRefusedError as e:
                refusal = f"skillog cannot take up this sampling request: {e}"
        if request is not None and allows(rules.sampling_ask, server):
            refusal = await self._ask_human(index, request)
            request = None if refusal is not None else request
        digest = ctx.rec.blob(params)
        request_hash = "" if request is None else _request_hash(request)
        await ctx.commit(
            [
                McpSampled(
                    call_id=ctx.call.id,
                    server=server,
                    index=index,
                    params=digest,
                    allowed=request is not None,
                    request_hash=request_hash,
                    reason=refusal or "",
                )
            ]
        )
        if request is None:
            return None, refusal
        start = time.monotonic_ns()
        try:
            response = await ctx.effects.sample(request, call_id=ctx.call.id, index=index)
        except ModelError as e:
            error = str(e)[:2000]
            await ctx.commit([self._answered(index, None, error, start)])
            return None, f"the model failed: {error}"
        await ctx.commit([self._answered(index, response, None, start)])
        return sampling_result(response, config.model), None

    async def _ask_human(self, index: int, request: ModelRequest) -> str | None:
        """Put ``sampling_ask``'s question to a human as skillog's own form of the call
        (recorded like a server's, answered through the same channel); the refusal,
        or None when approved."""
        question = sampling_question(self._server, index, request)
        form, self._forms = self._forms, self._forms + 1
        answer, _ = await elicit(self._ctx, self._server, form, question)
        decided = msgspec.json.decode(answer or b"{}")
        content = decided.get("content") or {}
        if decided.get("action") == "accept" and content.get("approve") is True:
            return None
        why = content.get("reason") or f"the human chose {decided.get('action', 'cancel')}"
        return (
            f"a human did not let MCP server {self._server!r} sample the session's model "
            f"(policy.mcp.sampling_ask): {str(why)[:500]}"
        )

    def _answered(
        self, index: int, response: ModelResponse | None, error: str | None, start: int
    ) -> McpSampleAnswered:
        return McpSampleAnswered(
            call_id=self._ctx.call.id,
            server=self._server,
            index=index,
            response=response,
            error=error,
            duration_ms=(time.monotonic_ns() - start) // 1_000_000,
        )
