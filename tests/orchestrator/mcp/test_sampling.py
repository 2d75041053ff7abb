"""MCP servers' sampling requests (issue 24, item 10): the session's model answers a
server during its call when policy names the server, recorded like a model call
(write-ahead), its tokens counted; refused otherwise, recorded; a flood capped per
call; content skillog cannot carry refused with the reason; and the session verifies
and re-drives with the server gone."""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

import msgspec

from eventlog import open_sqlite_store
from orchestrator import (
    Agent,
    ElicitationAnswer,
    ElicitationRequest,
    McpToolRules,
    PolicyConfig,
)
from orchestrator._events import (
    CODEC,
    McpSampleAnswered,
    McpSampled,
    ModelResponded,
    ToolCompleted,
)
from orchestrator._mcp_sampling import sampling_request
from orchestrator._prompt import request_hash
from orchestrator._state import SessionState, apply
from orchestrator.adapters import ScriptedModel

from .test_mcp_sessions import _replay_cli

Stdio = Any


async def _run(
    tmp_path: Path, stdio: Stdio, policy: PolicyConfig, *turns: Any, elicitor: Any = None
) -> tuple[str, list[Any], dict[str, bytes]]:
    async with open_sqlite_store(tmp_path / "log.db") as store:
        session = await Agent(
            model=ScriptedModel([*turns, {"text": "done"}]),
            model_name="test-model",
            mcp_servers=[stdio("modern", "modern")],
            policy=policy,
            elicitor=elicitor,
        ).run(store, "ask the server")
        events = [CODEC.decode(e) async for e in store.read(session.id)]
        blobs = {
            e.params: await store.get_blob(e.params) for e in events if isinstance(e, McpSampled)
        }
        return session.id, events, blobs


def _ask(question: str, times: int = 1) -> dict[str, Any]:
    call = {"name": "mcp__modern__ask", "arguments": {"question": question, "times": times}}
    return {"tool_calls": [call]}


ALLOW = PolicyConfig(mcp=McpToolRules(sampling=("modern",)))


async def test_an_allowed_server_samples_the_session_model_recorded_and_replayed(
    tmp_path: Path, stdio: Stdio, server_dir: Path
) -> None:
    answer = {"text": "Paris", "usage": {"input_tokens": 11, "output_tokens": 2}}
    session, events, blobs = await _run(tmp_path, stdio, ALLOW, _ask("capital of France?"), answer)
    (sampled,) = [e for e in events if isinstance(e, McpSampled)]
    (answered,) = [e for e in events if isinstance(e, McpSampleAnswered)]
    (done,) = [e for e in events if isinstance(e, ToolCompleted)]
    assert sampled.allowed and sampled.server == "modern" and sampled.index == 0
    assert answered.response is not None and answered.response.text == "Paris"
    assert done.content == "test-model: Paris"
    # write-ahead, and inside the call: called < sampled < answered < completed
    order = [type(e).__name__ for e in events]
    assert (
        order.index("ToolCalled")
        < order.index("McpSampled")
        < order.index("McpSampleAnswered")
        < order.index("ToolCompleted")
    )
    # the request is a pure function of what the server sent: byte for byte
    config = events[0]
    request = sampling_request(config, blobs[sampled.params])
    assert request_hash(request) == sampled.request_hash
    assert request.system == "Answer briefly." and request.max_tokens == 50
    assert [m.role for m in request.messages] == ["user"]
    # the sampling tokens count towards the session's budget
    state = SessionState(session)
    for seq, event in enumerate(events):
        apply(state, event, seq=seq, hash="")
    turns = sum(e.response.usage.input_tokens for e in events if isinstance(e, ModelResponded))
    assert state.input_tokens == turns + 11

    # the server gone: replay and re-drive from the log alone
    (server_dir / "mcp_server.py").unlink()
    code, output = await _replay_cli(tmp_path / "log.db", session)
    assert code == 0, output


async def test_by_default_sampling_is_refused_and_recorded(tmp_path: Path, stdio: Stdio) -> None:
    session, events, _ = await _run(tmp_path, stdio, PolicyConfig(), _ask("hi"))
    (sampled,) = [e for e in events if isinstance(e, McpSampled)]
    assert not sampled.allowed and "policy.mcp.sampling" in sampled.reason
    assert not [e for e in events if isinstance(e, McpSampleAnswered)]
    (done,) = [e for e in events if isinstance(e, ToolCompleted)]
    assert done.content.startswith("refused:") and "policy.mcp.sampling" in done.content
    code, output = await _replay_cli(tmp_path / "log.db", session)
    assert code == 0, output


async def test_a_flood_of_sampling_requests_is_capped_per_call(
    tmp_path: Path, stdio: Stdio
) -> None:
    policy = PolicyConfig(mcp=McpToolRules(sampling=("*",), max_samples_per_call=2))
    answers = [{"text": f"answer {i}"} for i in range(2)]
    session, events, _ = await _run(tmp_path, stdio, policy, _ask("again", times=5), *answers)
    sampled = [e for e in events if isinstance(e, McpSampled)]
    assert [e.allowed for e in sampled] == [True, True, False, False, False]
    assert [e.index for e in sampled] == [0, 1, 2, 3, 4]
    assert "max_samples_per_call" in sampled[-1].reason
    (done,) = [e for e in events if isinstance(e, ToolCompleted)]
    lines = done.content.splitlines()
    assert lines[:2] == ["test-model: answer 0", "test-model: answer 1"]
    assert all(line.startswith("refused:") for line in lines[2:])
    code, output = await _replay_cli(tmp_path / "log.db", session)
    assert code == 0, output


async def test_content_skillog_cannot_sample_is_refused_with_the_reason(
    tmp_path: Path, stdio: Stdio
) -> None:
    turn = {"tool_calls": [{"name": "mcp__modern__ask_image", "arguments": {}}]}
    session, events, _ = await _run(tmp_path, stdio, ALLOW, turn)
    (sampled,) = [e for e in events if isinstance(e, McpSampled)]
    assert not sampled.allowed and "image content; skillog samples text only" in sampled.reason
    (done,) = [e for e in events if isinstance(e, ToolCompleted)]
    assert "text only" in done.content
    db = sqlite3.connect(tmp_path / "log.db")
    (body,) = db.execute("SELECT body FROM events WHERE type = 'mcp.sampled'").fetchone()
    assert msgspec.json.decode(body)["request_hash"] == ""
    code, output = await _replay_cli(tmp_path / "log.db", session)
    assert code == 0, output


async def test_sampling_ask_puts_each_request_to_a_human_first(
    tmp_path: Path, stdio: Stdio
) -> None:
    """``policy.mcp.sampling_ask``: before the model is asked, a human approves or denies
    through the forms' channel (here the embedding program's elicitor; a worker's goes to
    ``skillog approvals``); recorded as skillog's own form of the call, then the request."""
    asked: list[ElicitationRequest] = []
    verdicts = iter([{"approve": True}, {"approve": False, "reason": "not today"}])

    async def human(request: ElicitationRequest) -> ElicitationAnswer:
        asked.append(request)
        content = msgspec.json.encode(next(verdicts)).decode()
        return ElicitationAnswer(action="accept", decided_by="ops", content=content)

    policy = PolicyConfig(mcp=McpToolRules(sampling_ask=("modern",)))
    answer = {"text": "Paris", "usage": {"input_tokens": 11, "output_tokens": 2}}
    session, events, _ = await _run(
        tmp_path, stdio, policy, _ask("capital of France?"), answer, _ask("and of Peru?"),
        elicitor=human,
    )  # fmt: skip
    assert "MCP server modern asks the session's model" in asked[0].message
    assert "capital of France?" in asked[0].message and "Let it?" in asked[0].message
    sampled = [e for e in events if isinstance(e, McpSampled)]
    assert [s.allowed for s in sampled] == [True, False]
    assert "not today" in sampled[1].reason and "sampling_ask" in sampled[1].reason
    order = [type(e).__name__ for e in events]
    first = order.index("McpSampled")
    assert order.index("McpElicited") < order.index("McpElicitationAnswered") < first
    done = [e.content for e in events if isinstance(e, ToolCompleted)]
    assert done[0] == "test-model: Paris" and "not today" in done[1]
    code, output = await _replay_cli(tmp_path / "log.db", session)
    assert code == 0, output
