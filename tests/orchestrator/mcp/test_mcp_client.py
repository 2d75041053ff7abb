"""skillog as an MCP client towards what newer servers do (issue 24): how it introduces
itself, a list change announced while connecting, tools callable only as tasks, the
effect class of refused calls."""

from __future__ import annotations

import importlib.metadata
import json
from pathlib import Path
from typing import Any

from eventlog import open_sqlite_store
from orchestrator import Agent
from orchestrator._events import CODEC, McpToolsListed, ToolCalled, ToolCompleted
from orchestrator.adapters import ScriptedModel

Stdio = Any


async def _run(tmp_path: Path, stdio: Stdio, *calls: dict[str, Any]) -> list[Any]:
    turns = [{"tool_calls": [c]} for c in calls]
    async with open_sqlite_store(tmp_path / "log.db") as store:
        session = await Agent(
            model=ScriptedModel([*turns, {"text": "done"}]),
            model_name="test-model",
            mcp_servers=[stdio("modern", "modern")],
        ).run(store, "try the modern server")
        return [CODEC.decode(e) async for e in store.read(session.id)]


async def test_introduces_itself_as_skillog_and_records_the_first_listing_as_connected(
    tmp_path: Path, stdio: Stdio
) -> None:
    events = await _run(tmp_path, stdio, {"name": "mcp__modern__whoami", "arguments": {}})
    (done,) = [e for e in events if isinstance(e, ToolCompleted)]
    assert json.loads(done.content) == {
        "name": "skillog",
        "version": importlib.metadata.version("skillog"),
    }
    # the server said its list changed while skillog connected: still the connection's
    # listing, and the only one
    listed = [e for e in events if isinstance(e, McpToolsListed)]
    assert [e.reason for e in listed] == ["connected"]


async def test_a_tool_callable_only_as_a_task_is_rejected_with_the_reason(
    tmp_path: Path, stdio: Stdio
) -> None:
    events = await _run(tmp_path, stdio, {"name": "mcp__modern__job", "arguments": {}})
    (listed,) = [e for e in events if isinstance(e, McpToolsListed)]
    assert "mcp__modern__job" not in [t.name for t in listed.tools]
    ((name, reason),) = listed.rejected
    assert name == "job" and 'taskSupport: "required"' in reason
    (done,) = [e for e in events if isinstance(e, ToolCompleted)]
    assert done.error_type == "unknown_tool"


async def test_a_refused_call_records_the_effect_class_of_the_listing(
    tmp_path: Path, stdio: Stdio
) -> None:
    events = await _run(
        tmp_path,
        stdio,
        {"name": "mcp__modern__write", "arguments": {"text": "x" * 300_000}},
    )
    (called,) = [e for e in events if isinstance(e, ToolCalled)]
    (done,) = [e for e in events if isinstance(e, ToolCompleted)]
    assert done.error_type == "invalid_arguments"
    assert called.effect == "idempotent"
