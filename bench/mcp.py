"""Per-call overhead of a recorded MCP tool call over stdio vs the bare SDK client.

    python bench/mcp.py [--calls N]

One real MCP server (tests/orchestrator/mcp/mcp_server.py, ``tracker``) as a subprocess
over stdio, called N times with ``find_issue``:

  - bare: the SDK's ``ClientSession.call_tool`` in a loop, nothing recorded;
  - recorded: a skillog session on a durable SQLite log (synchronous=FULL) whose
    zero-latency scripted model asks for one ``mcp__tracker__find_issue`` per turn; per
    call, the time of the turn's tool phase: planning, the call, and the durable commit
    of ``mcp.result`` (with its blob) and ``tool.completed``. (The intent,
    ``tool.called``, is committed in the same transaction as the model's response, so
    it costs the call nothing of its own.) The same for a no-op host tool, and whole
    turns, are printed beside it.

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


async def session_time(calls: int, tool: str, directory: str) -> tuple[float, float]:
    """Seconds for a session of ``calls`` turns, each calling ``tool`` once, and the
    seconds of those spent in its tool phases (each call and its durable outcome)."""

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
        tool_phase = 0.0
        run_tools = session.run_tools

        async def timed() -> list[str]:
            nonlocal tool_phase
            began = time.perf_counter()
            try:
                return await run_tools()
            finally:
                tool_phase += time.perf_counter() - began

        session.run_tools = timed  # type: ignore[method-assign]
        start = time.perf_counter()
        await drive(session, agent.model, agent.retry)
        return time.perf_counter() - start, tool_phase


async def main(calls: int) -> None:
    with tempfile.TemporaryDirectory() as directory:
        bare_call = await bare(calls)
        with_mcp, mcp_phase = await session_time(calls, "mcp__tracker__find_issue", directory)
        with_noop, noop_phase = await session_time(calls, "noop", directory)
    recorded = mcp_phase / calls
    print(f"bare SDK call                                 {bare_call * 1000:8.3f} ms")
    print(f"recorded MCP call: call + durable outcome     {recorded * 1000:8.3f} ms")
    print(f"  the same for a no-op host tool              {noop_phase / calls * 1000:8.3f} ms")
    print(f"whole turn with the MCP call                  {with_mcp / calls * 1000:8.3f} ms")
    print(f"whole turn with the no-op host tool           {with_noop / calls * 1000:8.3f} ms")
    ratio = recorded / bare_call
    print(f"ratio recorded/bare                           {ratio:8.2f}x  (goal <= 1.3x)")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=300)
    trio.run(main, parser.parse_args().calls)
