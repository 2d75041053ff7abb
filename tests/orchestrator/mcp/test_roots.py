"""MCP roots (issue 24, item 10): skillog declares ``roots`` and answers ``roots/list``
with the active skills' folders for the servers policy names, recorded between turns
(``mcp.roots_changed``) before the server is told the list changed; nothing before any
skill is active, nothing for a server policy does not name; re-driven with the server
gone."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from eventlog import open_sqlite_store
from orchestrator import Agent, McpToolRules, PolicyConfig
from orchestrator._events import CODEC, McpRootsChanged, ToolCompleted
from orchestrator.adapters import ScriptedModel

from .test_mcp_sessions import _replay_cli

Stdio = Any
ROOTS = {"tool_calls": [{"name": "mcp__modern__roots", "arguments": {}}]}
LOAD = {"tool_calls": [{"name": "skills.load", "arguments": {"names": ["notes"]}}]}


async def _run(tmp_path: Path, stdio: Stdio, make_skill: Any, policy: PolicyConfig) -> Any:
    skill = make_skill("notes")
    async with open_sqlite_store(tmp_path / "log.db") as store:
        session = await Agent(
            model=ScriptedModel([ROOTS, LOAD, ROOTS, {"text": "done"}]),
            model_name="test-model",
            skills=[skill],
            file_access=True,
            mcp_servers=[stdio("modern", "modern")],
            policy=policy,
        ).run(store, "what may the server see?")
        events = [CODEC.decode(e) async for e in store.read(session.id)]
    answers = [
        json.loads(e.content)
        for e in events
        if isinstance(e, ToolCompleted) and e.tool == "mcp__modern__roots"
    ]
    return session.id, events, answers, skill


async def test_a_named_server_is_told_the_active_skills_folders(
    tmp_path: Path, stdio: Stdio, make_skill: Any, server_dir: Path
) -> None:
    policy = PolicyConfig(mcp=McpToolRules(roots=("modern",)))
    session, events, answers, skill = await _run(tmp_path, stdio, make_skill, policy)
    uri = Path(skill.root).as_uri()
    # before any skill is active: nothing; after the load: its folder, and the
    # server was told the list changed
    assert answers[0] == {"roots": [], "changed": 0}
    assert answers[1]["roots"] == [{"uri": uri, "name": "notes"}]
    assert answers[1]["changed"] == 1
    (changed,) = [e for e in events if isinstance(e, McpRootsChanged)]
    assert changed.server == "modern" and [r.uri for r in changed.roots] == [uri]
    # recorded between turns, before the prompt that follows the load
    kinds = [type(e).__name__ for e in events]
    at = kinds.index("McpRootsChanged")
    assert kinds[at - 1] == "ToolCompleted" and kinds[at + 1] == "PromptRendered"

    (server_dir / "mcp_server.py").unlink()
    code, output = await _replay_cli(tmp_path / "log.db", session)
    assert code == 0, output


async def test_a_server_policy_does_not_name_is_told_nothing(
    tmp_path: Path, stdio: Stdio, make_skill: Any
) -> None:
    session, events, answers, _ = await _run(tmp_path, stdio, make_skill, PolicyConfig())
    assert answers == [{"roots": [], "changed": 0}, {"roots": [], "changed": 0}]
    assert not [e for e in events if isinstance(e, McpRootsChanged)]
    code, output = await _replay_cli(tmp_path / "log.db", session)
    assert code == 0, output
