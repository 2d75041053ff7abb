"""skillog as an MCP client towards what newer servers do (issue 24): how it introduces
itself, a list change announced while connecting, tools callable only as tasks (called as tasks),
the effect class of refused calls."""

from __future__ import annotations

import base64
import importlib.metadata
import json
import shutil
import sqlite3
import sys
from pathlib import Path
from typing import Any

import msgspec
import trio

from eventlog import open_sqlite_store
from orchestrator import Agent
from orchestrator._events import (
    CODEC,
    McpResult,
    McpToolsListed,
    PromptRendered,
    ToolCalled,
    ToolCompleted,
    ToolImages,
)
from orchestrator._model import ModelRequest, ModelResponse, ToolImage, ToolResult
from orchestrator._prompt import message_line, request_hash
from orchestrator._transcript import transcript
from orchestrator.adapters import ScriptedModel
from orchestrator.adapters._anthropic import anthropic_request
from orchestrator.adapters._openai import openai_request
from orchestrator.mcp import connect_servers

from .mcp_server import PNG
from .test_mcp_sessions import _replay_cli

Stdio = Any


async def _run(tmp_path: Path, stdio: Stdio, *calls: dict[str, Any]) -> list[Any]:
    turns = [{"tool_calls": [c]} for c in calls]
    async with open_sqlite_store(tmp_path / "log.db") as store:
        session = await Agent(
            model=ScriptedModel([*turns, {"text": "done"}]),
            model_name="test-model",
            mcp_servers=[stdio("modern", "modern")],
        ).run(store, "try the modern server", session_id="s1")
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


async def test_a_tool_callable_only_as_a_task_runs_as_a_task_recorded_before_its_result(
    tmp_path: Path, stdio: Stdio
) -> None:
    events = await _run(
        tmp_path, stdio, {"name": "mcp__modern__job", "arguments": {"seconds": 0.3}}
    )
    (listed,) = [e for e in events if isinstance(e, McpToolsListed)]
    (job,) = [t for t in listed.tools if t.mcp_name == "job"]
    assert job.task and listed.rejected == ()
    kinds = [type(e).__name__ for e in events]
    # the intent, then the task id (committed on its own), then the result
    at = kinds.index("McpTaskCreated")
    assert kinds[at - 1] == "ToolCalled" and kinds[at + 1 : at + 3] == [
        "McpResult",
        "ToolCompleted",
    ]
    created = events[at]
    assert created.task_id.startswith("task-") and created.ttl_ms == 600_000
    (done,) = [e for e in events if isinstance(e, ToolCompleted)]
    assert not done.is_error and done.content == "job done after 0.3 s"
    assert f"mcp        modern/job runs as task {created.task_id}" in transcript(events)
    code, output = await _replay_cli(tmp_path / "log.db", "s1")
    assert code == 0, output


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


class _Seeing(ScriptedModel):
    """The scripted model, keeping each request as the adapter was handed it."""

    def __init__(self, turns: list[dict[str, Any]]) -> None:
        super().__init__(turns)
        self.seen: list[ModelRequest] = []

    async def complete(self, request: ModelRequest) -> ModelResponse:
        self.seen.append(request)
        return await super().complete(request)


async def test_an_image_reaches_the_model_as_an_image_and_the_request_stays_reproducible(
    tmp_path: Path, stdio: Stdio, server_dir: Path
) -> None:
    model = _Seeing(
        [{"tool_calls": [{"name": "mcp__modern__chart", "arguments": {}}]}, {"text": "done"}]
    )
    db = tmp_path / "log.db"
    async with open_sqlite_store(db) as store:
        session = await Agent(
            model=model, model_name="test-model", mcp_servers=[stdio("modern", "modern")]
        ).run(store, "draw")
        events = [CODEC.decode(e) async for e in store.read(session.id)]
        (images,) = [e for e in events if isinstance(e, ToolImages)]
        (image,) = images.images
        stored = await store.get_blob(image.digest)
        prompts = [e for e in events if isinstance(e, PromptRendered)]

    png = base64.b64decode(PNG)
    assert (image.media_type, stored, image.size) == ("image/png", png, len(png))
    (done,) = [e for e in events if isinstance(e, ToolCompleted)]
    assert done.content == f"the chart:\n[image image/png, {len(png)} bytes, attached]"
    # the adapter is handed the bytes; the recorded request names them by digest only
    tool_message = model.seen[1].messages[-1]
    result, shown = tool_message.parts
    assert isinstance(result, ToolResult) and isinstance(shown, ToolImage)
    assert (shown.digest, shown.data) == (image.digest, png)
    assert request_hash(model.seen[1]) == prompts[1].request_hash
    assert b"iVBOR" not in message_line(tool_message)

    anthropic = anthropic_request(model.seen[1], model="m")["messages"][-1]["content"]
    assert anthropic == [
        {
            "type": "tool_result",
            "tool_use_id": result.call_id,
            "content": [
                {"type": "text", "text": done.content},
                {
                    "type": "image",
                    "source": {"type": "base64", "media_type": "image/png", "data": PNG},
                },
            ],
            # the last message of the request: a cache breakpoint (docs/context.md)
            "cache_control": {"type": "ephemeral"},
        }
    ]
    openai = openai_request(model.seen[1], model="m")["messages"][-2:]
    assert openai[0] == {"role": "tool", "tool_call_id": result.call_id, "content": done.content}
    assert openai[1]["role"] == "user" and openai[1]["content"][1] == {
        "type": "image_url",
        "image_url": {"url": f"data:image/png;base64,{PNG}"},
    }

    # the server gone, the log alone reproduces every request and re-drives
    shutil.rmtree(server_dir)
    skillog = Path(sys.executable).with_name("skillog")
    for command in (
        ["log", "verify", "--db", str(db)],
        ["replay", session.id, "--db", str(db), "--redrive"],
    ):
        done_ = await trio.run_process(
            [str(skillog), *command], capture_stdout=True, capture_stderr=True, check=False
        )
        assert done_.returncode == 0, (done_.stdout + done_.stderr).decode()

    # the image is a blob the log needs: deleted, verify says so
    with sqlite3.connect(db) as raw:
        raw.execute("DELETE FROM blobs WHERE digest = ?", (image.digest,))
    verify = await trio.run_process(
        [str(skillog), "log", "verify", "--db", str(db)],
        capture_stdout=True,
        capture_stderr=True,
        check=False,
    )
    assert verify.returncode == 1 and image.digest[:12] in (verify.stdout + verify.stderr).decode()


async def test_progress_and_log_messages_of_a_call_are_kept_with_its_result(
    tmp_path: Path, stdio: Stdio
) -> None:
    db = tmp_path / "log.db"
    async with open_sqlite_store(db) as store:
        session = await Agent(
            model=ScriptedModel(
                [
                    {"tool_calls": [{"name": "mcp__modern__steps", "arguments": {"count": 3}}]},
                    {"text": "done"},
                ]
            ),
            model_name="test-model",
            mcp_servers=[stdio("modern", "modern")],
        ).run(store, "step")
        events = [CODEC.decode(e) async for e in store.read(session.id)]
        (result,) = [e for e in events if isinstance(e, McpResult)]
        assert result.notes is not None
        notes = json.loads(await store.get_blob(result.notes))

    # a progressToken went with the call: the server reported each step
    assert notes["progress"] == [
        {"progress": repr(float(i)), "total": "3.0", "message": f"step {i}"} for i in (1, 2, 3)
    ]
    assert [n["data"] for n in notes["log"]] == [f"did step {i}" for i in (1, 2, 3)]
    assert {n["level"] for n in notes["log"]} == {"info"}
    code, output = await _replay_cli(db, session.id)
    assert code == 0, output


async def test_a_listing_recorded_before_tool_definitions_gained_a_field_is_not_recorded_again(
    stdio: Stdio,
) -> None:
    """Sessions recorded before ``McpToolDef.task`` hashed their listing without it:
    resumed against the same server, the same tools are not listed again."""
    async with connect_servers([stdio("modern", "modern")]) as servers:
        (listed,) = await servers.changes({})
        assert isinstance(listed, McpToolsListed)
        recorded = msgspec.structs.replace(listed, hash="0" * 64)  # hashed the old way
        assert await servers.changes({"modern": recorded}) == []
        other = msgspec.structs.replace(recorded, tools=listed.tools[1:])
        assert await servers.changes({"modern": other}) == [listed]
