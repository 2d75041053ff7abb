"""MCP progress live (issue 24, item 10): every call carries a ``progressToken``; the
server's progress notifications reach ``Agent(on_progress=...)`` as they arrive, while
the call runs, and are not recorded per tick (the call's ``notes`` keep them once)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from eventlog import Event as StoredEvent
from eventlog import open_sqlite_store
from orchestrator import Agent, McpProgress
from orchestrator._events import CODEC, McpResult
from orchestrator.adapters import ScriptedModel

from .test_mcp_sessions import _replay_cli

Stdio = Any


async def test_progress_reaches_the_observer_live_and_is_recorded_once(
    tmp_path: Path, stdio: Stdio
) -> None:
    seen: list[tuple[str, Any]] = []

    def on_progress(progress: McpProgress) -> None:
        seen.append(("progress", progress))

    def observer(event: StoredEvent) -> None:
        seen.append(("event", event.type))

    steps = {"tool_calls": [{"name": "mcp__modern__steps", "arguments": {"count": 3}}]}
    async with open_sqlite_store(tmp_path / "log.db") as store:
        session = await Agent(
            model=ScriptedModel([steps, {"text": "done"}]),
            model_name="test-model",
            mcp_servers=[stdio("modern", "modern")],
            on_progress=on_progress,
            observers=[observer],
        ).run(store, "take steps")
        events = [CODEC.decode(e) async for e in store.read(session.id)]
        (result,) = [e for e in events if isinstance(e, McpResult)]
        assert result.notes is not None
        notes = json.loads(await store.get_blob(result.notes))
    ticks = [p for kind, p in seen if kind == "progress"]
    # the numbers as decimal text, as the notes keep them
    assert [(p.progress, p.total, p.message) for p in ticks] == [
        ("1.0", "3.0", "step 1"),
        ("2.0", "3.0", "step 2"),
        ("3.0", "3.0", "step 3"),
    ]
    assert {p.server for p in ticks} == {"modern"} and ticks[0].session_id == session.id
    # live: while the call ran, after its intent and before its outcome
    kinds = [k if k == "progress" else v for k, v in seen]
    assert kinds.index("tool.called") < kinds.index("progress")
    assert max(i for i, k in enumerate(kinds) if k == "progress") < kinds.index("tool.completed")
    # recorded once, with the result, not per tick
    assert len(notes["progress"]) == 3
    code, output = await _replay_cli(tmp_path / "log.db", session.id)
    assert code == 0, output


def test_skillog_run_shows_progress_on_a_line_made_inert() -> None:
    import io

    from orchestrator.cli._session import LiveText

    out = io.StringIO()
    live = LiveText(out)
    live.progress(
        McpProgress(
            session_id="s",
            call_id="c",
            server="modern",
            progress="1.0",
            total="3.0",
            message="step \x1b[2J1",
        )
    )
    text = out.getvalue()
    assert text.startswith("[modern: 1.0/3.0 step ") and text.endswith("]\n")
    assert "\x1b" not in text
