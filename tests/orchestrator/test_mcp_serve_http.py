"""``skillog mcp serve --transport http`` in a subprocess: the SDK's streamable HTTP
client on loopback, a client's DELETE ending its session, a bearer token required
beyond loopback, foreign Host headers refused on loopback."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx2 as httpx
import mcp.types as types
import pytest
import trio
from mcp import ClientSession
from mcp.client.streamable_http import streamable_http_client

from eventlog import open_sqlite_store
from orchestrator._events import CODEC, SessionEnded, SessionStarted

CLI = [sys.executable, "-m", "orchestrator.cli"]

# The SDK's streamable HTTP client (httpx2) leaves its response streams' async
# generators to the garbage collector, which trio reports as ResourceWarnings; the
# server under test is not involved (docs/mcp.md, "On trio").
pytestmark = pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")


@pytest.fixture
def skills(tmp_path: Path) -> Path:
    root = tmp_path / "skills" / "notes"
    (root / "references").mkdir(parents=True)
    (root / "SKILL.md").write_text("---\nname: notes\ndescription: Take notes.\n---\nBe brief.\n")
    (root / "references" / "style.md").write_text("Short lines.\n")
    return tmp_path / "skills"


def env_for(tmp_path: Path) -> dict[str, str]:
    return {
        **os.environ,
        "HOME": str(tmp_path),
        "SKILLOG_CONFIG": str(tmp_path / "config.yaml"),
        "SKILLOG_DB": str(tmp_path / "mcp.db"),
        "PYTHONPATH": str(Path(__file__).parents[2]),
    }


@contextmanager
def server(tmp_path: Path, skills: Path, bind: str, *more: str) -> Iterator[tuple[str, list[str]]]:
    """The server's /mcp URL (on 127.0.0.1) and its stderr lines, read after it stops."""
    proc = subprocess.Popen(
        [
            *CLI,
            *("mcp", "serve", "--transport", "http", "--bind", bind, "--skills", str(skills)),
            *more,
        ],
        stderr=subprocess.PIPE,
        stdin=subprocess.DEVNULL,
        text=True,
        cwd=tmp_path,
        env=env_for(tmp_path),
    )
    assert proc.stderr is not None
    lines: list[str] = []
    try:
        for line in proc.stderr:
            lines.append(line)
            found = re.search(r"http://[^ ,]+:(\d+)/mcp", line)
            if found:
                break
        assert found, "".join(lines)
        yield f"http://127.0.0.1:{found.group(1)}/mcp", lines
    finally:
        proc.send_signal(signal.SIGTERM)
        _, rest = proc.communicate(timeout=60)
        lines.extend(rest.splitlines(keepends=True))
    assert proc.returncode == 0, "".join(lines)


async def use_skill(url: str, headers: dict[str, str] | None = None) -> str:
    async with (
        httpx.AsyncClient(headers=headers, timeout=60) as http,
        streamable_http_client(url, http_client=http) as (read, write),
        ClientSession(read, write) as client,
    ):
        await client.initialize()
        assert (await client.list_tools()).tools[0].name == "skills.load"
        await client.call_tool("skills.load", {"names": ["notes"]})
        read_back = await client.call_tool("skills.read", {"path": "references/style.md"})
        block = read_back.content[0]
        assert isinstance(block, types.TextContent)
        return block.text


def skillog(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*CLI, *args], capture_output=True, text=True, cwd=tmp_path, env=env_for(tmp_path)
    )


async def test_loopback_http_sessions_end_on_delete_and_replay(
    tmp_path: Path, skills: Path
) -> None:
    with server(tmp_path, skills, "127.0.0.1:0") as (url, lines):
        assert await use_skill(url) == "Short lines.\n"
        assert await use_skill(url) == "Short lines.\n"
        async with httpx.AsyncClient() as http:
            rebinding = await http.post(
                url, headers={"host": "evil.example"}, json={"jsonrpc": "2.0", "id": 1}
            )
        assert rebinding.status_code in (400, 403, 421), rebinding.text
    async with open_sqlite_store(tmp_path / "mcp.db") as store:
        sessions = [s.stream for s in await store.streams() if "/" not in s.stream]
        assert len(sessions) == 2
        for session in sessions:
            bodies = [CODEC.decode(e) async for e in store.read(session)]
            assert isinstance(bodies[0], SessionStarted) and bodies[0].provider == "mcp"
            assert isinstance(bodies[-1], SessionEnded)
    assert sum("ended; replay it with" in line for line in lines) == 2
    assert skillog(tmp_path, "log", "verify").returncode == 0
    for session in sessions:
        replay = skillog(tmp_path, "replay", session, "--redrive")
        assert replay.returncode == 0, replay.stdout + replay.stderr


async def test_beyond_loopback_every_request_needs_a_token(tmp_path: Path, skills: Path) -> None:
    tokens = {}
    for name, role in (("desk", "submitter"), ("wall", "viewer")):
        made = skillog(tmp_path, "serve", "--add-token", name, "--roles", role)
        assert made.returncode == 0, made.stderr
        found = re.search(r"skl_\S+", made.stdout)
        assert found is not None
        tokens[name] = found.group(0)
    with server(tmp_path, skills, "0.0.0.0:0") as (url, _):
        async with httpx.AsyncClient() as http:
            for headers in ({}, {"authorization": "Bearer skl_wrong"}):
                refused = await http.post(url, headers=headers, json={})
                assert refused.status_code == 401
                assert "skillog serve --add-token" in refused.text
            viewer = {"authorization": f"Bearer {tokens['wall']}"}
            forbidden = await http.post(url, headers=viewer, json={})
            assert forbidden.status_code == 403 and "submitter" in forbidden.text
        text = await use_skill(url, {"authorization": f"Bearer {tokens['desk']}"})
        assert text == "Short lines.\n"
    async with open_sqlite_store(tmp_path / "mcp.db") as store:
        (info,) = [i for i in await store.streams() if not i.stream.startswith("lease/")]
        first = CODEC.decode(await anext(store.read(info.stream)))
    assert isinstance(first, SessionStarted)
    assert first.model == "mcp/0.1.0 (token desk)"


async def test_http_initialize_advertises_the_notifications_it_sends(
    tmp_path: Path, skills: Path
) -> None:
    # Over stdio the server says tools and resources lists change (it sends both
    # notifications); over HTTP it once said they did not, and clients never refreshed.
    with server(tmp_path, skills, "127.0.0.1:0") as (url, _):
        async with (
            httpx.AsyncClient(timeout=60) as http,
            streamable_http_client(url, http_client=http) as (read, write),
            ClientSession(read, write) as client,
        ):
            capabilities = (await client.initialize()).capabilities
            templates = await client.list_resource_templates()
    assert capabilities.tools is not None and capabilities.tools.list_changed is True
    assert capabilities.resources is not None and capabilities.resources.list_changed is True
    (template,) = templates.resource_templates
    assert template.uri_template == "skill://{skill}/{path}"


async def test_a_client_that_leaves_without_delete_is_ended_when_idle(
    tmp_path: Path, skills: Path
) -> None:
    # The MCP Inspector's CLI leaves like this after every call: without the idle
    # timeout its sessions stayed open until the server stopped.
    accept = {"accept": "application/json, text/event-stream"}
    hello = {
        "protocolVersion": "2025-06-18",
        "capabilities": {},
        "clientInfo": {"name": "leaver", "version": "1"},
    }
    with server(tmp_path, skills, "127.0.0.1:0", "--idle-timeout", "1") as (url, _):
        async with httpx.AsyncClient(timeout=60, headers=accept) as http:
            opened = await http.post(
                url, json={"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": hello}
            )
            headers = {"mcp-session-id": opened.headers["mcp-session-id"]}
            note = {"jsonrpc": "2.0", "method": "notifications/initialized"}
            await http.post(url, headers=headers, json=note)
            listed = await http.post(
                url, headers=headers, json={"jsonrpc": "2.0", "id": 2, "method": "tools/list"}
            )
            assert "skills.load" in listed.text
        # gone, without DELETE: the session ends within a few idle periods, while the
        # server runs on
        async with open_sqlite_store(tmp_path / "mcp.db") as store:
            (info,) = [i for i in await store.streams() if not i.stream.startswith("lease/")]
            for _ in range(200):
                bodies = [CODEC.decode(e) async for e in store.read(info.stream)]
                if isinstance(bodies[-1], SessionEnded):
                    break
                await trio.sleep(0.05)
    ended = bodies[-1]
    assert isinstance(ended, SessionEnded) and ended.reason == "closed"
    assert ended.error is not None and ended.error.startswith("idle: no request for 1 s")
