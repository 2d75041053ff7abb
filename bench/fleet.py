"""Fleet figures (issues 15 and 25): throughput of 2 worker processes over 200 short
scripted sessions, against 1 worker in the same run; the time from a worker's SIGKILL
to its session's resumption by another worker, against the lease + 1 s bound; and,
with the session catalog, the latency of one claim and of the default listing
(`skillog sessions`: the 50 most recent) with 1k, 10k, 100k (… 1M) ended sessions
already in the log, with the ratio to the smallest. On SQLite and on a throwaway
PostgreSQL cluster (tests/pgcluster.py) when its binaries exist.

    .venv/bin/python bench/fleet.py [--sessions 200] [--lease-ms 1000]
        [--catalog-sizes 1000,10000,100000] [--only catalog|fleet]
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import signal
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != HERE]  # bench/eventlog.py

import trio  # noqa: E402

from eventlog import NewEvent  # noqa: E402
from eventlog._catalog import Claim, Listing  # noqa: E402
from eventlog._hashchain import build_events  # noqa: E402
from orchestrator import Agent, HostTool  # noqa: E402
from orchestrator._catalog import open_log  # noqa: E402
from orchestrator._events import CODEC, LeaseAcquired  # noqa: E402
from orchestrator._fleet import Worker, lease_stream, queue_session  # noqa: E402
from orchestrator._session_list import session_rows  # noqa: E402
from orchestrator.adapters import ScriptedModel  # noqa: E402

TURNS = [{"tool_calls": [{"id": "c", "name": "step", "arguments": {}}]}, {"text": "done"}]


def agent(delay: float = 0.0) -> Agent:
    async def step() -> str:
        """One step."""
        await trio.sleep(delay)
        return "ok"

    return Agent(
        model=ScriptedModel(TURNS, follow_history=True),
        model_name="m",
        host_tools=[HostTool.from_function(step)],
    )


async def submit(url: str, count: int) -> None:
    async with open_log(url) as store:
        for i in range(count):
            await queue_session(store, agent(), f"task {i}")


def fork_worker(url: str, name: str, **kw: Any) -> int:
    pid = os.fork()
    if pid == 0:  # the child

        async def main() -> None:
            async with open_log(url) as store:
                delay = kw.pop("delay", 0.0)
                worker = Worker(store, lambda s: agent(delay), name=name, poll_ms=20, **kw)
                await worker.run(trio.Event(), once=True)

        trio.run(main)
        os._exit(0)
    return pid


def throughput(url_of: Any, sessions: int, workers: int) -> float:
    url = url_of()
    trio.run(submit, url, sessions)
    start = time.perf_counter()
    pids = [fork_worker(url, f"w{i}", concurrency=8) for i in range(workers)]
    for pid in pids:
        os.waitpid(pid, 0)
    return sessions / (time.perf_counter() - start)


def takeover(url_of: Any, lease_ms: int) -> float:
    """Seconds from SIGKILL of the worker holding a session to another's claim."""
    url = url_of()
    trio.run(submit, url, 1)
    pid = fork_worker(url, "doomed", lease_ms=lease_ms, delay=60.0)

    async def held() -> bool:
        async with open_log(url) as store:
            return any(i.stream.startswith("lease/") for i in await store.streams())

    while not trio.run(held):
        time.sleep(0.02)
    time.sleep(0.1)  # inside the tool
    os.kill(pid, signal.SIGKILL)
    killed = time.time_ns()
    os.waitpid(pid, 0)

    async def rescue() -> int:
        async with open_log(url) as store:
            worker = Worker(store, lambda s: agent(), name="rescuer", poll_ms=20, lease_ms=lease_ms)
            stop = trio.Event()
            async with trio.open_nursery() as nursery:
                nursery.start_soon(worker.run, stop)
                while not worker.finished:  # noqa: ASYNC110
                    await trio.sleep(0.01)
                stop.set()
            session = next(
                i.stream for i in await store.streams() if not i.stream.startswith("lease/")
            )
            async for event in store.read(lease_stream(session)):
                body = CODEC.decode(event)
                if isinstance(body, LeaseAcquired) and body.worker == "rescuer":
                    return event.recorded_at
        raise AssertionError("no takeover recorded")

    return (trio.run(rescue) - killed) / 1e9


async def _template() -> list[tuple[str, list[NewEvent]]]:
    """The streams of one ended fleet session, as new events (recorded again under
    other ids to fill a log fast)."""
    from eventlog import MemoryStore

    store = MemoryStore()
    await queue_session(store, agent(), "template", session_id="t")
    await agent().run(store, "unused", session_id="ignored")  # an ended session's events
    found = []
    for stream, sid in ((lease_stream("t"), "t"), ("ignored", "ignored")):
        events = [NewEvent(type=e.type, body=e.body, recorded_at=e.recorded_at)
                  async for e in store.read(stream)]  # fmt: skip
        found.append((stream.replace(sid, "{}"), events))
    return found


async def fill(url: str, count: int, start: int) -> None:
    """Add ``count`` ended sessions in bulk: rows written in one transaction per
    10,000 sessions, then the catalog rebuilt from the log (as ``log reindex``)."""
    template = await _template()
    async with open_log(url) as store:
        last = getattr(store, "last_position")  # noqa: B009
        for base in range(start, start + count, 10_000):
            position = await last() + 1
            rows = []
            for i in range(base, min(base + 10_000, start + count)):
                for name, events in template:
                    stream = name.format(f"bulk{i:08d}")
                    built = build_events(stream, "0" * 64, 0, position, events)
                    position += len(built)
                    rows += built
            await _insert(store, rows)
        await store.reindex()  # type: ignore[attr-defined]
        if type(store).__name__ != "SqliteStore":  # fresh statistics for the planner
            await store.call_in_writer(lambda conn: conn.execute("ANALYZE eventlog_catalog"))


async def _insert(store: Any, rows: list[Any]) -> None:
    if type(store).__name__ == "SqliteStore":
        from eventlog._sqlite_writer import INSERT_EVENT

        values = [(e.stream, e.seq, e.position, e.type, e.recorded_at, e.body, e.prev_hash,
                   e.hash) for e in rows]  # fmt: skip
        await store.call_in_writer(lambda conn: conn.executemany(INSERT_EVENT, values))
    else:
        from eventlog._postgres_writer import insert_events

        await store.call_in_writer(lambda conn: insert_events(conn, rows))


def _median(samples: list[float]) -> float:
    return sorted(samples)[len(samples) // 2]


async def measure(url: str, repeat: int = 25, warmup: int = 5) -> tuple[float, float]:
    """Median ms of one claim (of a fresh queued session) and of the default listing,
    after ``warmup`` rounds."""
    claims, listings = [], []
    async with open_log(url) as store:
        for i in range(repeat):
            sid = f"fresh{time.time_ns()}{i}"
            await queue_session(store, agent(), "fresh", session_id=sid)
            now = time.time_ns()
            claim = Claim(
                limit=1, now=now, stream_of=lease_stream,
                event_of=lambda key, now=now: CODEC.encode(
                    LeaseAcquired(session=key, worker="bench", until=now + 10**12),
                    recorded_at=now,
                ),
            )  # fmt: skip
            t = time.perf_counter()
            claimed = await store.claim(claim)  # type: ignore[attr-defined]
            claims.append((time.perf_counter() - t) * 1000)
            assert [e.stream for e in claimed] == [lease_stream(sid)]
            t = time.perf_counter()
            rows = await session_rows(store, Listing(limit=51))
            listings.append((time.perf_counter() - t) * 1000)
            assert len(rows) == 51
    return _median(claims[warmup:]), _median(listings[warmup:])


def catalog_figures(label: str, url_of: Any, sizes: list[int]) -> None:
    url = url_of()
    have = 0
    first: tuple[float, float] | None = None
    for size in sizes:
        t = time.perf_counter()
        trio.run(fill, url, size - have, have)
        filled = time.perf_counter() - t
        have = size
        claim_ms, list_ms = trio.run(measure, url)
        first = first or (claim_ms, list_ms)
        print(
            f"{label}: {size:>9,} sessions (filled in {filled:.0f} s): claim {claim_ms:.2f} ms "
            f"({claim_ms / first[0]:.2f}x), sessions listing {list_ms:.2f} ms "
            f"({list_ms / first[1]:.2f}x)",
            flush=True,
        )


def pg_urls() -> tuple[Any, Any] | None:
    path = HERE.parent / "tests" / "pgcluster.py"
    spec = importlib.util.spec_from_file_location("pgcluster", path)
    assert spec is not None and spec.loader is not None
    pgcluster = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(pgcluster)
    bindir = pgcluster.find_bindir()
    if bindir is None:
        return None
    cluster = pgcluster.PgCluster(bindir, durable=True)
    cluster.start()
    names = iter(range(10**6))
    return cluster, lambda: cluster.create_database(f"fleet{next(names)}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--sessions", type=int, default=200)
    ap.add_argument("--lease-ms", type=int, default=1000)
    ap.add_argument("--catalog-sizes", default="1000,10000,100000")
    ap.add_argument("--only", choices=["catalog", "fleet"])
    ap.add_argument("--store", choices=["sqlite", "postgres"], help="only this store")
    args = ap.parse_args()
    sizes = [int(x) for x in args.catalog_sizes.split(",")]
    with tempfile.TemporaryDirectory() as tmp:
        files = iter(range(10**6))
        stores: list[tuple[str, Any]] = [
            ("SQLite", lambda: str(Path(tmp) / f"fleet{next(files)}.db"))
        ]
        pg = pg_urls() if args.store != "sqlite" else None
        if args.store == "postgres":
            stores.clear()
        if pg is not None:
            stores.append(("PostgreSQL", pg[1]))
        try:
            for label, url_of in stores:
                if args.only != "fleet":
                    catalog_figures(label, url_of, sizes)
                if args.only == "catalog":
                    continue
                one = throughput(url_of, args.sessions, 1)
                two = throughput(url_of, args.sessions, 2)
                print(
                    f"{label}: {args.sessions} sessions, 1 worker {one:.0f}/s, 2 workers "
                    f"{two:.0f}/s ({two / one:.2f}x)"
                )
                seconds = takeover(url_of, args.lease_ms)
                bound = args.lease_ms / 1000 + 1
                print(
                    f"{label}: SIGKILL to resumption {seconds:.2f} s (bound: lease "
                    f"{args.lease_ms / 1000:.1f} s + 1 s = {bound:.1f} s) "
                    f"{'ok' if seconds <= bound else 'OVER'}"
                )
        finally:
            if pg is not None:
                pg[0].stop()


if __name__ == "__main__":
    main()
