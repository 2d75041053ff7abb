"""Fleet figures (issue 15): throughput of 2 worker processes over 200 short scripted
sessions, against 1 worker in the same run; and the time from a worker's SIGKILL to
its session's resumption by another worker, against the lease + 1 s bound. On SQLite
and on a throwaway PostgreSQL cluster (tests/pgcluster.py) when its binaries exist.

    .venv/bin/python bench/fleet.py [--sessions 200] [--lease-ms 1000]
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

from eventlog import open_store  # noqa: E402
from orchestrator import Agent, HostTool  # noqa: E402
from orchestrator._events import CODEC, LeaseAcquired  # noqa: E402
from orchestrator._fleet import Worker, lease_stream, queue_session  # noqa: E402
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
    async with open_store(url) as store:
        for i in range(count):
            await queue_session(store, agent(), f"task {i}")


def fork_worker(url: str, name: str, **kw: Any) -> int:
    pid = os.fork()
    if pid == 0:  # the child

        async def main() -> None:
            async with open_store(url) as store:
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
        async with open_store(url) as store:
            return any(i.stream.startswith("lease/") for i in await store.streams())

    while not trio.run(held):
        time.sleep(0.02)
    time.sleep(0.1)  # inside the tool
    os.kill(pid, signal.SIGKILL)
    killed = time.time_ns()
    os.waitpid(pid, 0)

    async def rescue() -> int:
        async with open_store(url) as store:
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
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        files = iter(range(10**6))
        stores: list[tuple[str, Any]] = [
            ("SQLite", lambda: str(Path(tmp) / f"fleet{next(files)}.db"))
        ]
        pg = pg_urls()
        if pg is not None:
            stores.append(("PostgreSQL", pg[1]))
        try:
            for label, url_of in stores:
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
