"""Workers: sessions claimed with leases in the log, driven, handed over when a
worker dies, fenced when a worker stalls; on SQLite and PostgreSQL."""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import trio

from eventlog import EventStore, open_sqlite_store, open_store
from orchestrator import Agent, HostTool, SessionStarted, ToolContext
from orchestrator._events import CODEC, LeaseAcquired, SessionEnded, ToolCompleted
from orchestrator._fleet import (
    Worker,
    lease_history,
    lease_stream,
    queue_session,
    runnable_sessions,
    try_acquire,
)
from orchestrator._verdict import verdict
from orchestrator.adapters import ScriptedModel

TURNS = [
    {"tool_calls": [{"id": "c1", "name": "work", "arguments": {"n": 1}}]},
    {"text": "done"},
]


def agent(ledger: Path | None = None, delay: float = 0.0) -> Agent:
    def work(n: int, context: ToolContext) -> str:
        """Do a unit of work (an effect outside the session)."""
        if ledger is not None:
            with ledger.open("a") as f:
                f.write(f"{context.session_id} {context.call_id}\n")
                f.flush()
                os.fsync(f.fileno())
        time.sleep(delay)
        return f"worked {n}"

    return Agent(
        model=ScriptedModel(TURNS, follow_history=True),
        model_name="m",
        host_tools=[HostTool.from_function(work)],
    )


def factory(ledger: Path | None = None, delay: float = 0.0) -> Callable[[SessionStarted], Agent]:
    """What a worker process is configured with: the same tools for every session."""
    return lambda started: agent(ledger, delay)


async def submit(store: EventStore, count: int) -> list[str]:
    """Queue sessions as `skillog submit` does: started, with their task, not driven."""
    return [
        await queue_session(store, agent(), f"task {i}", session_id=f"task-{i}")
        for i in range(count)
    ]


async def run_fleet(store: EventStore, workers: int, **kw: Any) -> list[Worker]:
    fleet = [Worker(store, factory(), name=f"w{i}", poll_ms=20, **kw) for i in range(workers)]
    stop = trio.Event()
    async with trio.open_nursery() as nursery:
        for worker in fleet:
            nursery.start_soon(lambda w=worker: w.run(stop, once=True))
    return fleet


async def check_fleet(store: EventStore) -> None:
    ids = await submit(store, 6)
    assert await runnable_sessions(store, time.time_ns()) == ids
    fleet = await run_fleet(store, 2, concurrency=2)
    for session_id in ids:
        events = [CODEC.decode(e) async for e in store.read(session_id)]
        assert isinstance(events[-1], SessionEnded) and events[-1].reason == "completed"
        assert len(await lease_history(store, session_id)) >= 1
    ran = sorted(s for w in fleet for s, o in w.finished if o == "ended")
    assert ran == sorted(ids)  # each session driven by exactly one worker
    # A worker that claimed a session another had just finished did nothing with it.
    assert {o for w in fleet for _, o in w.finished} <= {"ended", "already ended"}
    assert await runnable_sessions(store, time.time_ns()) == []
    assert (await verdict(store)).ok


async def test_two_workers_share_the_queue_on_sqlite(tmp_path: Path) -> None:
    async with open_sqlite_store(tmp_path / "log.db") as store:
        await check_fleet(store)


async def test_two_workers_share_the_queue_on_postgres(pg_dsn: str) -> None:
    async with open_store(pg_dsn) as store:
        await check_fleet(store)


async def test_a_live_lease_is_not_taken_and_an_expired_one_is(tmp_path: Path) -> None:
    async with open_sqlite_store(tmp_path / "log.db") as store:
        (sid,) = await submit(store, 1)
        now = time.time_ns()
        first = await try_acquire(store, sid, "a", 1_000_000_000, now)
        assert first is not None and first.seq == 1  # after the queued event at 0
        assert await try_acquire(store, sid, "b", 1_000_000_000, now + 10) is None
        assert await runnable_sessions(store, now + 10) == []
        later = now + 2_000_000_000
        assert await runnable_sessions(store, later) == [sid]
        second = await try_acquire(store, sid, "b", 1_000_000_000, later)
        assert second is not None and second.seq == 2
        assert await lease_history(store, sid) == ["a", "b"]


async def test_only_queued_sessions_are_claimed(tmp_path: Path) -> None:
    """A session an embedding program starts (and drives) itself is never a worker's."""
    async with open_sqlite_store(tmp_path / "log.db") as store:
        await agent().start(store, session_id="embedded", task="mine")
        (queued,) = await submit(store, 1)
        now = time.time_ns()
        assert await runnable_sessions(store, now) == [queued]
        worker = Worker(store, factory(), name="w", lease_ms=1000)
        await worker.run(trio.Event(), once=True)
        assert await lease_history(store, "embedded") == []
        tail = [e.type async for e in store.read("embedded")][-1]
        assert tail == "message.user"  # untouched: still the embedding program's


def _holds(ledger: Path, sid: str) -> bool:
    return ledger.exists() and f"{sid} " in ledger.read_text()


def _worker_process(db: Path, ledger: Path, lease_ms: int) -> int:
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child, killed by the test

        async def main() -> None:
            async with open_store(db) as store:
                worker = Worker(store, factory(ledger, delay=30), name="doomed", lease_ms=lease_ms)
                await worker.run(trio.Event(), once=True)

        trio.run(main)
        os._exit(0)
    return pid


def test_a_killed_workers_session_resumes_elsewhere_once(tmp_path: Path) -> None:
    """SIGKILL a worker inside a tool's side effect: after the lease expires another
    worker resumes the session, the at-most-once effect is not repeated, and nothing
    recorded is lost. (A sync test: the worker is a forked process, which must not
    inherit a running trio loop.)"""
    db, ledger = tmp_path / "log.db", tmp_path / "ledger"

    async def queue() -> str:
        async with open_sqlite_store(db) as store:
            (sid,) = await submit(store, 1)
        return sid

    sid = trio.run(queue)
    pid = _worker_process(db, ledger, lease_ms=1000)
    deadline = time.monotonic() + 30
    # the effect happened: its line is written (the file exists a moment before that)
    while not _holds(ledger, sid) and time.monotonic() < deadline:
        time.sleep(0.02)
    os.kill(pid, signal.SIGKILL)
    killed_at = time.time_ns()
    os.waitpid(pid, 0)

    async def rescue() -> None:
        async with open_sqlite_store(db) as store:
            before = [e.hash async for e in store.read(sid)]
            worker = Worker(store, factory(ledger), name="rescuer", poll_ms=50, lease_ms=1000)
            with trio.fail_after(20):
                stop = trio.Event()
                async with trio.open_nursery() as nursery:
                    nursery.start_soon(worker.run, stop)
                    while not worker.finished:  # noqa: ASYNC110
                        await trio.sleep(0.05)
                    stop.set()
            assert worker.finished == [(sid, "ended")]
            after = [e async for e in store.read(sid)]
            assert [e.hash for e in after[: len(before)]] == before  # nothing recorded lost
            bodies = [CODEC.decode(e) for e in after]
            assert [type(b).__name__ for b in bodies].count("ToolInterrupted") == 1
            assert not [b for b in bodies if isinstance(b, ToolCompleted)]
            leases = [CODEC.decode(e) async for e in store.read(lease_stream(sid))]
            took_over = next(
                b for b in leases if isinstance(b, LeaseAcquired) and b.worker == "rescuer"
            )
            # Taken over after the kill (how soon, against lease + 1 s, is bench/fleet.py's
            # figure: a time bound would be flaky on a shared machine).
            assert took_over.until - 1_000_000_000 >= killed_at - 1_000_000_000
            assert (await verdict(store)).ok

    trio.run(rescue)
    assert ledger.read_text().count(sid) == 1  # the effect ran once


async def test_a_worker_whose_lease_is_taken_stops_and_says_so(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A worker that stalled past its lease (simulated: another appends a claim over
    it) finds out at its next renewal, stops acting on the session and logs it."""
    async with open_sqlite_store(tmp_path / "log.db") as store:
        (sid,) = await submit(store, 1)

        def slow(started: SessionStarted) -> Agent:
            async def work(n: int) -> str:
                """Work for a long time."""
                await trio.sleep(30)
                return "never"

            return Agent(
                model=ScriptedModel(TURNS, follow_history=True),
                model_name="m",
                host_tools=[HostTool.from_function(work)],
            )

        worker = Worker(store, slow, name="stalled", lease_ms=300, poll_ms=20)
        with trio.fail_after(20):
            async with trio.open_nursery() as nursery:
                nursery.start_soon(worker.run, trio.Event())
                while not await lease_history(store, sid):  # noqa: ASYNC110
                    await trio.sleep(0.02)
                head = await store.head(lease_stream(sid))
                assert head is not None
                thief = LeaseAcquired(session=sid, worker="thief", until=time.time_ns() + 10**12)
                await store.append(
                    lease_stream(sid),
                    [CODEC.encode(thief, recorded_at=time.time_ns())],
                    expected_seq=head.seq + 1,
                )
                while not worker.finished:  # noqa: ASYNC110
                    await trio.sleep(0.02)
                nursery.cancel_scope.cancel()
        assert worker.finished == [(sid, "lost")]
        assert "taken over; stopped acting on it" in caplog.text
        bodies = [CODEC.decode(e) async for e in store.read(sid)]
        assert not [b for b in bodies if isinstance(b, ToolCompleted)]  # it stopped mid-call
        assert (await verdict(store)).ok
