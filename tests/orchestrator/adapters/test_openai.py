"""The OpenAI Chat Completions adapter, through the real SDK client with canned HTTP."""

from __future__ import annotations

import json
from typing import Any

import httpx2
import openai
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
from orchestrator.adapters import OpenAIAdapter, ToolNameError

Canned = Any  # the `canned` fixture's class; conftest cannot be imported in importlib mode


def adapter(canned: Canned, **options: Any) -> OpenAIAdapter:
    client = openai.AsyncOpenAI(api_key="test-key", http_client=canned.http_client(), **options)
    return OpenAIAdapter(client)


def completion(message: dict[str, Any], finish_reason: str = "stop", **extra: Any) -> Any:
    return {
        "id": "chatcmpl-1",
        "object": "chat.completion",
        "created": 1,
        "model": "gpt-test",
        "choices": [
            {
                "index": 0,
                "finish_reason": finish_reason,
                "message": {"role": "assistant", **message},
            }
        ],
        "usage": {"prompt_tokens": 21, "completion_tokens": 4, "total_tokens": 25},
        **extra,
    }


def call(id: str, name: str, arguments: str) -> dict[str, Any]:
    return {"id": id, "type": "function", "function": {"name": name, "arguments": arguments}}


async def test_request_body_carries_system_history_tool_messages_and_wire_names(
    canned: Canned, request_: ModelRequest
) -> None:
    canned.json(completion({"content": "ok"}))
    await adapter(canned).complete(request_)

    sent = canned.requests[0]
    assert sent.url.path == "/v1/chat/completions"
    assert sent.headers["authorization"] == "Bearer test-key"
    assert sent.headers["x-stainless-async"] == "async:trio"
    assert canned.body == {
        "model": "test-model",
        "max_completion_tokens": 512,
        "messages": [
            {"role": "system", "content": "You are careful."},
            {"role": "user", "content": "Summarize the PDF."},
            {
                "role": "assistant",
                "content": "Loading the skill.",
                "tool_calls": [
                    call("call_a", "skills__load", '{"names":["pdf"]}'),
                    call("call_b", "weather", "{}"),
                ],
            },
            {"role": "tool", "tool_call_id": "call_a", "content": "loaded pdf"},
            {"role": "tool", "tool_call_id": "call_b", "content": "no such city"},
        ],
        "tools": [
            {
                "type": "function",
                "function": {
                    "name": "skills__load",
                    "description": "Load skills.",
                    "parameters": {"type": "object", "properties": {"names": {"type": "array"}}},
                },
            },
            {
                "type": "function",
                "function": {
                    "name": "weather",
                    "description": "Weather.",
                    "parameters": {"type": "object"},
                },
            },
        ],
    }


async def test_calls_without_text_several_texts_and_text_beside_tool_results(
    canned: Canned,
) -> None:
    canned.json(completion({"content": "ok"}))
    request = ModelRequest(
        model="m",
        system="",
        max_tokens=10,
        tools=(),
        messages=(
            Message(role="user", parts=(TextPart(text="a"), TextPart(text="b"))),
            Message(role="assistant", parts=(ToolCall(id="c", name="x.y", arguments="[1]"),)),
            Message(role="assistant", parts=(TextPart(text=""),)),
            Message(
                role="tool", parts=(TextPart(text="note"), ToolResult(call_id="c", content="r"))
            ),
        ),
    )
    await adapter(canned).complete(request)
    body = canned.body
    assert "tools" not in body
    assert body["messages"] == [
        {"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]},
        # arguments go back exactly as recorded; the history keeps the call's wire name
        {"role": "assistant", "content": None, "tool_calls": [call("c", "x__y", "[1]")]},
        # tool messages must follow the calls directly, so the text comes after them
        {"role": "tool", "tool_call_id": "c", "content": "r"},
        {"role": "user", "content": "note"},
    ]


async def test_response_maps_text_tool_calls_and_usage(
    canned: Canned, request_: ModelRequest
) -> None:
    arguments = '{ "names": ["pdf"], "cap": 1.50 }'
    canned.json(
        completion(
            {
                "content": "Loading.",
                "tool_calls": [call("c1", "skills__load", arguments), call("c2", "ghost", "{}")],
            },
            finish_reason="tool_calls",
        )
    )
    response = await adapter(canned).complete(request_)
    assert response.parts == (
        TextPart(text="Loading."),
        # arguments exactly as received: no re-encoding, so "1.50" stays "1.50"
        ToolCall(id="c1", name="skills.load", arguments=arguments),
        ToolCall(id="c2", name="ghost", arguments="{}"),
    )
    assert response.stop_reason == "tool_use"
    assert response.usage == Usage(input_tokens=21, output_tokens=4)
    assert (response.model, response.id) == ("gpt-test", "chatcmpl-1")


async def test_refusal_becomes_text_with_stop_reason_refusal(
    canned: Canned, request_: ModelRequest
) -> None:
    canned.json(completion({"content": None, "refusal": "I can't help with that."}))
    response = await adapter(canned).complete(request_)
    assert response.parts == (TextPart(text="I can't help with that."),)
    assert response.stop_reason == "refusal"


async def test_missing_usage_counts_zero(canned: Canned, request_: ModelRequest) -> None:
    body = completion({"content": "hi"})
    del body["usage"]
    canned.json(body)
    assert (await adapter(canned).complete(request_)).usage == Usage()


@pytest.mark.parametrize(
    ("wire", "canonical"),
    [
        ("stop", "end_turn"),
        ("tool_calls", "tool_use"),
        ("function_call", "tool_use"),
        ("length", "max_tokens"),
        ("content_filter", "refusal"),
        ("brand_new", "other"),
    ],
)
async def test_finish_reasons(
    canned: Canned, request_: ModelRequest, wire: str, canonical: str
) -> None:
    canned.json(completion({"content": "x"}, finish_reason=wire))
    assert (await adapter(canned).complete(request_)).stop_reason == canonical


async def test_rate_limit_maps_retry_after_and_sdk_retries_are_off(
    canned: Canned, request_: ModelRequest
) -> None:
    canned.json(
        {"error": {"message": "Rate limit reached", "type": "requests", "code": "rate_limited"}},
        status=429,
        **{"retry-after": "2", "x-request-id": "req_7"},
    )
    with pytest.raises(ModelError) as info:
        await adapter(canned, max_retries=4).complete(request_)
    error = info.value
    assert len(canned.requests) == 1
    assert (error.kind, error.retryable, error.retry_after_ms, error.status) == (
        "rate_limited", True, 2000, 429,
    )  # fmt: skip
    assert "Rate limit reached" in str(error) and "req_7" in str(error)


@pytest.mark.parametrize(
    ("status", "retryable"), [(500, True), (502, True), (400, False), (404, False)]
)
async def test_http_errors(
    canned: Canned, request_: ModelRequest, status: int, retryable: bool
) -> None:
    canned.json({"error": {"message": f"status {status}"}}, status=status)
    with pytest.raises(ModelError) as info:
        await adapter(canned).complete(request_)
    error = info.value
    assert (error.kind, error.retryable, error.status) == ("http", retryable, status)
    assert f"status {status}" in str(error)
    assert isinstance(error.__cause__, openai.APIStatusError)


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
    assert (info.value.kind, info.value.retryable) == (kind, True)
    assert len(canned.requests) == 1


@pytest.mark.parametrize(
    ("message", "fragment"),
    [
        ({"tool_calls": [call("c", "skills__load", '{"names": [')]}, "not valid JSON"),
        ({"tool_calls": [call("c", "x", "NaN")]}, "not valid JSON"),
        ({"tool_calls": [{"id": "c", "type": "function", "function": {"name": "x"}}]},
         "missing required field `arguments`"),
        ({"content": 42}, "Expected `str | null`, got `int`"),
    ],
)  # fmt: skip
async def test_malformed_messages(
    canned: Canned, request_: ModelRequest, message: dict[str, Any], fragment: str
) -> None:
    canned.json(completion(message, finish_reason="tool_calls"))
    with pytest.raises(ModelError) as info:
        await adapter(canned).complete(request_)
    assert (info.value.kind, info.value.retryable) == ("malformed", True)
    assert fragment in str(info.value)


@pytest.mark.parametrize(
    ("body", "fragment"),
    [
        (b"upstream connect error", "malformed body"),
        (b'{"id": "x", "choices": []}', "no choices"),
        (b'{"id": "x"}', "missing required field `choices`"),
    ],
)
async def test_malformed_bodies(
    canned: Canned, request_: ModelRequest, body: bytes, fragment: str
) -> None:
    canned.reply(httpx2.Response(200, content=body, headers={"content-type": "application/json"}))
    with pytest.raises(ModelError) as info:
        await adapter(canned).complete(request_)
    assert info.value.kind == "malformed"
    assert fragment in str(info.value)


async def test_names_that_cannot_go_on_the_wire_are_refused(canned: Canned) -> None:
    for name in ("has space", "x" * 65, "ünï"):
        tool = ToolSpec(name=name, description="d", input_schema={"type": "object"})
        request = ModelRequest(model="m", system="", messages=(), tools=(tool,), max_tokens=1)
        with pytest.raises(ToolNameError, match="cannot be sent"):
            await adapter(canned).complete(request)
    assert canned.requests == []


async def test_an_openai_compatible_server_at_a_base_url(
    request_: ModelRequest, monkeypatch: pytest.MonkeyPatch
) -> None:
    """vLLM, Ollama, a LiteLLM proxy: a real HTTP server on loopback speaking the chat
    completions API, reached through the real SDK with base_url and no API key."""
    import http.server
    import threading

    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    seen: list[tuple[str, dict[str, Any]]] = []

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            seen.append((self.path, body))
            reply = json.dumps(completion({"content": "hello from a local model"})).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(reply)))
            self.end_headers()
            self.wfile.write(reply)

        def log_message(self, format: str, *args: Any) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.02})
    thread.start()
    try:
        url = f"http://127.0.0.1:{server.server_address[1]}/v1"
        response = await OpenAIAdapter(model="local-llama", base_url=url).complete(request_)
    finally:
        server.shutdown()
        server.server_close()
        thread.join(5)
    assert response.parts[0].text == "hello from a local model"  # type: ignore[union-attr]
    ((path, body),) = seen
    assert path == "/v1/chat/completions" and body["messages"]
