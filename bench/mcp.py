"""Per-call overhead of a recorded MCP tool call over stdio vs the bare SDK client.

    python bench/mcp.py [--calls N] [--rounds R]

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

  - paced: the bare call again with 1 ms of client work before each call, so the
    server waits between calls as it does in a session (where a model turn and its
    commit come between two calls) instead of being called back to back;

  - after a commit: the bare call again, each call right after a durable commit of
    an outcome to a store of its own (untimed), as a session commits between two
    calls: what the commit beside the call costs the call on this machine (caches,
    the writer thread and the fsync on a core the call wants), with no recording;

  - commit floor: the same outcome (``mcp.result`` with a fresh blob, and
    ``tool.completed``) appended N times to the same kind of store, nothing else: what
    one durable commit costs on this disk now. Write-ahead requires exactly one per
    call, so no recording can cost less than bare + this.

Prints the load average, the per-call times (medians: the machine is shared), and the
overhead beyond the bare call plus one commit (goal <= 0.3 ms), measured in the same run,
beyond the paced bare call plus one commit, and beyond the bare call after a commit plus
one commit. Then what the load moves least: the trio thread's CPU per bare call, per
bare call after a commit and per recorded call (``time.thread_time`` over the same
regions; the writer thread's work is not in it), and trio's scheduler passes per call.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import trio

# This file is bench/mcp.py: its folder must not shadow the SDK (``mcp``) or the packages.
_HERE = Path(__file__).resolve().parent
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != _HERE]
sys.path.insert(0, str(_HERE.parent))

from eventlog import open_sqlite_store  # noqa: E402 - after the path fix above
from orchestrator._events import CODEC, McpResult, ToolCompleted  # noqa: E402 - path fix
from orchestrator._host_tools import HostTool  # noqa: E402 - after the path fix above
from orchestrator._loop import Agent, drive  # noqa: E402 - after the path fix above
from orchestrator.adapters import ScriptedModel  # noqa: E402 - after the path fix above
from orchestrator.mcp import McpServerConfig, _client  # noqa: E402 - after the path fix

SERVER = Path(__file__).resolve().parents[1] / "tests" / "orchestrator" / "mcp" / "mcp_server.py"


class _Passes(trio.abc.Instrument):
    """Counts trio's scheduler passes (each an I/O wait) while ``on``."""

    def __init__(self) -> None:
        self.on = False
        self.passes = 0

    def before_io_wait(self, timeout: float) -> None:
        if self.on:
            self.passes += 1


PASSES = _Passes()


class _Cost:
    """Load-independent cost of timed regions: the trio thread's CPU (time.thread_time:
    the writer thread's commit is not in it, the trio thread's hand-offs are) and the
    scheduler passes; medians and means over the regions."""

    def __init__(self) -> None:
        self.cpu: list[float] = []
        self.passes = 0

    @contextlib.contextmanager
    def region(self) -> Iterator[None]:
        PASSES.on, before, began = True, PASSES.passes, time.thread_time()
        try:
            yield
        finally:
            self.cpu.append(time.thread_time() - began)
            self.passes += PASSES.passes - before
            PASSES.on = False

    def figures(self) -> tuple[float, float]:
        return statistics.median(self.cpu), self.passes / len(self.cpu)


PACE_S = 0.001
"""The client work between two paced bare calls: about what a session does between
two calls (a zero-latency model turn and its commit)."""


async def bare(
    calls: int, pace: float = 0.0, cost: _Cost | None = None, store: Any = None
) -> float:
    """Median seconds of the SDK's ``call_tool``; ``pace``: seconds of client work
    (a busy loop) before each call, so the server waits between calls as it does in a
    session instead of being called back to back; ``cost``: where each call's CPU and
    scheduler passes go; ``store``: a durable commit of an outcome there (untimed)
    before each call, as a session makes one between two calls."""
    from mcp import ClientSession, StdioServerParameters, stdio_client

    params = StdioServerParameters(command=sys.executable, args=[str(SERVER), "tracker"])
    async with stdio_client(params) as (read, write), ClientSession(read, write) as session:
        await session.initialize()
        await session.list_tools()
        await session.call_tool("find_issue", {"number": 0})  # warm
        times = []
        for n in range(calls):
            busy_until = time.perf_counter() + pace
            while time.perf_counter() < busy_until:
                pass
            if store is not None:
                await commit_outcome(store, "between", n)
            start = time.perf_counter()
            with cost.region() if cost else contextlib.nullcontext():
                await session.call_tool("find_issue", {"number": n})
            times.append(time.perf_counter() - start)
        return statistics.median(times)


ANSWERS: list[float] = []
"""Seconds of each MCP call inside the sessions: the SDK's call_tool and the result
taken apart (``_Server.call``), timed by :func:`_timed_call`."""

_call = _client._Server.call


async def _timed_call(self: Any, *args: Any) -> Any:
    began = time.perf_counter()
    try:
        return await _call(self, *args)
    finally:
        ANSWERS.append(time.perf_counter() - began)


_client._Server.call = _timed_call  # type: ignore[method-assign]


async def session_time(
    calls: int, tool: str, directory: str, cost: _Cost | None = None
) -> tuple[float, float, float]:
    """Seconds per turn of a session of ``calls`` turns, each calling ``tool`` once, the
    median seconds of its tool phases (each call and its durable outcome), and the
    durable commits (store appends) per tool phase; ``cost``: where each tool phase's
    CPU and scheduler passes go."""

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
        phases: list[float] = []
        run_tools = session.run_tools
        append = store.append
        commits = [0, False]  # appends while a tool phase runs; in one now

        async def counted(*args: Any, **kwargs: Any) -> Any:
            commits[0] += commits[1]
            return await append(*args, **kwargs)

        store.append = counted  # type: ignore[method-assign]

        async def timed() -> list[str]:
            began = time.perf_counter()
            commits[1] = True
            try:
                with cost.region() if cost else contextlib.nullcontext():
                    return await run_tools()
            finally:
                commits[1] = False
                phases.append(time.perf_counter() - began)

        session.run_tools = timed  # type: ignore[method-assign]
        start = time.perf_counter()
        await drive(session, agent.model, agent.retry)
        elapsed = time.perf_counter() - start
        return elapsed / calls, statistics.median(phases), commits[0] / len(phases)


async def commit_floor(calls: int, directory: str) -> float:
    """Seconds per durable commit of one call's outcome, appended alone."""
    db = Path(directory) / "floor.db"
    async with open_sqlite_store(db, synchronous="FULL") as store:
        times = []
        for n in range(calls):
            start = time.perf_counter()
            await commit_outcome(store, "floor", n)
            times.append(time.perf_counter() - start)
        return statistics.median(times)


async def commit_outcome(store: Any, stream: str, n: int) -> None:
    """Durably append the ``n``-th call's outcome (``mcp.result`` with a fresh blob, and
    ``tool.completed``) to ``stream``, as a recorded call does."""
    stored = f'{{"content":[{{"text":"tracker.find_issue {n}","type":"text"}}]}}'.encode()
    digest = hashlib.sha256(stored).hexdigest()
    result = McpResult(
        call_id=f"call_{n}",
        server="tracker",
        tool="find_issue",
        is_error=False,
        digest=digest,
        size=len(stored),
    )
    completed = ToolCompleted(
        call_id=f"call_{n}",
        tool="mcp__tracker__find_issue",
        is_error=False,
        content=f"tracker.find_issue {n}",
        duration_ms=1,
    )
    events = [CODEC.encode(b, recorded_at=time.time_ns()) for b in (result, completed)]
    await store.append(stream, events, expected_seq=2 * n, blobs=[stored])


async def one_round(calls: int) -> dict[str, float]:
    """Every figure once: the bare call, both sessions, the floor (in this order)."""
    ANSWERS.clear()
    bare_cost, recorded_cost, committing_cost = _Cost(), _Cost(), _Cost()
    with tempfile.TemporaryDirectory() as directory:
        bare_call = await bare(calls, cost=bare_cost)
        paced_call = await bare(calls, PACE_S)
        async with open_sqlite_store(Path(directory) / "between.db", synchronous="FULL") as db:
            committing_call = await bare(calls, cost=committing_cost, store=db)
        with_mcp, mcp_phase, mcp_commits = await session_time(
            calls, "mcp__tracker__find_issue", directory, recorded_cost
        )
        with_noop, noop_phase, _ = await session_time(calls, "noop", directory)
        floor = await commit_floor(calls, directory)
    answer = statistics.median(ANSWERS)
    bare_cpu, bare_passes = bare_cost.figures()
    recorded_cpu, recorded_passes = recorded_cost.figures()
    committing_cpu, _ = committing_cost.figures()
    return {
        "committing": committing_call,
        "beyond_committing": mcp_phase - committing_call - floor,
        "committing_cpu": committing_cpu,
        "extra_cpu_committing": recorded_cpu - committing_cpu,
        "bare_cpu": bare_cpu,
        "recorded_cpu": recorded_cpu,
        "extra_cpu": recorded_cpu - bare_cpu,
        "bare_passes": bare_passes,
        "recorded_passes": recorded_passes,
        "bare": bare_call,
        "paced": paced_call,
        "beyond_paced": mcp_phase - paced_call - floor,
        "floor": floor,
        "recorded": mcp_phase,
        "noop": noop_phase,
        "turn_mcp": with_mcp,
        "turn_noop": with_noop,
        "answer": answer,
        "commits": mcp_commits,
        "beyond": mcp_phase - bare_call - floor,
        "recording": mcp_phase - answer - floor,
        "call_in_session": answer - bare_call,
    }


async def main(calls: int, rounds: int) -> None:
    trio.lowlevel.add_instrument(PASSES)
    # Rounds alternate the measurements, so a burst of load on a shared machine
    # touches every figure alike; each figure is the median over the rounds.
    runs = [await one_round(calls) for _ in range(rounds)]

    def ms(key: str) -> str:
        return f"{statistics.median(r[key] for r in runs) * 1000:8.3f} ms"

    spread = sorted(r["beyond"] * 1000 for r in runs)
    load = " / ".join(f"{x:.2f}" for x in os.getloadavg())
    print(f"{calls} calls x {rounds} rounds, medians over the rounds; load average {load}")
    print(f"bare SDK call                                 {ms('bare')}")
    print(f"one durable commit of an outcome (the floor)  {ms('floor')}")
    print(f"recorded MCP call: call + durable outcome     {ms('recorded')}")
    print(f"  durable commits per recorded call           {runs[0]['commits']:8.2f}")
    print(f"  the same for a no-op host tool              {ms('noop')}")
    print(f"whole turn with the MCP call (mean)           {ms('turn_mcp')}")
    print(f"whole turn with the no-op host tool (mean)    {ms('turn_noop')}")
    print(f"  of which the call itself (server's answer)  {ms('answer')}")
    print(
        f"beyond bare + one commit                      {ms('beyond')}  (goal <= 0.3 ms; "
        f"rounds {spread[0]:.3f} .. {spread[-1]:.3f})"
    )
    print(f"  the call in the session beyond the bare one {ms('call_in_session')}")
    print(f"  recording beyond that call + one commit     {ms('recording')}")
    print(f"bare SDK call after 1 ms of client work       {ms('paced')}")
    print(f"beyond that paced bare call + one commit      {ms('beyond_paced')}")
    print(f"bare SDK call right after a durable commit    {ms('committing')}")
    print(f"beyond that bare call + one commit            {ms('beyond_committing')}")
    ratio = statistics.median(r["recorded"] / r["bare"] for r in runs)
    print(f"ratio recorded/bare                           {ratio:8.2f}x")
    # What the load moves least: CPU of the trio thread (the writer's commit is not in
    # it) and trio's scheduler passes, per bare call and per recorded call.
    print(f"trio-thread CPU per bare call                 {ms('bare_cpu')}")
    print(f"trio-thread CPU per recorded call             {ms('recorded_cpu')}")
    print(f"  beyond the bare call                        {ms('extra_cpu')}")
    print(f"trio-thread CPU per bare call after a commit  {ms('committing_cpu')}")
    print(f"  recorded call beyond it                     {ms('extra_cpu_committing')}")
    passes = [statistics.median(r[k] for r in runs) for k in ("bare_passes", "recorded_passes")]
    print(f"scheduler passes per call, bare / recorded    {passes[0]:8.2f} / {passes[1]:.2f}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=300)
    parser.add_argument("--rounds", type=int, default=3)
    arguments = parser.parse_args()
    trio.run(main, arguments.calls, arguments.rounds)
