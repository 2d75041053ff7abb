"""The stdio transport's lane (orchestrator/mcp/_stdio.py): tool calls sent and answered
beside the SDK's session record exactly what the SDK's own call path records."""

from __future__ import annotations

import importlib.metadata
import sys
from pathlib import Path
from typing import Any, ClassVar

import msgspec
import pytest
import trio

from eventlog import open_sqlite_store
from orchestrator import Agent
from orchestrator._events import CODEC, ToolCompleted
from orchestrator._host_tools import ToolContext
from orchestrator._lines import MAX_LINE, LineSplitter
from orchestrator.adapters import ScriptedModel
from orchestrator.mcp import McpServerConfig, _client, _stdio, connect_servers

CAPS = {"stored_cap": 1 << 20, "model_cap": 1 << 16}
TESTED_SDK = "2.3.0"
"""The lane uses private helpers of this release of the mcp SDK; another release may
lack them, and calls then take the SDK's own path (the last test)."""


def _lane_of(connection: Any) -> Any:
    if connection._lane is None and importlib.metadata.version("mcp") != TESTED_SDK:
        pytest.skip(f"the lane does not fit mcp {importlib.metadata.version('mcp')}")
    assert connection._lane is not None  # stdio servers take the lane
    return connection._lane


async def test_a_call_on_the_lane_records_what_the_sdk_path_records(stdio: Any) -> None:
    calls = [
        ("tracker", "find_issue", {"number": 7}),  # text
        ("tracker", "fail", {}),  # an error result
        ("tracker", "screenshot", {}),  # an image and a resource link
        ("modern", "chart", {}),  # text and an image
        ("modern", "steps", {"count": 2}),  # progress and log messages: the notes
        ("modern", "whoami", {}),  # what the server learned of the client
        ("modern", "job", {}),  # a task-only tool called plainly: the server refuses
    ]
    async with connect_servers([stdio("tracker", "tracker"), stdio("modern", "modern")]) as servers:
        outcomes: dict[bool, list[Any]] = {True: [], False: []}
        for lane in (True, False, True):
            for n, (server, tool, arguments) in enumerate(calls):
                connection = servers._servers[server]
                if not lane:
                    saved, connection._lane = _lane_of(connection), None
                context = ToolContext(session_id="s1", call_id=f"call_{n}", idempotency_key="k")
                try:
                    outcome = await servers.call(
                        server, tool, msgspec.json.encode(arguments).decode(), context, **CAPS
                    )
                finally:
                    if not lane:
                        connection._lane = saved
                outcomes[lane].append(msgspec.structs.replace(outcome, duration_ms=0))
    lane_outcomes, sdk_outcomes = outcomes[True][: len(calls)], outcomes[False]
    assert lane_outcomes == sdk_outcomes
    assert outcomes[True][len(calls) :] == sdk_outcomes  # and again after the SDK's calls
    assert sdk_outcomes[1].is_error and sdk_outcomes[4].notes
    assert sdk_outcomes[-1].failure == "protocol"


async def test_a_call_given_up_on_the_lane_leaves_the_next_call_its_own_answer(
    stdio: Any,
) -> None:
    async with connect_servers([stdio("tracker", "tracker", call_timeout_ms=300)]) as servers:
        context = ToolContext(session_id="s1", call_id="call_0")
        late = await servers.call("tracker", "slow", '{"seconds": 1.0}', context, **CAPS)
        assert late.failure == "timeout"
        # A generous deadline from here on (the spec is what the call reads): the next
        # call is still waiting when the first one's answer would arrive, if the
        # server sends it after the cancellation; it gets its own answer.
        connection = servers._servers["tracker"]
        connection.spec = msgspec.structs.replace(connection.spec, call_timeout_ms=30_000)
        context = ToolContext(session_id="s1", call_id="call_1")
        fine = await servers.call("tracker", "slow", '{"seconds": 1.0}', context, **CAPS)
        assert fine.failure is None and fine.content == "slept"
        context = ToolContext(session_id="s1", call_id="call_2")
        fine = await servers.call("tracker", "find_issue", '{"number": 3}', context, **CAPS)
        assert fine.content == 'tracker.find_issue({"number": 3})'


async def test_without_the_sdks_private_helpers_calls_take_the_sdks_own_transport(
    stdio: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An SDK release without what orchestrator/mcp/_stdio.py imports of it: the server
    is started and spoken to by the SDK's stdio_client, and calls go through its session."""
    monkeypatch.setattr(_client, "_own_stdio", lambda: None)
    async with connect_servers([stdio("tracker", "tracker")]) as servers:
        assert servers._servers["tracker"]._lane is None
        context = ToolContext(session_id="s1", call_id="call_0")
        found = await servers.call("tracker", "find_issue", '{"number": 3}', context, **CAPS)
        assert found.failure is None
        assert found.content == 'tracker.find_issue({"number": 3})'


class _Watched(LineSplitter):
    """The client's splitter, keeping the most bytes of a line it ever held."""

    held: ClassVar[list[int]] = [0]

    def feed(self, data: bytes) -> list[bytes | None]:
        lines = super().feed(data)
        self.held[0] = max(self.held[0], self.buffered)
        return lines


@pytest.mark.parametrize(
    ("limit", "size"),
    [(1 << 16, 4 << 20), pytest.param(MAX_LINE, MAX_LINE + (4 << 20), marks=pytest.mark.slow)],
)
async def test_a_server_line_over_the_limit_is_dropped_as_it_comes_and_the_session_goes_on(
    limit: int,
    size: int,
    tmp_path: Path,
    server_dir: Path,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Issue 24: a server writing one line far over the limit (in CI a limit of 64 KiB
    and a line of 4 MiB, in 64 KiB writes) before its answer: skillog holds no more
    than the limit of it, the error names the server and what it must do, the answer
    behind the line (and a line that is not UTF-8) and the next call arrive, and the
    session verifies."""
    monkeypatch.setattr(_stdio, "MAX_LINE", limit)
    monkeypatch.setattr(_stdio, "LineSplitter", _Watched)
    monkeypatch.setattr(_Watched, "held", [0])
    script = str(server_dir / "mcp_server.py")
    flood = McpServerConfig(name="flood", command=sys.executable, args=(script, "flood", str(size)))
    calls = [{"name": "mcp__flood__echo", "arguments": {"text": t}} for t in ("one", "two")]
    db = tmp_path / "log.db"
    async with open_sqlite_store(db) as store:
        session = await Agent(
            model=ScriptedModel([*({"tool_calls": [c]} for c in calls), {"text": "done"}]),
            model_name="test-model",
            mcp_servers=[flood],
        ).run(store, "echo twice", session_id="s1")
        events = [CODEC.decode(e) async for e in store.read(session.id)]
    done = [e for e in events if isinstance(e, ToolCompleted)]
    assert [(e.content, e.is_error) for e in done] == [("one", False), ("two", False)]
    assert 0 < _Watched.held[0] <= limit
    error, undecoded = [r for r in caplog.records if r.name == "mcp.client.stdio"]
    assert f"the MCP server 'flood' wrote a line over {limit} bytes" in error.getMessage()
    assert "must send smaller messages" in error.getMessage()
    # a line that is not UTF-8 is a line that does not parse too (it ended the read loop)
    assert undecoded.getMessage().endswith(
        "the MCP server 'flood' wrote a line to its stdout that is not utf-8 (invalid start "
        "byte at byte 0); it was dropped. The server must write utf-8 JSON-RPC, one message "
        "per line."
    )
    skillog = Path(sys.executable).with_name("skillog")
    verify = await trio.run_process(
        [str(skillog), "log", "verify", "--db", str(db)],
        capture_stdout=True,
        capture_stderr=True,
        check=False,
    )
    assert verify.returncode == 0, (verify.stdout + verify.stderr).decode()
