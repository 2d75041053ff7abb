"""The Anthropic adapter, through the real SDK client with canned HTTP responses."""

from __future__ import annotations

from typing import Any

import anthropic
import httpx2
import msgspec
import pytest

from orchestrator._model import (
    Message,
    ModelError,
    ModelRequest,
    TextPart,
    ToolCall,
    ToolResult,
    ToolSpec,
    Usage,
)
from orchestrator.adapters import AnthropicAdapter, ToolNameError

Canned = Any  # the `canned` fixture's class; conftest cannot be imported in importlib mode


def adapter(canned: Canned, *, cache: bool = True, **options: Any) -> AnthropicAdapter:
    client = anthropic.AsyncAnthropic(
        api_key="test-key", http_client=canned.http_client(), **options
    )
    return AnthropicAdapter(client, cache=cache)


def message(content: list[dict[str, Any]], stop_reason: str = "end_turn", **extra: Any) -> Any:
    return {
        "id": "msg_1",
        "type": "message",
        "role": "assistant",
        "model": "claude-test",
        "content": content,
        "stop_reason": stop_reason,
        "stop_sequence": None,
        "usage": {"input_tokens": 11, "output_tokens": 7},
        **extra,
    }


async def test_request_body_carries_system_history_tool_results_and_wire_names(
    canned: Canned, request_: ModelRequest
) -> None:
    canned.json(message([{"type": "text", "text": "ok"}]))
    await adapter(canned, cache=False).complete(request_)

    sent = canned.requests[0]
    assert sent.url.path == "/v1/messages"
    # The key travels in whichever header this SDK version uses; the SDK ran under trio.
    assert "test-key" in sent.headers.get("x-api-key", "") + sent.headers.get("authorization", "")
    assert sent.headers["x-stainless-async"] == "async:trio"
    assert canned.body == {
        "model": "test-model",
        "max_tokens": 512,
        "system": "You are careful.",
        "messages": [
            {"role": "user", "content": [{"type": "text", "text": "Summarize the PDF."}]},
            {
                "role": "assistant",
                "content": [
                    {"type": "text", "text": "Loading the skill."},
                    {
                        "type": "tool_use",
                        "id": "call_a",
                        "name": "skills__load",
                        "input": {"names": ["pdf"]},
                    },
                    {"type": "tool_use", "id": "call_b", "name": "weather", "input": {}},
                ],
            },
            {
                "role": "user",
                "content": [
                    {"type": "tool_result", "tool_use_id": "call_a", "content": "loaded pdf"},
                    {
                        "type": "tool_result",
                        "tool_use_id": "call_b",
                        "content": "no such city",
                        "is_error": True,
                    },
                ],
            },
        ],
        "tools": [
            {
                "name": "skills__load",
                "description": "Load skills.",
                "input_schema": {"type": "object", "properties": {"names": {"type": "array"}}},
            },
            {"name": "weather", "description": "Weather.", "input_schema": {"type": "object"}},
        ],
    }


async def test_user_text_after_tool_results_joins_their_turn_and_empty_parts_drop(
    canned: Canned,
) -> None:
    canned.json(message([{"type": "text", "text": "ok"}]))
    request = ModelRequest(
        model="m",
        system="",
        max_tokens=10,
        tools=(),
        messages=(
            Message(role="user", parts=(TextPart(text="go"),)),
            Message(
                role="assistant",
                parts=(TextPart(text=""), ToolCall(id="c", name="x", arguments="not json")),
            ),
            Message(role="assistant", parts=()),
            Message(role="tool", parts=(ToolResult(call_id="c", content="bad arguments"),)),
            Message(role="user", parts=(TextPart(text="try again"),)),
        ),
    )
    await adapter(canned, cache=False).complete(request)
    body = canned.body
    assert "system" not in body and "tools" not in body
    assert body["messages"] == [
        {"role": "user", "content": [{"type": "text", "text": "go"}]},
        # a malformed recorded call goes back with an empty input: the API takes objects only
        {
            "role": "assistant",
            "content": [{"type": "tool_use", "id": "c", "name": "x", "input": {}}],
        },
        {
            "role": "user",
            "content": [
                {"type": "tool_result", "tool_use_id": "c", "content": "bad arguments"},
                {"type": "text", "text": "try again"},
            ],
        },
    ]


async def test_response_text_and_tool_use_map_back_with_canonical_arguments(
    canned: Canned, request_: ModelRequest
) -> None:
    canned.json(
        message(
            [
                {"type": "thinking", "thinking": "hmm", "signature": "s"},
                {"type": "text", "text": "Let me check."},
                {"type": "tool_use", "id": "toolu_1", "name": "skills__load",
                 "input": {"names": ["pdf"], "mode": "add", "cap": 1.5}},
                {"type": "tool_use", "id": "toolu_2", "name": "no__such", "input": {}},
            ],
            stop_reason="tool_use",
            usage={"input_tokens": 10, "output_tokens": 5, "cache_read_input_tokens": 100,
                   "cache_creation_input_tokens": 20},
        )
    )  # fmt: skip
    response = await adapter(canned).complete(request_)
    assert response.parts == (
        TextPart(text="Let me check."),
        ToolCall(
            id="toolu_1", name="skills.load", arguments='{"cap":1.5,"mode":"add","names":["pdf"]}'
        ),
        # a name the request did not offer passes through for the runtime to refuse
        ToolCall(id="toolu_2", name="no__such", arguments="{}"),
    )
    assert response.stop_reason == "tool_use"
    assert response.usage == Usage(
        input_tokens=130,
        output_tokens=5,
        cache_read_input_tokens=100,
        cache_creation_input_tokens=20,
    )
    assert (response.model, response.id) == ("claude-test", "msg_1")


@pytest.mark.parametrize(
    ("wire", "canonical"),
    [
        ("end_turn", "end_turn"),
        ("tool_use", "tool_use"),
        ("max_tokens", "max_tokens"),
        ("model_context_window_exceeded", "max_tokens"),
        ("stop_sequence", "stop_sequence"),
        ("refusal", "refusal"),
        ("pause_turn", "other"),
        ("something_new", "other"),
    ],
)
async def test_stop_reasons(
    canned: Canned, request_: ModelRequest, wire: str, canonical: str
) -> None:
    canned.json(message([{"type": "text", "text": "x"}], stop_reason=wire))
    assert (await adapter(canned).complete(request_)).stop_reason == canonical


async def test_request_model_wins_and_adapter_model_is_the_fallback(
    canned: Canned, request_: ModelRequest
) -> None:
    client = anthropic.AsyncAnthropic(api_key="k", http_client=canned.http_client())
    canned.json(message([])).json(message([]))
    model = AnthropicAdapter(client, model="fallback")
    await model.complete(request_)
    assert canned.body["model"] == "test-model"
    await model.complete(ModelRequest(model="", system="", messages=(), tools=(), max_tokens=1))
    assert canned.body["model"] == "fallback"
    with pytest.raises(ModelError, match="no model named"):
        await AnthropicAdapter(client).complete(
            ModelRequest(model="", system="", messages=(), tools=(), max_tokens=1)
        )


async def test_rate_limit_maps_retry_after_and_sdk_retries_are_off(
    canned: Canned, request_: ModelRequest
) -> None:
    canned.json(
        {"type": "error", "error": {"type": "rate_limit_error", "message": "slow down"}},
        status=429,
        **{"retry-after": "3", "request-id": "req_9"},
    )
    # The client asks for 5 retries; the adapter must still make exactly one attempt.
    with pytest.raises(ModelError) as info:
        await adapter(canned, max_retries=5).complete(request_)
    error = info.value
    assert len(canned.requests) == 1
    assert (error.kind, error.retryable, error.retry_after_ms, error.status) == (
        "rate_limited", True, 3000, 429,
    )  # fmt: skip
    assert "slow down" in str(error) and "req_9" in str(error) and "3000 ms" in str(error)


async def test_retry_after_ms_header_wins(canned: Canned, request_: ModelRequest) -> None:
    canned.json(
        {"error": {"message": "x"}}, status=429, **{"retry-after": "3", "retry-after-ms": "1250.5"}
    )
    with pytest.raises(ModelError) as info:
        await adapter(canned).complete(request_)
    assert info.value.retry_after_ms == 1251


@pytest.mark.parametrize(
    ("status", "headers", "retryable"),
    [
        (500, {}, True),
        (529, {}, True),
        (503, {"x-should-retry": "false"}, False),
        (400, {}, False),
        (409, {"x-should-retry": "true"}, True),
        (408, {}, True),
        (401, {}, False),
    ],
)
async def test_http_errors(
    canned: Canned, request_: ModelRequest, status: int, headers: dict[str, str], retryable: bool
) -> None:
    canned.json(
        {"type": "error", "error": {"type": "e", "message": f"status {status}"}}, status, **headers
    )
    with pytest.raises(ModelError) as info:
        await adapter(canned).complete(request_)
    error = info.value
    assert (error.kind, error.retryable, error.status, error.retry_after_ms) == (
        "http", retryable, status, None,
    )  # fmt: skip
    assert f"HTTP {status}" in str(error) and f"status {status}" in str(error)
    assert isinstance(error.__cause__, anthropic.APIStatusError)


async def test_unauthorized_says_what_to_check(canned: Canned, request_: ModelRequest) -> None:
    canned.json({"error": {"message": "invalid x-api-key"}}, status=401)
    with pytest.raises(ModelError, match="check the API key"):
        await adapter(canned).complete(request_)


@pytest.mark.parametrize(
    ("raised", "kind"),
    [
        (httpx2.ReadTimeout("read timed out"), "timeout"),
        (httpx2.ConnectTimeout("connect timed out"), "timeout"),
        (httpx2.ConnectError("connection refused"), "connection"),
    ],
)
async def test_transport_failures(
    canned: Canned, request_: ModelRequest, raised: Exception, kind: str
) -> None:
    canned.reply(raised)
    with pytest.raises(ModelError) as info:
        await adapter(canned).complete(request_)
    assert (info.value.kind, info.value.retryable, info.value.status) == (kind, True, None)
    assert len(canned.requests) == 1


@pytest.mark.parametrize(
    ("body", "fragment"),
    [
        (b"<html>Bad gateway</html>", "malformed body"),
        (b'{"content": "text", "stop_reason": "end_turn"}', "Expected `array`"),
        (b'{"content": [], "stop_reason": null}', "stop_reason"),
        (b'{"content": [{"type": "tool_use", "id": "t", "input": {}}], "stop_reason": "tool_use"}',
         "$.content[0]"),
        (b'{"content": [{"type": "tool_use", "id": "t", "name": "x", "input": [1]}],'
         b' "stop_reason": "tool_use"}', "Expected `object`"),
        (b'{"content": [{"type": "text", "text": 5}], "stop_reason": "end_turn"}', "text block"),
    ],
)  # fmt: skip
async def test_malformed_responses(
    canned: Canned, request_: ModelRequest, body: bytes, fragment: str
) -> None:
    canned.reply(httpx2.Response(200, content=body, headers={"content-type": "application/json"}))
    with pytest.raises(ModelError) as info:
        await adapter(canned).complete(request_)
    assert info.value.kind == "malformed" and info.value.retryable
    assert fragment in str(info.value)


async def test_colliding_wire_names_are_refused_before_sending(canned: Canned) -> None:
    tools = tuple(
        ToolSpec(name=n, description="d", input_schema={"type": "object"}) for n in ("a.b", "a__b")
    )
    request = ModelRequest(model="m", system="", messages=(), tools=tools, max_tokens=1)
    with pytest.raises(ToolNameError, match=r"'a\.b' and 'a__b' would both be sent as 'a__b'"):
        await adapter(canned).complete(request)
    assert canned.requests == []


async def test_a_tool_call_in_a_user_message_is_refused(canned: Canned) -> None:
    bad = Message(role="user", parts=(ToolCall(id="c", name="x", arguments="{}"),))
    request = ModelRequest(model="m", system="", messages=(bad,), tools=(), max_tokens=1)
    with pytest.raises(ModelError, match="message 0 \\(role user\\) holds a ToolCall"):
        await adapter(canned).complete(request)
    assert canned.requests == []


async def test_cache_breakpoints_after_the_system_prompt_and_both_requests_ends(
    canned: Canned, request_: ModelRequest
) -> None:
    """Tools and system are cached together; the previous request's last message (a
    cache it wrote is read there) and this one's (written for the next) are marked."""
    canned.json(message([{"type": "text", "text": "ok"}]))
    await adapter(canned).complete(request_)
    body = canned.body
    ephemeral = {"type": "ephemeral"}
    assert body["system"] == [
        {"type": "text", "text": "You are careful.", "cache_control": ephemeral}
    ]
    marked = [
        (i, j)
        for i, m in enumerate(body["messages"])
        for j, block in enumerate(m["content"])
        if "cache_control" in block
    ]
    assert marked == [(0, 0), (2, 1)]
    assert all("cache_control" not in t for t in body["tools"])
    # Without a system prompt the last tool definition carries the first breakpoint.
    canned.json(message([{"type": "text", "text": "ok"}]))
    await adapter(canned).complete(msgspec.structs.replace(request_, system=""))
    assert canned.body["tools"][-1]["cache_control"] == ephemeral
