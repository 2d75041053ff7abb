"""Per-call overhead of a recorded MCP tool call over stdio vs the bare SDK client.

    python bench/mcp.py [--calls N]

One real MCP server (tests/orchestrator/mcp/mcp_server.py, ``tracker``) as a subprocess
over stdio, called N times with ``find_issue``:

  - bare: the SDK's ``ClientSession.call_tool`` in a loop, nothing recorded;
  - recorded: a skillog session on a durable SQLite log (synchronous=FULL) whose
    zero-latency scripted model asks for one ``mcp__tracker__find_issue`` per turn: the
    write-ahead intent, the call, ``mcp.result`` with its blob and ``tool.completed``,
    each durable; per call = (session time - the same session with a no-op host tool
    instead) / N + the bare call, i.e. what recording adds to a call.

Prints both per-call times and their ratio (goal <= 1.3x), measured in the same run.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import trio

# This file is bench/mcp.py: its folder must not shadow the SDK (``mcp``) or the packages.
_HERE = Path(__file__).resolve().parent
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != _HERE]
sys.path.insert(0, str(_HERE.parent))

from eventlog import open_sqlite_store  # noqa: E402 - after the path fix above
from orchestrator._host_tools import HostTool  # noqa: E402 - after the path fix above
from orchestrator._loop import Agent, drive  # noqa: E402 - after the path fix above
from orchestrator.adapters import ScriptedModel  # noqa: E402 - after the path fix above
from orchestrator.mcp import McpServerConfig  # noqa: E402 - after the path fix above

SERVER = Path(__file__).resolve().parents[1] / "tests" / "orchestrator" / "mcp" / "mcp_server.py"


async def bare(calls: int) -> float:
    from mcp import ClientSession, StdioServerParameters, stdio_client

    params = StdioServerParameters(command=sys.executable, args=[str(SERVER), "tracker"])
    async with stdio_client(params) as (read, write), ClientSession(read, write) as session:
        await session.initialize()
        await session.list_tools()
        await session.call_tool("find_issue", {"number": 0})  # warm
        start = time.perf_counter()
        for n in range(calls):
            await session.call_tool("find_issue", {"number": n})
        return (time.perf_counter() - start) / calls


async def session_time(calls: int, tool: str, directory: str) -> float:
    """Seconds for a session of ``calls`` turns, each calling ``tool`` once."""

    def noop(number: int) -> str:
        """Do nothing."""
        return "ok"

    turns: list[dict[str, Any]] = [
        {"tool_calls": [{"name": tool, "arguments": {"number": n}}]} for n in range(calls)
    ]
    agent = Agent(
        model=ScriptedModel([*turns, {"text": "done"}]),
        model_name="bench",
        max_turns=calls + 2,
        host_tools=[HostTool.from_function(noop, effect="pure")],
        mcp_servers=[
            McpServerConfig(name="tracker", command=sys.executable, args=(str(SERVER), "tracker"))
        ],
    )
    db = Path(directory) / f"{tool}.db"
    async with open_sqlite_store(db, synchronous="FULL") as store, agent.mcp_connected():
        session = await agent.start(store, task="go")
        start = time.perf_counter()
        await drive(session, agent.model, agent.retry)
        return time.perf_counter() - start


async def main(calls: int) -> None:
    with tempfile.TemporaryDirectory() as directory:
        bare_call = await bare(calls)
        with_mcp = await session_time(calls, "mcp__tracker__find_issue", directory)
        with_noop = await session_time(calls, "noop", directory)
    recording = max(with_mcp - with_noop, 0) / calls
    print(f"bare SDK call                       {bare_call * 1000:8.3f} ms")
    print(f"session turn with the MCP call      {with_mcp / calls * 1000:8.3f} ms")
    print(f"session turn with a no-op host tool {with_noop / calls * 1000:8.3f} ms")
    print(f"recorded MCP call (turn difference) {recording * 1000:8.3f} ms")
    print(f"ratio recorded/bare                 {recording / bare_call:8.2f}x  (goal <= 1.3x)")
    print(f"ratio whole turn/bare               {with_mcp / calls / bare_call:8.2f}x")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=300)
    trio.run(main, parser.parse_args().calls)
