"""Crash points of a served call: ``skillog mcp serve`` killed (SIGKILL) just before,
as, or just after the commit that holds a call's outcome becomes durable (the lane
writes a ``skills.read`` reply at that moment, from the store's writer thread), with
the official SDK's client on
the other end. A call without effect (``skills.load``, ``skills.read``) commits once:
the context the client had (the turn's ``prompt.rendered``), its request, its intent
and its outcome together (docs/effects.md); ``skills.run_script`` keeps the write-ahead
path. Whatever the point: every result the client received is in the log as that
call's ``tool.completed``, killed before the commit the call left no trace (a pure one:
not even its prompt) or only its intent (a script), and the log verifies, replays and
re-drives."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import mcp.types as types
import pytest
import trio
from mcp import ClientSession, StdioServerParameters, stdio_client

from eventlog import open_sqlite_store
from orchestrator._events import (
    CODEC,
    Event,
    ModelResponded,
    PromptRendered,
    ScriptStarted,
    ToolCalled,
    ToolCompleted,
)
from orchestrator._streams import is_session_stream
from orchestrator._verdict import verdict
from orchestrator.mcp_server._lane import LANE_TOOLS
from orchestrator.scripts._sandbox import sandbox_available
from replay import load_recording, redrive, replay_session

WORKER = Path(__file__).with_name("serve_crash_worker.py")
ROOT = Path(__file__).parents[2]
CALLS: list[tuple[str, dict[str, Any]]] = [
    ("skills.load", {"names": ["notes"]}),
    ("skills.read", {"path": "references/style.md"}),
    ("skills.run_script", {"path": "scripts/hello.py"}),
]


@pytest.fixture
def skills(tmp_path: Path) -> Path:
    root = tmp_path / "skills" / "notes"
    (root / "references").mkdir(parents=True)
    (root / "scripts").mkdir()
    (root / "SKILL.md").write_text("---\nname: notes\ndescription: Notes.\n---\nBrief.\n")
    (root / "references" / "style.md").write_text("Short lines.\n")
    (root / "scripts" / "hello.py").write_text("print('hello')\n")
    return tmp_path / "skills"


async def serve_until_killed(
    tmp_path: Path, skills: Path, when: str, n: int, calls: int
) -> list[str]:
    """The results the client received before the server died at its crash point."""
    params = StdioServerParameters(
        command=sys.executable,
        args=[str(WORKER), when, str(n), "--skills", str(skills), "--tier", "org"],
        env={
            "HOME": str(tmp_path),
            "SKILLOG_DB": str(tmp_path / "mcp.db"),
            "SKILLOG_CONFIG": str(tmp_path / "config.yaml"),
            "PYTHONPATH": str(ROOT),
            "PATH": "/usr/bin:/bin",
        },
        cwd=str(tmp_path),
    )
    received: list[str] = []
    with trio.fail_after(60), (tmp_path / "server.err").open("w") as errlog:
        try:
            async with (
                stdio_client(params, errlog=errlog) as (read, write),
                ClientSession(read, write) as client,
            ):
                await client.initialize()
                for name, arguments in CALLS[:calls]:
                    result = await client.call_tool(name, arguments)
                    block = result.content[0]
                    assert isinstance(block, types.TextContent)
                    received.append(block.text)
        except Exception:  # the server died: the connection closed under the call
            pass
    return received


async def logged(db: Path) -> list[Event]:
    async with open_sqlite_store(db) as store:
        (stream,) = [i.stream for i in await store.streams() if is_session_stream(i.stream)]
        report = await verdict(store)
        assert report.ok, report.faults
        recording = await load_recording(store, stream)
        proved = await replay_session(store, recording)
        assert proved.ok, proved.divergence
        redriven = await redrive(store, recording)
        assert redriven.ok, redriven.divergence
        return [CODEC.decode(e) async for e in store.read(stream)]


@pytest.mark.parametrize("when", ["before", "durable", "after"])
@pytest.mark.parametrize("n", [1, 2])
async def test_a_pure_call_killed_around_its_one_commit(
    tmp_path: Path, skills: Path, when: str, n: int
) -> None:
    received = await serve_until_killed(tmp_path, skills, when, n, calls=2)
    # The n-th call got no reply; unless the served-call lane took it (skills.read) and
    # the server died after its commit was durable: its reply left then.
    replied = when == "after" and CALLS[n - 1][0] in LANE_TOOLS
    assert len(received) == n - 1 + replied
    bodies = await logged(tmp_path / "mcp.db")
    completed = [b for b in bodies if isinstance(b, ToolCompleted)]
    # Every result the client read is the log's, for its call.
    assert [c.content for c in completed[: len(received)]] == received
    responded = [b for b in bodies if isinstance(b, ModelResponded)]
    called = [b for b in bodies if isinstance(b, ToolCalled)]
    prompts = [b for b in bodies if isinstance(b, PromptRendered)]
    if when == "before":  # no trace of the call: neither its prompt, request nor intent
        assert len(prompts) == len(responded) == len(called) == len(completed) == n - 1
    else:  # durable with its outcome, though the client never read it
        assert len(prompts) == len(responded) == len(called) == len(completed) == n
        assert completed[-1].tool == CALLS[n - 1][0] and not completed[-1].is_error
    # The prompt of the turn after a reply waits for the client's next call: the log
    # ends with the last outcome, whichever commit the server died at.
    assert isinstance(bodies[-1], ToolCompleted) or (n == 1 and when == "before")


async def test_killed_after_a_reply_the_log_ends_with_what_the_client_read(
    tmp_path: Path, skills: Path
) -> None:
    """Between two calls the next turn's prompt is composed but not yet committed (it
    joins the next call's transaction): killed there, the log ends with the outcome the
    client read, and a session so cut verifies, replays and re-drives."""
    received = await serve_until_killed(tmp_path, skills, "replied", 2, calls=3)
    assert len(received) == 2
    bodies = await logged(tmp_path / "mcp.db")
    completed = [b for b in bodies if isinstance(b, ToolCompleted)]
    assert [c.content for c in completed] == received
    assert isinstance(bodies[-1], ToolCompleted)
    assert len([b for b in bodies if isinstance(b, PromptRendered)]) == 2


@pytest.mark.skipif(not sandbox_available(), reason="bubblewrap is not installed")
@pytest.mark.parametrize("when", ["before", "after"])
async def test_a_script_killed_around_its_outcome_keeps_write_ahead(
    tmp_path: Path, skills: Path, when: str
) -> None:
    received = await serve_until_killed(tmp_path, skills, when, 3, calls=3)
    assert len(received) == 2
    bodies = await logged(tmp_path / "mcp.db")
    # The intent, then the script's start, each durable before the script ran (a
    # sandboxed script without network is pure, but a script is never run unrecorded).
    kinds = [type(b) for b in bodies]
    intent = max(i for i, b in enumerate(bodies) if isinstance(b, ToolCalled))
    assert bodies[intent].tool == CALLS[2][0]  # type: ignore[attr-defined]
    assert kinds.index(ScriptStarted) > intent
    ran = [b for b in bodies if isinstance(b, ToolCompleted) and b.tool == CALLS[2][0]]
    assert len(ran) == (when == "after")
