"""``skillog mcp serve`` per-call cost (issue 17, server half): a real SDK client over
stdio makes the same ``skills.read`` calls against ``skillog mcp serve`` (each call a
recorded turn: prompt, call, intent and outcome, one durable SQLite commit) and
against a bare SDK server in a subprocess that reads the same file from disk and
records nothing, calls interleaved in the same run. Prints per-call medians and the
ratio.

    .venv/bin/python bench/mcp_serve.py [--calls 200]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != HERE]  # bench/eventlog.py

import mcp.types as types  # noqa: E402
import trio  # noqa: E402
from mcp import ClientSession, StdioServerParameters, stdio_client  # noqa: E402

FILE = "references/guide.md"
TEXT = "# Guide\n" + "One line of guidance.\n" * 40


def bare_server(root: Path) -> None:
    """The baseline: an SDK server with one tool that reads the file, nothing else."""
    from mcp.server.lowlevel import Server
    from mcp.server.stdio import stdio_server

    async def list_tools(ctx: object, params: object) -> types.ListToolsResult:
        schema = {"type": "object", "properties": {"path": {"type": "string"}}}
        return types.ListToolsResult(
            tools=[types.Tool(name="skills.read", description="read", input_schema=schema)]
        )

    async def call_tool(ctx: object, params: types.CallToolRequestParams) -> types.CallToolResult:
        path = root / str((params.arguments or {})["path"])
        text = await trio.to_thread.run_sync(path.read_text)
        return types.CallToolResult(content=[types.TextContent(type="text", text=text)])

    server = Server("bare", on_list_tools=list_tools, on_call_tool=call_tool)

    async def serve() -> None:
        async with stdio_server() as (read, write):
            await server.run(read, write, server.create_initialization_options())

    trio.run(serve)


async def timed(client: ClientSession, times: list[float]) -> None:
    start = time.perf_counter()
    result = await client.call_tool("skills.read", {"path": FILE})
    times.append((time.perf_counter() - start) * 1000)
    block = result.content[0]
    assert isinstance(block, types.TextContent) and block.text == TEXT, result


async def per_call_ms(
    served: StdioServerParameters, bare: StdioServerParameters, calls: int
) -> tuple[list[float], list[float]]:
    """Per-call times of both servers, their calls interleaved so that both see the
    same machine (the runs share it with other work)."""
    recorded: list[float] = []
    baseline: list[float] = []
    async with (
        stdio_client(served) as (read, write),
        ClientSession(read, write) as skillog,
        stdio_client(bare) as (bare_read, bare_write),
        ClientSession(bare_read, bare_write) as plain,
    ):
        await skillog.initialize()
        await plain.initialize()
        await skillog.call_tool("skills.load", {"names": ["guide"]})
        for _ in range(5):  # warm up
            await timed(skillog, [])
            await timed(plain, [])
        for _ in range(calls):
            await timed(skillog, recorded)
            await timed(plain, baseline)
    return recorded, baseline


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--calls", type=int, default=200)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        skill = Path(tmp) / "skills" / "guide"
        (skill / "references").mkdir(parents=True)
        (skill / "SKILL.md").write_text("---\nname: guide\ndescription: A guide.\n---\nRead.\n")
        (skill / FILE).write_text(TEXT)
        env = {"SKILLOG_CONFIG": str(Path(tmp) / "config.yaml"), "HOME": tmp}
        served = StdioServerParameters(
            command=sys.executable,
            args=["-m", "orchestrator.cli", "mcp", "serve", "--skills", str(skill.parent)],
            env={**env, "SKILLOG_DB": str(Path(tmp) / "bench.db"), "PATH": "/usr/bin:/bin"},
            cwd=tmp,
        )
        bare = StdioServerParameters(
            command=sys.executable, args=[__file__, "--bare", str(skill)], env=env, cwd=tmp
        )
        skillog, baseline = trio.run(per_call_ms, served, bare, args.calls)
    s, b = statistics.median(skillog), statistics.median(baseline)
    q = statistics.quantiles
    print(f"{args.calls} skills.read calls over stdio to each server, interleaved, same run")
    print(f"  skillog mcp serve  p50 {s:6.2f} ms  p90 {q(skillog, n=10)[-1]:6.2f} ms  (recorded)")
    print(f"  bare SDK server    p50 {b:6.2f} ms  p90 {q(baseline, n=10)[-1]:6.2f} ms")
    print(f"  ratio (p50)        {s / b:.2f}x")


if __name__ == "__main__":
    if sys.argv[1:2] == ["--bare"]:
        bare_server(Path(sys.argv[2]))
    else:
        main()
