"""skillog as an MCP client of server-everything (the official TypeScript reference
server, pinned in .ci/npm): every tool it offers, then the recorded session verified
and re-driven with the server gone (node off the PATH)."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

import pytest
import trio

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
    McpElicitationAnswered,
    McpElicited,
    McpResult,
    McpSampleAnswered,
    McpSampled,
    McpTaskCreated,
    McpToolsListed,
    ToolCompleted,
    ToolImages,
)
from orchestrator.adapters import ScriptedModel
from orchestrator.mcp import McpServerConfig

from .foreign import node, server_everything

CALLS: list[tuple[str, dict[str, Any]]] = [
    ("echo", {"message": "hello from skillog"}),
    ("get-sum", {"a": 2, "b": 40}),
    ("get-annotated-message", {"messageType": "success", "includeImage": True}),
    ("get-tiny-image", {}),
    ("get-structured-content", {"location": "Chicago"}),
    ("get-resource-links", {"count": 2}),
    ("get-resource-reference", {"resourceType": "Blob", "resourceId": 2}),
    ("get-resource-reference", {"resourceType": "Text", "resourceId": 1}),
    ("gzip-file-as-resource", {"name": "hi.gz", "data": "data:text/plain;base64,aGk="}),
    ("toggle-simulated-logging", {}),
    ("trigger-long-running-operation", {"duration": 1, "steps": 4}),
    ("toggle-subscriber-updates", {}),
    ("get-env", {}),
    ("get-roots-list", {}),
    ("trigger-sampling-request", {"prompt": "say hi", "maxTokens": 20}),
    ("trigger-elicitation-request", {}),
    ("simulate-research-query", {"topic": "event sourcing"}),
]
SAMPLED = "hi from the session's model"
"""What the scripted model answers server-everything's sampling request."""


@pytest.fixture
def everything() -> Path:
    """server-everything's entry point (skips, or fails in CI, when not installed)."""
    return server_everything()


async def test_skillog_drives_server_everything_and_the_log_replays_without_it(
    tmp_path: Path, everything: Path
) -> None:
    server = McpServerConfig(
        name="everything",
        command=node(),
        args=(str(everything),),
        env={"MARKER": "skillog"},
        call_timeout_ms=30_000,
        connect_timeout_ms=30_000,
    )
    turns: list[dict[str, Any]] = [
        {"tool_calls": [{"name": f"mcp__everything__{name}", "arguments": a}]} for name, a in CALLS
    ]
    # the sampling request comes during its call: the model's next answer is its
    sampling = [name for name, _ in CALLS].index("trigger-sampling-request")
    turns.insert(sampling + 1, {"text": SAMPLED})
    turns.append({"text": "done"})
    db = tmp_path / "log.db"

    async def human(request: ElicitationRequest) -> ElicitationAnswer:
        # a scripted human: fills the required field of server-everything's form
        return ElicitationAnswer(action="accept", decided_by="test", content='{"name":"Ada"}')

    async with open_sqlite_store(db) as store:
        session = await Agent(
            model=ScriptedModel(turns),
            model_name="test-model",
            mcp_servers=[server],
            policy=PolicyConfig(mcp=McpToolRules(sampling=("everything",))),
            elicitor=human,
        ).run(store, "try every tool of server-everything")
        events = [CODEC.decode(e) async for e in store.read(session.id)]
        results = [e for e in events if isinstance(e, McpResult)]
        notes = {r.tool: json.loads(await store.get_blob(r.notes)) for r in results if r.notes}

    listed = [e for e in events if isinstance(e, McpToolsListed)]
    assert listed[0].reason == "connected"
    assert listed[0].server_info.startswith("mcp-servers/everything")
    # its tool callable only as a task runs as one: the task id recorded, then its result
    assert listed[0].rejected == ()
    assert [t.mcp_name for t in listed[-1].tools if t.task] == ["simulate-research-query"]
    (task,) = [e for e in events if isinstance(e, McpTaskCreated)]
    assert task.tool == "simulate-research-query" and task.ttl_ms == 300_000
    offered = {t.mcp_name for t in listed[-1].tools}
    assert {name for name, _ in CALLS} <= offered
    done = [e for e in events if isinstance(e, ToolCompleted)]
    assert len(done) == len(CALLS)
    by_tool = dict(zip([n for n, _ in CALLS], done, strict=False))
    assert "hello from skillog" in by_tool["echo"].content
    assert "42" in by_tool["get-sum"].content
    assert "# Research Report: event sourcing" in by_tool["simulate-research-query"].content
    assert all(r.failure is None for r in results), [r for r in results if r.failure]
    # the images reach the model as images
    images = [e for e in events if isinstance(e, ToolImages)]
    assert len(images) == 2 and {i.images[0].media_type for i in images} == {"image/png"}
    # its sampling request answered by the session's model, recorded both ways
    (sampled,) = [e for e in events if isinstance(e, McpSampled)]
    (answered,) = [e for e in events if isinstance(e, McpSampleAnswered)]
    assert sampled.allowed and answered.response is not None
    assert SAMPLED in by_tool["trigger-sampling-request"].content
    # its form (a flat schema with multi-selects) put to the scripted human, accepted
    (elicited,) = [e for e in events if isinstance(e, McpElicited)]
    (form,) = [e for e in events if isinstance(e, McpElicitationAnswered)]
    assert elicited.valid and (form.action, form.content) == ("accept", '{"name":"Ada"}')
    assert "Ada" in by_tool["trigger-elicitation-request"].content
    # skillog declares roots; no skill is active, so the server is told none
    assert "no roots are currently configured" in by_tool["get-roots-list"].content
    # progress of the long-running operation, kept with its result
    assert len(notes["trigger-long-running-operation"]["progress"]) == 4

    # the server gone: no node on the PATH; the log alone verifies and re-drives
    skillog = str(Path(sys.executable).with_name("skillog"))
    env = {**os.environ, "PATH": str(Path(sys.executable).parent)}
    for command in (
        ["log", "verify", "--db", str(db)],
        ["replay", session.id, "--db", str(db), "--redrive"],
    ):
        run = await trio.run_process(
            [skillog, *command], capture_stdout=True, capture_stderr=True, check=False, env=env
        )
        output = (run.stdout + run.stderr).decode()
        assert run.returncode == 0, output
    assert "re-drive: the current code reproduces all" in output
