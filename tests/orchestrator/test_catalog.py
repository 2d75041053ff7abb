"""The session catalog (issue 25): kept in the append's transaction on every store,
equal to the fold, rebuilt by reindex, checked by verify; claims by the database's
locks (exactly one winner); listings with hostile input."""

from __future__ import annotations

import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest
import trio

from eventlog import EventStore, NewEvent, import_jsonl, open_sqlite_store, open_store, verify
from eventlog._catalog import Claim, CursorError, Listing, decode_cursor, fold_store
from eventlog._verify import CatalogFold, settle
from orchestrator import Agent
from orchestrator._catalog import SESSIONS, entry_of, open_log
from orchestrator._events import CODEC, LeaseAcquired
from orchestrator._fleet import Worker, lease_stream, queue_session
from orchestrator._grammar import session_grammar
from orchestrator._session_list import session_rows
from orchestrator._state import SessionState, apply
from orchestrator.adapters import ScriptedModel

GOLDEN = Path(__file__).parents[1] / "golden"
CLI = [sys.executable, "-m", "orchestrator.cli"]


def agent(turns: list[dict[str, object]] | None = None) -> Agent:
    return Agent(model=ScriptedModel(turns or [{"text": "done"}]), model_name="m")


@pytest.fixture
def store(catalog_store: EventStore) -> EventStore:
    """This module's tests run on every store that keeps the catalog."""
    return catalog_store


async def assert_equals_fold(store: EventStore) -> None:
    stored = {r.key: r.folded() for r in await store.read_catalog()}  # type: ignore[attr-defined]
    folded = {k: r.folded() for k, r in (await fold_store(store, SESSIONS)).items()}
    assert stored == folded
    # verify folds stream by stream, in stream-id order (a lease stream after or before
    # its session's), in its one pass over the chains: the same rows as commit order.
    by_stream = CatalogFold(SESSIONS)
    for info in sorted(await store.streams(), key=lambda i: i.stream, reverse=True):
        rows = [(e.seq, e.type, e.recorded_at, e.body, e.prev_hash, e.hash)
                async for e in store.read(info.stream)]  # fmt: skip
        by_stream.feed(info.stream, rows)
    assert {k: r.folded() for k, r in by_stream.folded().items()} == folded
    report = await verify(store, grammar=session_grammar, projection=SESSIONS)
    assert report.ok, report.faults


async def test_the_catalog_follows_the_fleet_and_equals_the_fold(store: EventStore) -> None:
    ids = [await queue_session(store, agent(), f"task {i}", session_id=f"s{i}") for i in range(5)]
    await agent().run(store, "driven by its program", session_id="own")
    listed = await store.list_catalog(Listing(limit=None, free_at=time.time_ns()))  # type: ignore[attr-defined]
    assert [r.key for r in listed] == ids  # the program's own session is never the fleet's
    fleet = [Worker(store, lambda started: agent(), name=f"w{i}", poll_ms=20) for i in range(2)]
    async with trio.open_nursery() as nursery:
        for w in fleet:
            nursery.start_soon(lambda w=w: w.run(trio.Event(), once=True))
    assert sorted(s for w in fleet for s, o in w.finished if o == "ended") == ids
    rows = await session_rows(store)
    assert {r.session for r in rows} == {*ids, "own"}
    assert all(r.state == "ended" and r.end_reason == "completed" for r in rows)
    assert {r.task for r in rows if r.session == "s3"} == {"task 3"}
    await assert_equals_fold(store)
    # The status is the fold's own (SessionState), session by session.
    for row in await store.read_catalog():  # type: ignore[attr-defined]
        state = SessionState(row.key)
        async for e in store.read(row.key):
            apply(state, CODEC.decode(e), seq=e.seq, hash=e.hash)
        assert entry_of(row).status == state.status


async def test_racing_claims_give_each_row_to_exactly_one(store: EventStore) -> None:
    await queue_session(store, agent(), "the one", session_id="one")
    now = time.time_ns()
    won: list[tuple[str, str]] = []

    async def claimant(name: str) -> None:
        claim = Claim(
            limit=5,
            now=now,
            stream_of=lease_stream,
            event_of=lambda key: CODEC.encode(
                LeaseAcquired(session=key, worker=name, until=now + 10**10), recorded_at=now
            ),
        )
        for event in await store.claim(claim):  # type: ignore[attr-defined]
            won.append((event.stream, name))

    async with trio.open_nursery() as nursery:
        for i in range(8):
            nursery.start_soon(claimant, f"w{i}")
    assert len(won) == 1 and won[0][0] == "lease/one"
    row = await store.catalog_row("one")  # type: ignore[attr-defined]
    assert row.holder == won[0][1]
    # A heartbeat is a row update, for the holder only, and no event.
    before = [e async for e in store.read("lease/one")]
    assert await store.renew("one", won[0][1], now + 10**11)  # type: ignore[attr-defined]
    assert not await store.renew("one", "someone else", now + 10**11)  # type: ignore[attr-defined]
    assert [e async for e in store.read("lease/one")] == before
    assert (await store.catalog_row("one")).lease_until == now + 10**11  # type: ignore[attr-defined]
    await assert_equals_fold(store)


def test_two_worker_processes_race_for_one_row_on_sqlite(tmp_path: Path) -> None:
    """Real processes claiming at once: each row goes to exactly one."""
    db = tmp_path / "race.db"

    async def queue() -> None:
        async with open_log(db) as store:
            for i in range(20):
                await queue_session(store, agent(), f"t{i}", session_id=f"r{i}")

    trio.run(queue)
    code = (
        "import sys, time, trio\n"
        "from orchestrator._catalog import open_log\n"
        "from orchestrator._events import CODEC, LeaseAcquired\n"
        "from orchestrator._fleet import lease_stream\n"
        "from eventlog._catalog import Claim\n"
        "async def main(name):\n"
        "    async with open_log(sys.argv[1]) as store:\n"
        "        got = []\n"
        "        for _ in range(20):\n"
        "            now = time.time_ns()\n"
        "            ev = lambda k: CODEC.encode(LeaseAcquired(session=k, worker=name, "
        "until=now + 10**12), recorded_at=now)\n"
        "            got += [e.stream for e in await store.claim(Claim(limit=1, now=now, "
        "stream_of=lease_stream, event_of=ev))]\n"
        "        print(' '.join(got))\n"
        "trio.run(main, sys.argv[2])\n"
    )
    procs = [
        subprocess.Popen([sys.executable, "-c", code, str(db), f"p{i}"], stdout=subprocess.PIPE,
                         text=True)
        for i in range(3)
    ]  # fmt: skip
    won = [s for p in procs for s in p.communicate(timeout=120)[0].split()]
    assert sorted(won) == sorted(f"lease/r{i}" for i in range(20))  # each once, all taken


def test_an_index_edited_by_hand_is_a_finding_until_reindexed(tmp_path: Path) -> None:
    db = tmp_path / "log.db"

    async def run() -> None:
        async with open_log(db) as store:
            await agent().run(store, "finish me", session_id="done")

    trio.run(run)
    with sqlite3.connect(db) as conn:
        conn.execute("UPDATE eventlog_catalog SET status = 'running', claimable = 1")

    def log(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([*CLI, "log", *args, "--db", str(db)], capture_output=True, text=True)

    out = log("verify")
    assert out.returncode == 1 and "catalog row 'done' differs" in out.stdout + out.stderr
    out = log("reindex")
    assert out.returncode == 0 and "rebuilt from the log" in out.stdout
    out = log("verify")
    assert out.returncode == 0, out.stdout + out.stderr


@pytest.mark.parametrize("golden", ["demo", "approvals", "lifecycle"])
async def test_reindex_and_verify_agree_on_every_golden_log(tmp_path: Path, golden: str) -> None:
    """A log from before the catalog: opening it builds the catalog from the log."""
    async with open_sqlite_store(tmp_path / "old.db") as plain:
        await import_jsonl(plain, str(GOLDEN / f"{golden}.jsonl"))
    async with open_log(tmp_path / "old.db") as store:
        await assert_equals_fold(store)
        assert await store.reindex() == len(await store.read_catalog())  # type: ignore[attr-defined]
        await assert_equals_fold(store)


async def test_a_write_without_the_catalog_leaves_it_marked_stale(tmp_path: Path) -> None:
    db = tmp_path / "log.db"
    async with open_log(db) as store:
        await agent().run(store, "one", session_id="a")
    async with open_sqlite_store(db) as plain:  # an eventlog-only program
        await agent().run(plain, "two", session_id="b")
        assert not await plain.catalog_built()
        assert (await verify(plain, projection=SESSIONS)).ok  # nothing claims to be current
    async with open_log(db) as store:  # rebuilt at open
        assert {r.key for r in await store.read_catalog()} == {"a", "b"}  # type: ignore[attr-defined]
        await assert_equals_fold(store)


async def test_search_status_since_and_cursors(store: EventStore) -> None:
    texts = ["plain", "100% sure", "under_score", "it's '; DROP TABLE events; --", "back\\slash"]
    for i, text in enumerate(texts):
        await queue_session(store, agent(), text, session_id=f"q{i}")
    for needle, want in [
        ("%", ["q1"]), ("_", ["q2"]), ("'; DROP", ["q3"]), ("\\", ["q4"]), ("PLAIN", ["q0"]),
    ]:  # fmt: skip
        found = await session_rows(store, Listing(search=needle))
        assert [r.session for r in found] == want, needle
    assert len([e async for e in store.read_all()]) > 0  # the table is still there
    pages: list[str] = []
    after = None
    while True:
        page = await session_rows(store, Listing(limit=2, after=after))
        pages += [r.session for r in page]
        if len(page) < 2:
            break
        after = (page[-1].started_ns, page[-1].session)
    assert pages == [r.session for r in await session_rows(store)]
    assert await session_rows(store, Listing(status=("ended",))) == []
    assert len(await session_rows(store, Listing(since=time.time_ns() - 10**12))) == 5


@pytest.mark.parametrize("cursor", ["", "!!!", "bm90IGpzb24", "WzEsMl0=", "WyJ4IiwieCJd"])
def test_a_tampered_cursor_is_refused(cursor: str) -> None:
    with pytest.raises(CursorError, match="not one this listing handed out"):
        decode_cursor(cursor)


async def test_heartbeats_write_no_events_and_reindex_runs_beside_workers(tmp_path: Path) -> None:
    """A worker holding a session through many heartbeats leaves only the claim and the
    release in its lease stream; reindexing meanwhile leaves the catalog equal to the
    fold."""
    from orchestrator import HostTool

    def slow(started: object) -> Agent:
        async def wait() -> str:
            """Wait a while."""
            await trio.sleep(1.5)
            return "waited"

        return Agent(
            model=ScriptedModel(
                [{"tool_calls": [{"id": "c1", "name": "wait", "arguments": {}}]}, {"text": "ok"}],
                follow_history=True,
            ),
            model_name="m",
            host_tools=[HostTool.from_function(wait)],
        )

    async with open_log(tmp_path / "log.db") as store:
        for i in range(3):
            await queue_session(store, agent(), f"t{i}", session_id=f"h{i}")
        worker = Worker(store, slow, name="w", lease_ms=300, poll_ms=20)
        async with trio.open_nursery() as nursery:
            nursery.start_soon(lambda: worker.run(trio.Event(), once=True))
            for _ in range(5):
                await trio.sleep(0.2)
                await store.reindex()
        assert sorted(o for _, o in worker.finished) == ["ended"] * 3
        for i in range(3):
            types = [e.type async for e in store.read(lease_stream(f"h{i}"))]
            assert types == ["lease.released", "lease.acquired", "lease.released"]
        await assert_equals_fold(store)


async def test_a_postgres_worker_wakes_on_notify_not_on_its_poll(pg_dsn: str) -> None:
    """With a one-minute poll, a session submitted while the worker idles is still
    claimed at once: the submitting transaction NOTIFYs the workers."""
    async with open_store(pg_dsn, projection=SESSIONS) as store:
        worker = Worker(store, lambda started: agent(), name="w", poll_ms=60_000)
        stop = trio.Event()
        async with trio.open_nursery() as nursery:
            nursery.start_soon(worker.run, stop)
            await trio.sleep(0.5)  # idle, waiting
            await queue_session(store, agent(), "wake up", session_id="late")
            with trio.fail_after(20):
                while not worker.finished:  # noqa: ASYNC110
                    await trio.sleep(0.02)
            stop.set()
        assert worker.finished == [("late", "ended")]


async def test_a_log_without_a_catalog_lists_the_rows_reindex_would_build(tmp_path: Path) -> None:
    """Opened read-only, a log from before the catalog is listed by the catalog's own
    fold (one pass, in memory): the same rows, filters and order as the index after
    ``log reindex``; the CLI says which it did."""
    db = tmp_path / "old.db"
    async with open_sqlite_store(db) as plain:  # no projection: no catalog kept
        await import_jsonl(plain, str(GOLDEN / "approvals.jsonl"))
        for i in range(3):
            await agent().run(plain, f"task {i}", session_id=f"s{i}")
    listings = [Listing(limit=None), Listing(limit=2), Listing(status=("ended",)),
                Listing(search="TASK 1")]  # fmt: skip
    async with open_store(db, readonly=True) as store:
        assert not await store.catalog_built()  # type: ignore[attr-defined]
        folded = [await session_rows(store, listing) for listing in listings]
    note = await trio.run_process([*CLI, "sessions", "--db", str(db)], capture_stdout=True,
                                  capture_stderr=True)  # fmt: skip
    assert b"no current session catalog" in note.stderr, note.stderr
    async with open_log(db) as store:  # read-write: the catalog is built at open
        indexed = [await session_rows(store, listing) for listing in listings]
    assert folded == indexed
    assert [len(folded[0]), len(folded[1]), len(folded[3])] == [4, 2, 1]
    out = await trio.run_process([*CLI, "sessions", "--db", str(db)], capture_stdout=True,
                                 capture_stderr=True)  # fmt: skip
    assert b"no current session catalog" not in out.stderr


async def test_a_catalog_built_by_an_older_version_is_not_trusted(tmp_path: Path) -> None:
    """After an upgrade, a catalog an older projection version built (its rows folded
    differently) is not listed from: read-only, `skillog sessions` lists the fold and
    says so, and verify leaves it unchecked; the next read-write open rebuilds it."""
    db = tmp_path / "log.db"
    async with open_log(db) as store:
        for i in range(3):
            await agent().run(store, f"task {i}", session_id=f"s{i}")
    with sqlite3.connect(db) as conn:  # as an older version left it
        conn.execute("UPDATE eventlog_meta SET value = 'sessions-0' WHERE key = 'catalog'")
        conn.execute("UPDATE eventlog_catalog SET text = 'old fold', status = 'running'")

    async def sessions(*args: str) -> subprocess.CompletedProcess[bytes]:
        return await trio.run_process([*CLI, "sessions", "--db", str(db), "--json", *args],
                                      capture_stdout=True, capture_stderr=True)  # fmt: skip

    out = await sessions()
    assert b"no current session catalog" in out.stderr, out.stderr
    assert b"old fold" not in out.stdout and out.stdout.count(b"task ") == 3
    assert (await sessions("--search", "old fold")).stdout == b""
    async with open_store(db, readonly=True, projection=SESSIONS) as store:
        assert not await store.catalog_built()  # type: ignore[attr-defined]
        assert await store.catalog_built("sessions-0")  # type: ignore[attr-defined]
        assert (await verify(store, grammar=session_grammar, projection=SESSIONS)).ok
    async with open_log(db) as store:  # read-write: rebuilt at open
        assert await store.catalog_built()  # type: ignore[attr-defined]
        await assert_equals_fold(store)
    out = await sessions("--status", "ended")
    assert b"no current session catalog" not in out.stderr and out.stdout.count(b"task ") == 3


async def test_a_row_and_its_streams_read_at_one_moment(store: EventStore) -> None:
    """What verify re-reads a differing row with (every store): the row and all the
    events of its streams, which fold to it."""
    await agent().run(store, "one", session_id="a")
    row, events = await store.catalog_snapshot("a", SESSIONS.streams("a"))  # type: ignore[attr-defined]
    want = [e for s in ("a", lease_stream("a")) async for e in store.read(s)]
    assert events == want and row == await store.catalog_row("a")  # type: ignore[attr-defined]
    assert await settle(store, SESSIONS, "a", "differs") is None
    assert await store.catalog_snapshot("none", SESSIONS.streams("none")) == (None, [])  # type: ignore[attr-defined]


async def test_a_writer_remembering_its_rows_sees_another_connections_commits(
    tmp_path: Path,
) -> None:
    """The SQLite writer updates a row it wrote from memory, in the columns that
    changed; a commit by another connection (another process) in between, or a lease
    heartbeat, makes it read the row again: the catalog stays the fold."""
    db = tmp_path / "log.db"
    session = "0123456789abcdef0123456789abcdef"

    def events(n: int, start: int) -> list[NewEvent]:
        return [NewEvent(type="note", body=b"{}", recorded_at=start + i) for i in range(n)]

    async with open_log(db) as one, open_log(db) as other:
        await one.append(session, events(2, 1), expected_seq=0)
        await one.append(session, events(1, 10), expected_seq=2)  # from memory
        await other.append(session, events(3, 20), expected_seq=3)  # behind its back
        await one.append(session, events(1, 30), expected_seq=6)
        (row,) = await one.read_catalog()  # type: ignore[attr-defined]
        assert entry_of(row).events == 7 and row.updated_at == 30
        assert row == (await fold_store(one, SESSIONS))[session]
