"""The Anthropic and OpenAI adapters over real HTTP: the real SDKs, pointed with
``base_url`` at a local stand-in speaking each provider's wire (JSON and server-sent
event streams, usage with cache fields, a 400 for a request over the context window,
an error event mid-stream). The stand-in records the request bodies, so what goes on
the wire is asserted: cache breakpoints (``cache_control``), ``prompt_cache_key``,
``stream: true``. A streamed answer is held after its first delta until the adapter has
handed that delta out: deltas are shown as they arrive, not after the body."""

from __future__ import annotations

import copy
from collections.abc import Iterator
from typing import Any

import anthropic
import msgspec
import openai
import pytest
from standin import StandIn, anthropic_events, openai_events

from orchestrator._events import CODEC, ModelResponded
from orchestrator._model import Delta, ModelError, ModelRequest, ModelResponse, Usage
from orchestrator.adapters import AnthropicAdapter, OpenAIAdapter


@pytest.fixture
def standin() -> Iterator[StandIn]:
    with StandIn().serving() as running:
        yield running


def recorded(response: ModelResponse) -> bytes:
    """The body ``model.responded`` records for ``response``."""
    return CODEC.encode(
        ModelResponded(turn=1, response=response, duration_ms=0), recorded_at=0
    ).body


def opener(standin: StandIn) -> tuple[list[Delta], Any]:
    """Deltas collected, and a delta callback that opens the stand-in's gate."""
    deltas: list[Delta] = []

    def on_delta(delta: Delta) -> None:
        deltas.append(delta)
        standin.gate.set()

    return deltas, on_delta


# -- Anthropic -----------------------------------------------------------------------


def claude(standin: StandIn, *, cache: bool = True) -> AnthropicAdapter:
    client = anthropic.AsyncAnthropic(api_key="test-key", base_url=standin.url)
    return AnthropicAdapter(client, model="claude-test", cache=cache)


USAGE = {"input_tokens": 11, "output_tokens": 5, "cache_read_input_tokens": 100,
         "cache_creation_input_tokens": 20}  # fmt: skip

MESSAGE = {
    "id": "msg_1", "type": "message", "role": "assistant", "model": "claude-test",
    "content": [
        {"type": "text", "text": "Let me check."},
        {"type": "tool_use", "id": "toolu_1", "name": "skills__load",
         "input": {"names": ["pdf"], "cap": 1.5}},
    ],
    "stop_reason": "tool_use", "stop_sequence": None, "usage": USAGE,
}  # fmt: skip

STREAM = [
    {"type": "message_start", "message": {**MESSAGE, "content": [], "stop_reason": None,
                                          "usage": {**USAGE, "output_tokens": 1}}},
    {"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}},
    {"type": "ping"},
    {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "Let me "}},
    {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "check."}},
    {"type": "content_block_stop", "index": 0},
    {"type": "content_block_start", "index": 1,
     "content_block": {"type": "tool_use", "id": "toolu_1", "name": "skills__load", "input": {}}},
    {"type": "content_block_delta", "index": 1,
     "delta": {"type": "input_json_delta", "partial_json": '{"names": ["pd'}},
    {"type": "content_block_delta", "index": 1,
     "delta": {"type": "input_json_delta", "partial_json": 'f"], "cap": 1.5}'}},
    {"type": "content_block_stop", "index": 1},
    {"type": "message_delta", "delta": {"stop_reason": "tool_use", "stop_sequence": None},
     "usage": {"output_tokens": 5}},
    {"type": "message_stop"},
]  # fmt: skip

OVERFLOW = {
    "type": "error",
    "error": {"type": "invalid_request_error",
              "message": "prompt is too long: 215341 tokens > 200000 maximum"},
}  # fmt: skip


def breakpoints(body: dict[str, Any]) -> list[tuple[str, int, int]]:
    """Where a request marks ``cache_control``: ("system"|"tools", i, 0) or
    ("messages", message, block)."""
    marks = [
        ("system", i, 0) for i, b in enumerate(body.get("system") or []) if "cache_control" in b
    ]
    marks += [
        ("tools", i, 0) for i, t in enumerate(body.get("tools") or []) if "cache_control" in t
    ]
    marks += [
        ("messages", i, j)
        for i, m in enumerate(body["messages"])
        for j, block in enumerate(m["content"] if isinstance(m["content"], list) else [])
        if "cache_control" in block
    ]
    return marks


async def test_anthropic_json_carries_breakpoints_and_records_cache_usage(
    standin: StandIn, request_: ModelRequest
) -> None:
    standin.json(MESSAGE)
    response = await claude(standin).complete(request_)
    (seen,) = standin.requests
    assert seen.path == "/v1/messages"
    key = seen.headers.get("x-api-key") or seen.headers["authorization"].removeprefix("Bearer ")
    assert key == "test-key" and "anthropic-version" in seen.headers
    assert "stream" not in seen.body
    # After tools and system, after the previous request's last message, after this one's.
    assert breakpoints(seen.body) == [("system", 0, 0), ("messages", 0, 0), ("messages", 2, 1)]
    assert seen.body["system"][0]["cache_control"] == {"type": "ephemeral"}
    # Anthropic counts cached input apart; the recorded input is all of it.
    assert response.usage == Usage(
        input_tokens=131, output_tokens=5, cache_read_input_tokens=100,
        cache_creation_input_tokens=20,
    )  # fmt: skip
    # Without caching, no breakpoint at all.
    standin.json(MESSAGE)
    await claude(standin, cache=False).complete(request_)
    assert breakpoints(standin.body) == []


async def test_anthropic_streams_deltas_as_they_arrive_and_records_the_same_bytes(
    standin: StandIn, request_: ModelRequest
) -> None:
    deltas, on_delta = opener(standin)
    standin.stream(anthropic_events(STREAM), hold_after=4)  # held after "Let me "
    streamed = await claude(standin).stream(request_, on_delta)
    assert standin.held
    assert standin.body["stream"] is True
    assert breakpoints(standin.body) == [("system", 0, 0), ("messages", 0, 0), ("messages", 2, 1)]
    standin.json(MESSAGE)
    completed = await claude(standin).complete(request_)
    plain = dict(standin.body)
    streamed_body = dict(standin.requests[0].body)
    del streamed_body["stream"]
    assert streamed_body == plain  # the same request but for `stream`
    assert streamed == completed and recorded(streamed) == recorded(completed)
    assert streamed.usage.cache_read_input_tokens == 100
    assert [(d.kind, d.index, d.text, d.call_id, d.name) for d in deltas] == [
        ("text", 0, "Let me ", "", ""),
        ("text", 0, "check.", "", ""),
        ("tool_call", 1, "", "toolu_1", "skills.load"),
        ("tool_call", 1, '{"names": ["pd', "", ""),
        ("tool_call", 1, 'f"], "cap": 1.5}', "", ""),
    ]


async def test_anthropic_error_event_mid_stream_is_retryable(
    standin: StandIn, request_: ModelRequest
) -> None:
    deltas, on_delta = opener(standin)
    broken = [*STREAM[:4], {"type": "error", "error": {"type": "overloaded_error",
                                                       "message": "Overloaded"}}]  # fmt: skip
    standin.stream(anthropic_events(broken))
    with pytest.raises(ModelError) as info:
        await claude(standin).stream(request_, on_delta)
    assert (info.value.kind, info.value.retryable) == ("connection", True)
    assert "Overloaded" in str(info.value)
    assert [d.text for d in deltas] == ["Let me "]  # what arrived before it broke


# -- OpenAI --------------------------------------------------------------------------


def gpt(standin: StandIn) -> OpenAIAdapter:
    client = openai.AsyncOpenAI(api_key="test-key", base_url=standin.url + "/v1")
    return OpenAIAdapter(client, model="gpt-test")


OPENAI_USAGE = {"prompt_tokens": 2000, "completion_tokens": 4, "total_tokens": 2004,
                "prompt_tokens_details": {"cached_tokens": 1920}}  # fmt: skip

COMPLETION = {
    "id": "chatcmpl-1", "object": "chat.completion", "created": 1, "model": "gpt-test",
    "choices": [{"index": 0, "finish_reason": "tool_calls", "message": {
        "role": "assistant", "content": "Let me check.",
        "tool_calls": [{"id": "call_1", "type": "function",
                        "function": {"name": "skills__load", "arguments": '{"names": ["pdf"]}'}}],
    }}],
    "usage": OPENAI_USAGE,
}  # fmt: skip


def chunk(delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
    return {"id": "chatcmpl-1", "object": "chat.completion.chunk", "created": 1,
            "model": "gpt-test", "choices": [{"index": 0, "delta": delta,
                                              "finish_reason": finish}]}  # fmt: skip


CHUNKS = [
    chunk({"role": "assistant", "content": ""}),
    chunk({"content": "Let me "}),
    chunk({"content": "check."}),
    chunk({"tool_calls": [{"index": 0, "id": "call_1", "type": "function",
                           "function": {"name": "skills__load", "arguments": ""}}]}),
    chunk({"tool_calls": [{"index": 0, "function": {"arguments": '{"names": ["pd'}}]}),
    chunk({"tool_calls": [{"index": 0, "function": {"arguments": 'f"]}'}}]}),
    chunk({}, "tool_calls"),
    {**chunk({}), "choices": [], "usage": OPENAI_USAGE},
]  # fmt: skip

CONTEXT_LENGTH = {
    "error": {
        "message": "This model's maximum context length is 128000 tokens. However, your "
        "messages resulted in 131072 tokens. Please reduce the length of the messages.",
        "type": "invalid_request_error",
        "param": "messages",
        "code": "context_length_exceeded",
    }
}


def keyed(request: ModelRequest) -> ModelRequest:
    return msgspec.structs.replace(request, cache_key="skillog-s1")


async def test_openai_json_carries_the_cache_key_and_records_cached_tokens(
    standin: StandIn, request_: ModelRequest
) -> None:
    standin.json(COMPLETION)
    response = await gpt(standin).complete(keyed(request_))
    (seen,) = standin.requests
    assert seen.path == "/v1/chat/completions"
    assert seen.headers["authorization"] == "Bearer test-key"
    assert seen.body["prompt_cache_key"] == "skillog-s1"
    assert "stream" not in seen.body
    assert response.usage == Usage(input_tokens=2000, output_tokens=4, cache_read_input_tokens=1920)


async def test_openai_streams_deltas_as_they_arrive_and_records_the_same_bytes(
    standin: StandIn, request_: ModelRequest
) -> None:
    deltas, on_delta = opener(standin)
    standin.stream(openai_events(CHUNKS), hold_after=2)  # held after "Let me "
    streamed = await gpt(standin).stream(keyed(request_), on_delta)
    assert standin.held
    body = standin.body
    assert body["stream"] is True and body["stream_options"] == {"include_usage": True}
    assert body["prompt_cache_key"] == "skillog-s1"
    standin.json(COMPLETION)
    completed = await gpt(standin).complete(keyed(request_))
    streamed_body = copy.deepcopy(body)
    del streamed_body["stream"], streamed_body["stream_options"]
    assert streamed_body == standin.body
    assert streamed == completed and recorded(streamed) == recorded(completed)
    assert streamed.usage.cache_read_input_tokens == 1920
    assert [(d.kind, d.index, d.text, d.name) for d in deltas] == [
        ("text", 0, "Let me ", ""),
        ("text", 0, "check.", ""),
        ("tool_call", 1, "", "skills.load"),
        ("tool_call", 1, '{"names": ["pd', ""),
        ("tool_call", 1, 'f"]}', ""),
    ]


async def test_openai_error_mid_stream_is_retryable(
    standin: StandIn, request_: ModelRequest
) -> None:
    deltas, on_delta = opener(standin)
    error = {"error": {"message": "The server had an error while processing your request.",
                       "type": "server_error", "code": None}}  # fmt: skip
    standin.stream(openai_events([*CHUNKS[:2], error]))
    with pytest.raises(ModelError) as info:
        await gpt(standin).stream(request_, on_delta)
    assert (info.value.kind, info.value.retryable) == ("connection", True)
    assert "server had an error" in str(info.value)
    assert [d.text for d in deltas] == ["Let me "]


async def test_openai_stream_cut_short_is_retryable_not_an_answer(
    standin: StandIn, request_: ModelRequest
) -> None:
    """The connection closes after some chunks, before ``[DONE]``: retried, never
    recorded as a (truncated) answer."""
    standin.stream(openai_events(CHUNKS)[:3])
    with pytest.raises(ModelError) as info:
        await gpt(standin).stream(request_, lambda d: None)
    assert (info.value.kind, info.value.retryable) == ("connection", True)
    assert "before [DONE]" in str(info.value)


@pytest.mark.parametrize("streamed", [False, True])
@pytest.mark.parametrize("provider", ["anthropic", "openai"])
async def test_a_request_over_the_window_is_a_context_overflow(
    standin: StandIn, request_: ModelRequest, provider: str, streamed: bool
) -> None:
    """Each provider's 400 for a prompt over the context window (the loop compacts and
    sends the turn once more, docs/context.md; any other 400 ends the session), whether
    the request streamed or not; the message keeps the API's words and request id."""
    if provider == "anthropic":
        standin.json(OVERFLOW, status=400, **{"request-id": "req_1"})
        adapter: AnthropicAdapter | OpenAIAdapter = claude(standin)
        said = "prompt is too long"
    else:
        standin.json(CONTEXT_LENGTH, status=400, **{"x-request-id": "req_1"})
        adapter, said = gpt(standin), "maximum context length"
    with pytest.raises(ModelError) as info:
        if streamed:
            await adapter.stream(request_, lambda d: None)
        else:
            await adapter.complete(request_)
    error = info.value
    assert (error.kind, error.retryable, error.status) == ("context_overflow", False, 400)
    assert said in str(error) and "req_1" in str(error)
    assert standin.body.get("stream", False) is streamed
