"""A separate process for the MCP crash test: run a session whose second call is
an at-most-once MCP call that takes long (the test SIGKILLs this process during it),
or resume that session from the log.

usage: mcp_worker.py run|resume DB SERVER_DIR EFFECT (the class the config gives slow)
       mcp_worker.py task-run|task-resume DB URL (a session whose call is a task of the
       ``modern`` server's ``job`` over streamable HTTP at URL)
       mcp_worker.py stdio-task-run|stdio-task-resume DB SERVER_DIR (the same, the
       ``modern`` server over stdio: a resumed session starts it anew)
       mcp_worker.py form-run|form-resume DB SERVER_DIR (a session whose call ``f1`` is
       the ``modern`` server's ``form``, idempotent, with nobody in the process to answer:
       the form waits for ``skillog approvals answer``, up to $FORM_TIMEOUT_MS, 60 s
       by default)
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import trio

from eventlog import open_sqlite_store
from orchestrator import Agent, McpToolRules, PolicyConfig
from orchestrator.adapters import ScriptedModel
from orchestrator.mcp import McpServerConfig

# Explicit ids: a resumed scripted model restarts its own numbering.
TURNS = [
    {"tool_calls": [{"id": "c1", "name": "mcp__tracker__find_issue", "arguments": {"number": 1}}]},
    {"tool_calls": [{"id": "c2", "name": "mcp__tracker__slow", "arguments": {"seconds": 5}}]},
    {"tool_calls": [{"id": "c3", "name": "mcp__tracker__find_issue", "arguments": {"number": 2}}]},
    {"text": "done"},
]


TASK_TURNS = [
    {"tool_calls": [{"id": "t1", "name": "mcp__modern__job", "arguments": {"seconds": 3}}]},
    {"text": "done"},
]


async def task(mode: str, db: str, where: str) -> None:
    if mode.startswith("stdio-"):
        script = str(Path(where) / "mcp_server.py")
        env = {"MCP_LEDGER": os.environ["MCP_LEDGER"]}
        server = McpServerConfig(
            name="modern", command=sys.executable, args=(script, "modern"), env=env
        )
    else:
        server = McpServerConfig(name="modern", url=where)
    turns = TASK_TURNS if mode.endswith("task-run") else TASK_TURNS[1:]
    agent = Agent(model=ScriptedModel(turns), model_name="m", mcp_servers=[server])
    async with open_sqlite_store(db) as store:
        if mode.endswith("task-run"):
            await agent.run(store, "go", session_id="tasked")
        else:
            await agent.resume(store, "tasked")


FORM = {
    "type": "object",
    "properties": {"name": {"type": "string"}, "age": {"type": "integer"}},
    "required": ["name"],
}
FORM_TURNS = [
    {"tool_calls": [{"id": "f1", "name": "mcp__modern__form", "arguments": {"schema": FORM}}]},
    {"text": "done"},
]


async def form(mode: str, db: str, server_dir: str) -> None:
    server = McpServerConfig(
        name="modern",
        command=sys.executable,
        args=(str(Path(server_dir) / "mcp_server.py"), "modern"),
        effects={"form": "idempotent"},
    )
    timeout = int(os.environ.get("FORM_TIMEOUT_MS", "60000"))  # recorded at run
    policy = PolicyConfig(mcp=McpToolRules(elicitation_timeout_ms=timeout))
    turns = FORM_TURNS if mode == "form-run" else FORM_TURNS[1:]
    agent = Agent(model=ScriptedModel(turns), model_name="m", mcp_servers=[server], policy=policy)
    async with open_sqlite_store(db) as store:
        if mode == "form-run":
            await agent.run(store, "go", session_id="formed")
        else:
            await agent.resume(store, "formed")


async def main(mode: str, db: str, server_dir: str, effect: str = "") -> None:
    if "task-" in mode:
        await task(mode, db, server_dir)
        return
    if mode.startswith("form-"):
        await form(mode, db, server_dir)
        return
    server = McpServerConfig(
        name="tracker",
        command=sys.executable,
        args=(str(Path(server_dir) / "mcp_server.py"), "tracker"),
        env={"MCP_LEDGER": os.environ["MCP_LEDGER"]},
        effects={"slow": effect},  # type: ignore[dict-item]
    )
    skip = 0 if mode == "run" else 2
    agent = Agent(model=ScriptedModel(TURNS[skip:]), model_name="m", mcp_servers=[server])
    async with open_sqlite_store(db) as store:
        if mode == "run":
            await agent.run(store, "go", session_id="crashed")
        else:
            await agent.resume(store, "crashed")


if __name__ == "__main__":
    trio.run(main, *sys.argv[1:])
