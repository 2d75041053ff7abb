"""Canned HTTP for the provider adapters: the real SDK clients over an httpx2
MockTransport (the SDKs' HTTP library), so no network is needed."""

from __future__ import annotations

import json
from typing import Any

import httpx2
import pytest

from orchestrator._model import (
    Message,
    ModelRequest,
    TextPart,
    ToolCall,
    ToolResult,
    ToolSpec,
)


class Canned:
    """Answers each request with the next canned reply (a response, or an exception to
    raise as the transport would) and keeps the requests."""

    def __init__(self) -> None:
        self.replies: list[httpx2.Response | Exception] = []
        self.requests: list[httpx2.Request] = []

    def reply(self, reply: httpx2.Response | Exception) -> Canned:
        self.replies.append(reply)
        return self

    def json(self, body: Any, status: int = 200, **headers: str) -> Canned:
        return self.reply(httpx2.Response(status, json=body, headers=headers))

    def _handle(self, request: httpx2.Request) -> httpx2.Response:
        self.requests.append(request)
        reply = self.replies.pop(0)
        if isinstance(reply, Exception):
            raise reply
        return reply

    def http_client(self) -> httpx2.AsyncClient:
        return httpx2.AsyncClient(transport=httpx2.MockTransport(self._handle))

    @property
    def body(self) -> Any:
        """The JSON body of the last request."""
        return json.loads(self.requests[-1].content)


@pytest.fixture
def canned() -> Canned:
    return Canned()


@pytest.fixture
def request_() -> ModelRequest:
    """A request with every kind of part: system, user text, an assistant turn with text
    and two tool calls (dotted names), their results (one an error), and two tools."""
    return ModelRequest(
        model="test-model",
        system="You are careful.",
        max_tokens=512,
        tools=(
            ToolSpec(
                name="skills.load",
                description="Load skills.",
                input_schema={"type": "object", "properties": {"names": {"type": "array"}}},
            ),
            ToolSpec(name="weather", description="Weather.", input_schema={"type": "object"}),
        ),
        messages=(
            Message(role="user", parts=(TextPart(text="Summarize the PDF."),)),
            Message(
                role="assistant",
                parts=(
                    TextPart(text="Loading the skill."),
                    ToolCall(id="call_a", name="skills.load", arguments='{"names":["pdf"]}'),
                    ToolCall(id="call_b", name="weather", arguments="{}"),
                ),
            ),
            Message(
                role="tool",
                parts=(
                    ToolResult(call_id="call_a", content="loaded pdf"),
                    ToolResult(call_id="call_b", content="no such city", is_error=True),
                ),
            ),
        ),
    )
