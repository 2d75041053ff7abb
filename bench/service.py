"""Service figures (issue 16), bounded and on loopback only: submissions through the
API at a fixed rate for a fixed time, each session followed live over SSE by its own
client from submission to its end, while an in-process follower on ``store.follow``
(no HTTP) gives the baseline in the same run. Checks that every follower received its
session's log exactly (each seq once, in order, hashes equal); prints p50/p99 latency
from an event's recording to its delivery, SSE vs in-process, and the ratio.

    .venv/bin/python bench/service.py [--rate 5] [--seconds 10] [--followers-per-session 1]
                                      [--linger] [--postgres]
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import resource
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != HERE]  # bench/eventlog.py

import httpx2 as httpx  # noqa: E402
import trio  # noqa: E402

from eventlog import open_store  # noqa: E402
from orchestrator._cli import _parser  # noqa: E402
from orchestrator._cli_serve import build  # noqa: E402
from orchestrator.service import new_token, serve  # noqa: E402
from orchestrator.skills._config import add_service_token  # noqa: E402

ACTIVE = [0, 0]  # followers connected now, most at once
ENDED = [0]  # session.ended events received
LINGER = [False]  # followers stay connected after their session ends, until the run ends
DEMO = Path(__file__).resolve().parent.parent / "orchestrator" / "demo"


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] if ordered else float("nan")


async def follow(
    client: httpx.AsyncClient, session: str, got: dict[str, list[tuple[int, str]]],
    latencies: list[float],
) -> None:  # fmt: skip
    """Follow one session to its end over SSE, recording (seq, hash) and latencies."""
    received = got.setdefault(session, [])
    ACTIVE[0] += 1
    ACTIVE[1] = max(ACTIVE[1], ACTIVE[0])
    try:
        await _follow(client, session, received, latencies)
    finally:
        ACTIVE[0] -= 1


async def _follow(
    client: httpx.AsyncClient, session: str, received: list[tuple[int, str]],
    latencies: list[float],
) -> None:  # fmt: skip
    async with client.stream("GET", f"/api/sessions/{session}/stream") as response:
        async for line in response.aiter_lines():
            if not line.startswith("data: "):
                continue
            event = json.loads(line[6:])
            latencies.append((time.time_ns() - event["recorded_at"]) / 1e6)
            received.append((event["seq"], event["hash"]))
            if event["type"] == "session.ended":
                ENDED[0] += 1
                if not LINGER[0]:
                    return


async def main(args: argparse.Namespace) -> None:
    tmp = Path(tempfile.mkdtemp(prefix="skillog-bench-service-"))
    config = tmp / "config.yaml"
    os.environ["SKILLOG_CONFIG"] = str(config)
    os.environ["HOME"] = str(tmp)
    token, entry = new_token("bench", ("admin",))
    add_service_token(str(config), entry)
    db = args.db or str(tmp / "service.db")
    cli = _parser("serve").parse_args(
        ["serve", "--db", db, "--model", f"scripted:{DEMO / 'turns.yaml'}",
         "--skills", str(DEMO / "skills"), "--tier", "org", "--poll-ms", "50",
         "--concurrency", str(args.concurrency)]
    )  # fmt: skip
    stop = trio.Event()
    got: dict[str, list[tuple[int, str]]] = {}
    sse_latency: list[float] = []
    direct_latency: list[float] = []
    submit_ms: list[float] = []
    rss_start = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    async with open_store(db) as store, trio.open_nursery() as nursery:
        ctx, workers = build(store, cli)
        [url] = await nursery.start(
            lambda task_status: serve(ctx, "127.0.0.1:0", stop=stop, workers=workers,
                                      task_status=task_status)
        )  # fmt: skip

        async def baseline(task_status: trio.TaskStatus[None]) -> None:
            task_status.started()
            async for event in store.follow():
                if not event.stream.startswith("lease/"):
                    direct_latency.append((time.time_ns() - event.recorded_at) / 1e6)

        await nursery.start(baseline)
        limits = httpx.Limits(max_connections=None, max_keepalive_connections=None)
        headers = {"authorization": f"Bearer {token}"}
        started = trio.current_time()
        with trio.fail_after(args.seconds + 120):
            async with (
                httpx.AsyncClient(base_url=url, headers=headers, trust_env=False, timeout=120,
                                  limits=limits) as client,
                trio.open_nursery() as followers,
            ):  # fmt: skip
                for i in range(int(args.rate * args.seconds)):
                    await trio.sleep_until(started + i / args.rate)
                    t0 = time.perf_counter()
                    response = await client.post("/api/sessions", json={"task": f"task {i}"})
                    submit_ms.append((time.perf_counter() - t0) * 1000)
                    session = response.json()["session_id"]
                    for _ in range(args.followers_per_session):
                        followers.start_soon(follow, client, session, got, sse_latency)
                total = int(args.rate * args.seconds) * args.followers_per_session
                while ENDED[0] < total:  # noqa: ASYNC110 - a bench polling a counter
                    await trio.sleep(0.05)
                followers.cancel_scope.cancel()
        elapsed = trio.current_time() - started
        missed = duplicated = 0
        for session in got:
            log = [(e.seq, e.hash) async for e in store.read(session)]
            # each follower's list is appended to the same session entry
            per = args.followers_per_session
            counts: dict[tuple[int, str], int] = {}
            for item in got[session]:
                counts[item] = counts.get(item, 0) + 1
            missed += sum(1 for item in log if counts.get(item, 0) < per)
            duplicated += sum(max(0, counts.get(item, 0) - per) for item in log)
            duplicated += sum(n for item, n in counts.items() if item not in log)
        stop.set()
        nursery.cancel_scope.cancel()
    rss_end = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    events = sum(len(v) for v in got.values())
    print(f"service bench: {len(got)} sessions submitted at {args.rate}/s for {args.seconds} s, "
          f"{args.followers_per_session} SSE follower(s) each, all done in {elapsed:.1f} s "
          f"(1 in-process worker, concurrency {args.concurrency}, {args.label})")  # fmt: skip
    print(f"  SSE followers: {len(got) * args.followers_per_session}, at most {ACTIVE[1]} at once")
    print(f"  events delivered over SSE: {events}; missed {missed}, duplicated {duplicated}")
    print(f"  submit (POST /api/sessions): p50 {pct(submit_ms, .5):.1f} ms, "
          f"p99 {pct(submit_ms, .99):.1f} ms")  # fmt: skip
    s50, s99 = pct(sse_latency, 0.5), pct(sse_latency, 0.99)
    d50, d99 = pct(direct_latency, 0.5), pct(direct_latency, 0.99)
    print(f"  recorded -> delivered, SSE:         p50 {s50:.1f} ms, p99 {s99:.1f} ms")
    print(f"  recorded -> delivered, store.follow: p50 {d50:.1f} ms, p99 {d99:.1f} ms")
    print(f"  ratio SSE / in-process: p50 {s50 / d50:.1f}x, p99 {s99 / d99:.1f}x")
    print(f"  max RSS: {rss_start / 1024:.0f} MiB at start, {rss_end / 1024:.0f} MiB at end")
    if missed or duplicated:
        raise SystemExit("FAILED: a follower missed or repeated events")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rate", type=float, default=5.0, help="submissions per second")
    parser.add_argument("--seconds", type=float, default=10.0, help="how long to submit")
    parser.add_argument("--followers-per-session", type=int, default=1)
    parser.add_argument("--concurrency", type=int, default=8, help="sessions the worker runs")
    parser.add_argument(
        "--linger", action="store_true",
        help="followers stay connected after their session ends, until every session ended",
    )  # fmt: skip
    parser.add_argument(
        "--postgres", action="store_true",
        help="on a throwaway PostgreSQL cluster (tests/pgcluster.py) instead of SQLite",
    )  # fmt: skip
    options = parser.parse_args()
    LINGER[0] = options.linger
    options.db, options.label = None, "SQLite"
    if not options.postgres:
        trio.run(main, options)
        raise SystemExit(0)
    spec = importlib.util.spec_from_file_location("bench_fleet", HERE / "fleet.py")
    assert spec is not None and spec.loader is not None
    fleet = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(fleet)
    pg = fleet.pg_urls()
    if pg is None:
        raise SystemExit("no PostgreSQL server binaries (initdb) found")
    try:
        options.db, options.label = pg[1](), "PostgreSQL"
        trio.run(main, options)
    finally:
        pg[0].stop()
