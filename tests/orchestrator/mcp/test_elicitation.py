"""MCP servers' forms (issue 24, item 10): skillog declares ``elicitation``; a form
goes to the embedding program's elicitor (the terminal in ``skillog run``), recorded
before anyone is asked and with the answer the server received; accept, decline,
nobody in the process (a wait on the log until the timeout), a timeout, an answer
that does not fit, a malformed schema (an error to the server), a URL-mode request
(declined); each session re-driven with the server gone."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import trio

from eventlog import open_sqlite_store
from orchestrator import (
    Agent,
    ElicitationAnswer,
    ElicitationRequest,
    Elicitor,
    McpToolRules,
    PolicyConfig,
)
from orchestrator._events import CODEC, McpElicitationAnswered, McpElicited, ToolCompleted
from orchestrator.adapters import ScriptedModel

from .test_mcp_sessions import _replay_cli

Stdio = Any
FORM = {
    "type": "object",
    "properties": {"name": {"type": "string"}, "age": {"type": "integer"}},
    "required": ["name"],
}


async def _run(
    tmp_path: Path,
    stdio: Stdio,
    elicitor: Elicitor | None,
    *calls: dict[str, Any],
    policy: PolicyConfig | None = None,
) -> tuple[str, list[Any], list[Any]]:
    turns = [{"tool_calls": [c]} for c in calls]
    async with open_sqlite_store(tmp_path / "log.db") as store:
        session = await Agent(
            model=ScriptedModel([*turns, {"text": "done"}]),
            model_name="test-model",
            mcp_servers=[stdio("modern", "modern")],
            elicitor=elicitor,
            policy=policy or PolicyConfig(),
        ).run(store, "fill the forms")
        events = [CODEC.decode(e) async for e in store.read(session.id)]
    done = [e.content for e in events if isinstance(e, ToolCompleted)]
    return session.id, events, done


def form(schema: dict[str, Any] = FORM) -> dict[str, Any]:
    return {"name": "mcp__modern__form", "arguments": {"schema": schema}}


async def test_a_form_is_answered_by_the_human_channel_and_recorded(
    tmp_path: Path, stdio: Stdio, server_dir: Path
) -> None:
    asked: list[ElicitationRequest] = []
    answers = iter(
        [
            ElicitationAnswer(action="accept", decided_by="test", content='{"name":"Ada"}'),
            ElicitationAnswer(action="decline", decided_by="test"),
            ElicitationAnswer(action="accept", decided_by="test", content='{"age":"old"}'),
        ]
    )

    async def human(request: ElicitationRequest) -> ElicitationAnswer:
        asked.append(request)
        return next(answers)

    session, events, done = await _run(tmp_path, stdio, human, form(), form(), form())
    assert asked[0].message == "Who are you?" and json.loads(asked[0].schema) == FORM
    assert asked[0].server == "modern" and asked[0].call_id
    assert [json.loads(d) for d in done] == [
        {"action": "accept", "content": {"name": "Ada"}},
        {"action": "decline", "content": None},
        # an answer that does not fit the form goes to the server as cancel
        {"action": "cancel", "content": None},
    ]
    elicited = [e for e in events if isinstance(e, McpElicited)]
    answered = [e for e in events if isinstance(e, McpElicitationAnswered)]
    assert [e.valid for e in elicited] == [True, True, True]
    assert [(a.action, a.decided_by) for a in answered] == [
        ("accept", "test"),
        ("decline", "test"),
        ("accept", "test"),
    ]
    assert answered[0].content == '{"name":"Ada"}'
    assert "does not fit the form" in answered[2].reason
    (server_dir / "mcp_server.py").unlink()
    code, output = await _replay_cli(tmp_path / "log.db", session)
    assert code == 0, output


async def test_nobody_a_timeout_a_malformed_schema_and_a_url(tmp_path: Path, stdio: Stdio) -> None:
    nested = {"type": "object", "properties": {"address": {"type": "object"}}}
    link = {"name": "mcp__modern__link", "arguments": {}}
    quick = PolicyConfig(mcp=McpToolRules(elicitation_timeout_ms=300))
    session, events, done = await _run(
        tmp_path, stdio, None, form(), form(nested), link, policy=quick
    )
    assert json.loads(done[0]) == {"action": "cancel", "content": None}
    assert done[1].startswith("refused:") and "MCP forms are flat" in done[1]
    assert json.loads(done[2]) == {"action": "decline"}
    elicited = [e for e in events if isinstance(e, McpElicited)]
    answered = [e for e in events if isinstance(e, McpElicitationAnswered)]
    assert [e.valid for e in elicited] == [True, False, False]
    assert "URL-mode" in elicited[2].reason
    # nobody in the process: the form waits for an answer through the log, until the
    # timeout (test_form_channel.py answers one)
    assert [(a.action, a.decided_by) for a in answered] == [
        ("cancel", "timeout"),
        ("decline", "skillog"),
    ]
    code, output = await _replay_cli(tmp_path / "log.db", session)
    assert code == 0, output

    async def slow(request: ElicitationRequest) -> ElicitationAnswer:
        await trio.sleep(30)
        raise AssertionError("not reached")

    policy = PolicyConfig(mcp=McpToolRules(elicitation_timeout_ms=200))
    (tmp_path / "t").mkdir()
    session, events, done = await _run(tmp_path / "t", stdio, slow, form(), policy=policy)
    assert json.loads(done[0]) == {"action": "cancel", "content": None}
    (answered_one,) = [e for e in events if isinstance(e, McpElicitationAnswered)]
    assert answered_one.decided_by == "timeout" and "200 ms" in answered_one.reason
    code, output = await _replay_cli(tmp_path / "t" / "log.db", session)
    assert code == 0, output
