"""Clients skillog did not write drive ``skillog mcp serve``: the official TypeScript
SDK's client (ts_client.mjs) over stdio and streamable HTTP, and the MCP Inspector's
CLI; each recorded session then verifies and re-drives."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from eventlog import open_sqlite_store
from orchestrator._events import CODEC, ApprovalResolved, ScriptExecuted, SessionEnded
from orchestrator._streams import is_session_stream

from ..test_mcp_serve import skills as skills  # the fixture: a skill with a script
from ..test_mcp_serve_http import env_for, server
from .foreign import NODE_MODULES, inspector, node, package_file

CLI = [sys.executable, "-m", "orchestrator.cli"]
CLIENT = Path(__file__).with_name("ts_client.mjs")


@pytest.fixture
def sdk() -> Path:
    """The TypeScript SDK's client (skips, or fails in CI, when not installed)."""
    return package_file("@modelcontextprotocol/sdk", "dist/esm/client/index.js")


def run(tmp_path: Path, *command: str) -> str:
    """``command``'s stdout; it must succeed."""
    done = subprocess.run(
        command, capture_output=True, text=True, cwd=tmp_path, env=env_for(tmp_path), timeout=180
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


def ts_client(tmp_path: Path, mode: str, target: str, answers: str) -> dict[str, Any]:
    out = run(tmp_path, node(), str(CLIENT), str(NODE_MODULES), mode, target, answers)
    result: dict[str, Any] = json.loads(out.splitlines()[-1])
    return result


def skillog(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*CLI, *args], capture_output=True, text=True, cwd=tmp_path, env=env_for(tmp_path)
    )


def check_seen(seen: dict[str, Any]) -> None:
    assert seen["server"]["name"] == "skillog"
    assert seen["capabilities"]["tools"]["listChanged"] is True
    assert seen["capabilities"]["resources"]["listChanged"] is True
    assert seen["tools"][0] == "skills.load"
    assert seen["templates"] == ["skill://{skill}/{path}"]
    assert "skill://report/references/format.md" in seen["resourcesAfterLoad"]
    assert seen["read"] == seen["resourceText"] == "# Format\nOne line per item.\n"
    assert seen["parallel"] == ["# Format\nOne line per item.\n"] * 3
    # the load changed the tools and resources: the client heard it, and its SDK's
    # auto-refresh listed them again by itself, as they are now
    # (the tool names stay; the resources gain the loaded skill's files)
    assert seen["listChanged"]["tools"] >= 1 and seen["listChanged"]["resources"] >= 1
    assert seen["refreshed"]["tools"][-1] == seen["toolsNow"]
    assert seen["refreshed"]["resources"][-1] == seen["resourcesNow"] != seen["resources"]
    assert "skill://report/references/format.md" in seen["refreshed"]["resources"][-1]
    # elicitation: accepted runs the script, declined and cancelled refuse it
    assert [e["action"] for e in seen["elicitations"]] == ["accept", "decline", "cancel"]
    assert "allow skill report (user) to run" in seen["elicitations"][0]["message"]
    runs = seen["runs"]
    assert not runs[0]["isError"] and "args run0" in runs[0]["text"]
    assert runs[1]["isError"] and "not approved" in runs[1]["text"]
    assert runs[2]["isError"] and "not approved" in runs[2]["text"]


async def check_log(tmp_path: Path, sessions: int) -> None:
    async with open_sqlite_store(tmp_path / "mcp.db") as store:
        # each connection's session (its lease stream beside it is not a session)
        streams = [s.stream for s in await store.streams() if is_session_stream(s.stream)]
        assert len(streams) == sessions
        for stream in streams:
            bodies = [CODEC.decode(e) async for e in store.read(stream)]
            assert isinstance(bodies[-1], SessionEnded), bodies[-1]
            decided = [(b.approved, b.reason) for b in bodies if isinstance(b, ApprovalResolved)]
            assert decided == [
                (True, None),
                (False, "the user chose decline"),
                (False, "the user chose cancel"),
            ]
            assert len([b for b in bodies if isinstance(b, ScriptExecuted)]) == 1
    verified = skillog(tmp_path, "log", "verify")
    assert verified.returncode == 0, verified.stdout + verified.stderr
    for stream in streams:
        replay = skillog(tmp_path, "replay", stream, "--redrive")
        assert replay.returncode == 0, replay.stdout + replay.stderr


async def test_the_typescript_sdk_client_drives_mcp_serve_over_stdio(
    tmp_path: Path, skills: Path, sdk: Path
) -> None:
    command = [*CLI, "mcp", "serve", "--skills", str(skills)]
    check_seen(ts_client(tmp_path, "stdio", json.dumps(command), "accept,decline,cancel"))
    await check_log(tmp_path, 1)


async def test_the_typescript_sdk_client_drives_mcp_serve_over_http(
    tmp_path: Path, skills: Path, sdk: Path
) -> None:
    with server(tmp_path, skills, "127.0.0.1:0") as (url, _):
        seen = ts_client(tmp_path, "http", url, "accept,decline,cancel")
        assert seen["terminated"] is True
    check_seen(seen)
    await check_log(tmp_path, 1)


def test_the_inspector_cli_lists_and_calls(tmp_path: Path, skills: Path) -> None:
    cli = [node(), str(inspector()), "--cli", *CLI, "mcp", "serve", "--skills", str(skills)]

    def inspect(*args: str) -> Any:
        return json.loads(run(tmp_path, *cli, *args))

    tools = inspect("--method", "tools/list")["tools"]
    assert tools[0]["name"] == "skills.load"
    templates = inspect("--method", "resources/templates/list")["resourceTemplates"]
    assert [t["uriTemplate"] for t in templates] == ["skill://{skill}/{path}"]
    loaded = inspect(
        "--method", "tools/call", "--tool-name", "skills.load", "--tool-arg", 'names=["report"]'
    )
    assert "One line per item" not in json.dumps(loaded) and not loaded.get("isError")
    assert "then run scripts/count.py" in loaded["content"][0]["text"]
    # each Inspector call is a connection of its own: a session each, all verify
    verified = skillog(tmp_path, "log", "verify")
    assert verified.returncode == 0, verified.stdout + verified.stderr
