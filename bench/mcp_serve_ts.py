"""``skillog mcp serve`` as the TypeScript SDK's client sees it, over stdio.

    python bench/mcp_serve_ts.py [--calls N]

Needs node and the pinned SDK in .ci/npm (``npm ci --prefix .ci/npm``). Starts
``skillog mcp serve`` on a one-skill directory and a fresh durable SQLite log
(synchronous=FULL), and has bench/mcp_serve_ts.mjs time N pings and N ``skills.read``
calls (each recorded: the client's request, its intent, the read and its outcome, one
durable commit on the call's path) from the client's side; prints both medians, the
difference, one durable commit measured on the same disk beside it (bench/mcp.py's
floor), what remains beyond ping + that commit, the same beyond one durable commit of
what a served call records (the session's own per-call batches committed again to a
fresh log, each on its own), and the server's CPU time per recorded
call (bench/mcp_serve_cpu.py: every thread of the server process, from its own
counters, so it hardly moves with the load of the machine; the timed calls only), the
trio thread's share of it, the server's trio scheduler passes and the commits to the
session's stream per recorded call (counts: they do not move with the load at all).
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import trio

ROOT = Path(__file__).resolve().parents[1]


def _commit_floor(calls: int, directory: str) -> float:
    """bench/mcp.py's commit floor (loaded by path: a module named mcp is the SDK)."""
    spec = importlib.util.spec_from_file_location("bench_mcp", ROOT / "bench" / "mcp.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    floor: float = trio.run(module.commit_floor, calls, directory)
    return floor


async def _served_floor(db: Path, directory: str) -> float:
    """Seconds per durable commit of what one served call records (the next turn's
    prompt with its blobs, the request, the intent, the read, the outcome), the same
    events re-committed one call per append to a fresh log kept as skillog keeps it
    (synchronous=FULL, the session catalog): the commit on the call's path, without
    the session around it."""
    from eventlog import NewEvent
    from orchestrator._catalog import open_log
    from orchestrator._events import CODEC, PromptRendered
    from orchestrator._streams import is_session_stream

    async with open_log(db, readonly=True) as served:
        (stream,) = [i.stream for i in await served.streams() if is_session_stream(i.stream)]
        events = [e async for e in served.read(stream)]
        groups: list[tuple[list[NewEvent], list[bytes]]] = [([], [])]
        for event in events:
            if event.type.startswith("prompt.rendered"):
                prompt = CODEC.decode(event)
                assert isinstance(prompt, PromptRendered)
                digests = [*prompt.new_message_digests, prompt.tail_digest]
                groups.append(([], [await served.get_blob(d) for d in digests]))
            groups[-1][0].append(NewEvent(type=event.type, body=event.body, recorded_at=1))
    calls = [g for g in groups[1:] if g[0][-1].type.startswith("tool.completed")]
    times = []
    async with open_log(Path(directory) / "served-floor.db") as store:
        seq = 0
        for records, blobs in [groups[0], *calls]:
            start = time.perf_counter()
            await store.append(stream, records, expected_seq=seq, blobs=blobs)
            times.append(time.perf_counter() - start)
            seq += len(records)
    return statistics.median(times[3:])


def main(calls: int) -> None:
    modules = ROOT / ".ci" / "npm" / "node_modules"
    node = shutil.which("node")
    if node is None or not (modules / "@modelcontextprotocol" / "sdk").is_dir():
        sys.exit("needs node and the SDK of .ci/npm: npm ci --prefix .ci/npm")
    with tempfile.TemporaryDirectory() as directory:
        root = Path(directory)
        skill = root / "skills" / "notes"
        (skill / "references").mkdir(parents=True)
        (skill / "SKILL.md").write_text("---\nname: notes\ndescription: Notes.\n---\nBrief.\n")
        (skill / "references" / "style.md").write_text("Short lines.\n")
        cpu = root / "cpu.json"
        # -P: not bench/ first on the path (bench/mcp.py would shadow the SDK).
        skillog = [sys.executable, "-P", str(ROOT / "bench" / "mcp_serve_cpu.py"), str(cpu)]
        command = [*skillog, "--skills", str(root / "skills"), "--tier", "org"]
        env = {
            **os.environ,
            "HOME": directory,
            "SKILLOG_DB": str(root / "mcp.db"),
            "SKILLOG_CONFIG": str(root / "config.yaml"),
            "PYTHONPATH": str(ROOT),
        }
        done = subprocess.run(
            [
                node,
                str(ROOT / "bench" / "mcp_serve_ts.mjs"),
                str(modules),
                str(calls),
                json.dumps(command),
            ],
            capture_output=True,
            text=True,
            env=env,
            cwd=directory,
            check=True,
        )
        seen = json.loads(done.stdout.splitlines()[-1])
        floor = _commit_floor(calls, directory) * 1000
        served_floor = trio.run(_served_floor, root / "mcp.db", directory) * 1000
        server = json.loads(cpu.read_text())
    ping, call = seen["ping_ms"], seen["call_ms"]
    print(f"ping (p50)                                    {ping:8.3f} ms")
    print(f"recorded skills.read (p50)                    {call:8.3f} ms")
    print(f"one durable commit of an outcome (p50)        {floor:8.3f} ms")
    print(f"beyond ping + one commit                      {call - ping - floor:8.3f} ms")
    print(f"one durable commit of a served call's records {served_floor:8.3f} ms")
    print(f"beyond ping + that commit                     {call - ping - served_floor:8.3f} ms")
    calls_seen = max(1, server["calls"])
    per_call = server["cpu_s"] * 1000 / calls_seen
    print(f"server CPU per recorded call (all threads)    {per_call:8.3f} ms")
    trio_ms, passes = server["trio_s"] * 1000 / calls_seen, server["passes"] / calls_seen
    print(f"  of it the trio thread's                     {trio_ms:8.3f} ms")
    print(f"server scheduler passes per recorded call     {passes:8.2f}")
    commits = server["commits"] / calls_seen
    print(f"session commits per recorded call             {commits:8.2f}")
    print(f"load average                                  {os.getloadavg()[0]:8.2f}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=300)
    main(parser.parse_args().calls)
