"""Fleet figures (issues 15 and 25), one run, ratios printed, on SQLite and on a
throwaway PostgreSQL cluster (tests/pgcluster.py) when its binaries exist:

- the catalog: the latency of one claim and of the default listing (`skillog
  sessions`: the 50 most recent) with 1k, 10k, 100k (… 1M) ended sessions already in
  the log, one log per size measured in turns (so load drifts hit every size alike),
  with the ratio to the smallest and the claim's query plan;
- idle growth: 1,000 sessions suspended on approvals beside 2 running worker
  processes with a short lease and poll: events appended (goal 0), rows written;
- the CPU time one worker process spends per trivial session (all its threads, and the
  trio thread alone): load moves it least;
- throughput of trivial sessions (one tool call) with 1, 2, 4 and 8 worker processes
  (concurrency 8 each), with and without process start-up; on PostgreSQL beside DBOS's
  queue draining trivial workflows on the same server (bench/fleet_dbos.py; `pip
  install -e '.[bench]'`); the machine's cores are printed first;
- the time from a worker's SIGKILL to its session's resumption by another worker,
  against the lease + 1 s bound.

    .venv/bin/python bench/fleet.py [--sessions 200] [--lease-ms 1000]
        [--catalog-sizes 1000,10000,100000] [--idle-sessions 1000] [--idle-seconds 60]
        [--only catalog|idle|fleet] [--store sqlite|postgres] [--writer-cache-kib 65536]
        [--rounds 6] [--verify-fill]
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import signal
import sqlite3
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != HERE]  # bench/eventlog.py

import trio  # noqa: E402

from eventlog import NewEvent  # noqa: E402
from eventlog._catalog import Claim, Listing, fold_into  # noqa: E402
from eventlog._hashchain import build_events  # noqa: E402
from orchestrator import Agent, HostTool, PolicyConfig  # noqa: E402
from orchestrator._catalog import SESSIONS, open_log  # noqa: E402
from orchestrator._events import CODEC, LeaseAcquired  # noqa: E402
from orchestrator._fleet import Worker, lease_stream, queue_session  # noqa: E402
from orchestrator._session_list import session_rows  # noqa: E402
from orchestrator.adapters import ScriptedModel  # noqa: E402

TURNS = [{"tool_calls": [{"id": "c", "name": "step", "arguments": {}}]}, {"text": "done"}]


def agent(delay: float = 0.0, *, approve: bool = False) -> Agent:
    """A trivial session: one tool call, then done. With ``approve`` the tool needs an
    approval, so a worker suspends the session (awaiting_approval) and lets it go."""

    async def step() -> str:
        """One step."""
        await trio.sleep(delay)
        return "ok"

    return Agent(
        model=ScriptedModel(TURNS, follow_history=True),
        model_name="m",
        host_tools=[HostTool.from_function(step)],
        policy=PolicyConfig(approve_host_tools=("step",) if approve else ()),
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
                once = kw.pop("once", True)
                poll_ms = kw.pop("poll_ms", 20)
                worker = Worker(store, lambda s: agent(delay), name=name, poll_ms=poll_ms, **kw)
                await worker.run(trio.Event(), once=once)

        trio.run(main)
        os._exit(0)
    return pid


def throughput(url_of: Any, sessions: int, workers: int) -> tuple[float, float]:
    """``sessions`` queued, then drained by ``workers`` processes (concurrency 8 each):
    (sessions/s from the workers' fork to the last exit, sessions/s between the first
    and the last session's end as the catalog records them: without process start-up)."""
    url = url_of()
    trio.run(submit, url, sessions)
    start = time.perf_counter()
    pids = [fork_worker(url, f"w{i}", concurrency=8) for i in range(workers)]
    for pid in pids:
        os.waitpid(pid, 0)
    wall = sessions / (time.perf_counter() - start)

    async def ends() -> list[int]:
        async with open_log(url, readonly=True) as store:
            rows = await store.list_catalog(Listing(limit=None, status=("ended",)))  # type: ignore[attr-defined]
            return sorted(r.updated_at for r in rows)

    ended = trio.run(ends)
    assert len(ended) == sessions, f"{len(ended)} of {sessions} sessions ended"
    return wall, (sessions - 1) / max(ended[-1] - ended[0], 1) * 1e9


def cpu_per_session(url_of: Any, sessions: int) -> tuple[float, float]:
    """CPU ms per session of one in-process worker (concurrency 8) draining ``sessions``
    queued trivial sessions: all the process's threads (the writer's, the readers'),
    and the trio thread alone. CPU time, not wall time: what the machine's load moves
    least, and what decides throughput once processes outnumber cores."""
    url = url_of()
    trio.run(submit, url, sessions)

    async def drain() -> None:
        async with open_log(url) as store:
            worker = Worker(store, lambda s: agent(), name="cpu", poll_ms=20, concurrency=8)
            await worker.run(trio.Event(), once=True)
            assert len(worker.finished) == sessions, worker.finished

    process, thread = time.process_time(), time.thread_time()
    trio.run(drain)
    process, thread = time.process_time() - process, time.thread_time() - thread
    return process * 1000 / sessions, thread * 1000 / sessions


def dbos_throughput(dbos: Any, dsn: str, sessions: int, workers: int) -> tuple[float, float]:
    """The same for DBOS's queue: trivial workflows (one step each), enqueued first,
    drained by ``workers`` DBOS processes (worker concurrency 8, polling every 20 ms,
    as skillog's workers here)."""
    pid = dbos.run_forked(dbos.enqueue, dsn, sessions)
    os.waitpid(pid, 0)
    start = time.perf_counter()
    pids = [dbos.run_forked(dbos.work, dsn, f"d{i}", 8, 20) for i in range(workers)]
    try:
        while (first_last := dbos.finished(dsn, sessions)) is None:
            time.sleep(0.01)
        wall = sessions / (time.perf_counter() - start)
    finally:
        for pid in pids:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
    first, last = first_last
    return wall, (sessions - 1) / max(last - first, 1) * 1e3


def load_dbos() -> Any:
    """bench/fleet_dbos.py, or None when ``dbos`` is not installed."""
    if importlib.util.find_spec("dbos") is None:
        return None
    spec = importlib.util.spec_from_file_location("fleet_dbos", HERE / "fleet_dbos.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def fleet_figures(label: str, url_of: Any, sessions: int, dbos: Any) -> None:
    """CPU per session in one worker; throughput with 1, 2, 4 and 8 worker processes
    (and DBOS's beside it)."""
    process, thread = cpu_per_session(url_of, sessions)
    print(
        f"{label}: CPU per trivial session in one worker process: {process:.2f} ms "
        f"(the trio thread {thread:.2f} ms), load average {os.getloadavg()[0]:.1f}",
        flush=True,
    )
    base: tuple[float, float] | None = None
    dbos_base: tuple[float, float] | None = None
    for workers in (1, 2, 4, 8):
        wall, steady = throughput(url_of, sessions, workers)
        base = base or (wall, steady)
        line = (
            f"{label}: {sessions} sessions, {workers} worker process(es): {wall:.0f}/s with "
            f"start-up ({wall / base[0]:.2f}x one), {steady:.0f}/s first to last end "
            f"({steady / base[1]:.2f}x)"
        )
        if dbos is not None:
            d_wall, d_steady = dbos_throughput(dbos, url_of(), sessions, workers)
            dbos_base = dbos_base or (d_wall, d_steady)
            line += (
                f"; DBOS {d_wall:.0f}/s with start-up ({d_wall / dbos_base[0]:.2f}x), "
                f"{d_steady:.0f}/s first to last ({d_steady / dbos_base[1]:.2f}x); "
                f"skillog/DBOS {wall / d_wall:.2f}x, {steady / d_steady:.2f}x"
            )
        print(f"{line}; load average {os.getloadavg()[0]:.1f}", flush=True)


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


async def _template(
    *, waiting: bool = False
) -> tuple[list[tuple[str, list[NewEvent]]], list[bytes]]:
    """The streams of one ended fleet session (with ``waiting``: one a worker suspended
    on an approval), as new events (recorded again under other ids to fill a log fast),
    with ``{}`` for the session id."""
    from eventlog import MemoryStore

    store = MemoryStore(projection=SESSIONS)
    await queue_session(store, agent(approve=waiting), "template", session_id="t")
    if waiting:
        worker = Worker(store, lambda s: agent(approve=True), name="template", poll_ms=1)
        await worker.run(trio.Event(), once=True)
        assert worker.finished == [("t", "suspended")], worker.finished
        streams = [(lease_stream("t"), "t"), ("t", "t")]
    else:
        await agent().run(store, "unused", session_id="ignored")  # an ended session's events
        streams = [(lease_stream("t"), "t"), ("ignored", "ignored")]
    found = []
    for stream, sid in streams:
        events = [NewEvent(type=e.type, body=e.body, recorded_at=e.recorded_at)
                  async for e in store.read(stream)]  # fmt: skip
        found.append((stream.replace(sid, "{}"), events))
    blobs = [data async for _, data in store.read_blobs()]
    return found, blobs


Template = tuple[list[tuple[str, list[NewEvent]]], list[bytes]]


async def fill(
    url: str,
    count: int,
    start: int,
    *,
    waiting: bool = False,
    template: Template | None = None,
    rowwise: bool = False,
) -> float:
    """Add ``count`` ended (or ``waiting``) sessions in bulk, copies of ``template``
    (default: :func:`_template`'s). On PostgreSQL the server makes the rows
    (:func:`pg_fill`) unless ``rowwise``; otherwise the rows are chained here and
    written in one transaction per 10,000 sessions, then the catalog rebuilt from the
    log (as ``log reindex``). PostgreSQL's tables are then vacuumed: the seconds that
    took are returned."""
    streams, blobs = template or await _template(waiting=waiting)
    if url.startswith("postgresql://") and not rowwise:
        await pg_fill(url, count, start, (streams, blobs))
        return vacuum(url)
    async with open_log(url) as store:
        for data in blobs:  # the same bytes for every copy: stored once
            await store.put_blob(data)
        last = getattr(store, "last_position")  # noqa: B009
        for base in range(start, start + count, 10_000):
            position = await last() + 1
            rows = []
            for i in range(base, min(base + 10_000, start + count)):
                for name, events in streams:
                    stream = name.format(f"bulk{i:08d}")
                    built = build_events(stream, "0" * 64, 0, position, events)
                    position += len(built)
                    rows += built
            await _insert(store, rows)
        await store.reindex()  # type: ignore[attr-defined]
    return vacuum(url) if url.startswith("postgresql://") else 0.0


#: The session id a template's catalog row is folded under, replaced in each copy.
MARK = "bulkXXXXXXXX"
#: One event's hash as eventlog/_hashchain.py makes it (sha256 of prev_hash, type,
#: stream, seq, recorded_at, each followed by a newline, then the body), in SQL.
_PG_HASH = (
    "encode(sha256(convert_to({prev} || E'\\n' || t.type || E'\\n' || {stream} || E'\\n' "
    "|| t.seq::text || E'\\n' || t.recorded_at::text || E'\\n', 'UTF8') || t.body), 'hex')"
)
#: Sessions ``lo``..``hi`` as copies of the template in ``pg_tpl`` (one row per event:
#: its stream's index ``kind`` and format, seq, offset among the copy's events), named
#: ``bulk%08d`` and numbered after position ``base``: a recursive query hashes each
#: stream's chain one seq per level; the rows go in in position order, as appends do.
_PG_GENERATE = (
    "INSERT INTO events (stream, seq, position, type, recorded_at, body, prev_hash, hash) "
    "WITH RECURSIVE chain (i, kind, stream, seq, prev, hash) AS ("
    " SELECT g.i, t.kind, s.stream, t.seq, %(genesis)s::text, "
    + _PG_HASH.format(prev="%(genesis)s::text", stream="s.stream")
    + " FROM generate_series(%(lo)s::int8, %(hi)s::int8) AS g(i) CROSS JOIN pg_tpl t"
    " CROSS JOIN LATERAL (SELECT replace(t.fmt, '{}', 'bulk' || lpad(g.i::text, 8, '0'))"
    " AS stream) s WHERE t.seq = 0"
    " UNION ALL SELECT c.i, c.kind, c.stream, t.seq, c.hash, "
    + _PG_HASH.format(prev="c.hash", stream="c.stream")
    + " FROM chain c JOIN pg_tpl t ON t.kind = c.kind AND t.seq = c.seq + 1) "
    "SELECT c.stream, c.seq, %(base)s::int8 + (c.i - %(lo)s::int8) * %(per)s::int8 + t.off + 1,"
    " t.type, t.recorded_at, t.body, c.prev, c.hash FROM chain c "
    "JOIN pg_tpl t ON t.kind = c.kind AND t.seq = c.seq ORDER BY 3"
)
#: The catalog rows of sessions ``lo``..``hi``: the template's row under each id.
_PG_CATALOG_ROWS = (
    "INSERT INTO eventlog_catalog ({columns}) SELECT {key}, %s, %s, %s, %s, "
    "replace(%s, %s, {key}), %s, %s, %s, replace(%s, %s, {key}) "
    "FROM generate_series(%s::int8, %s::int8) AS g(i)"
)


async def pg_fill(url: str, count: int, start: int, template: Template) -> None:
    """:func:`fill` done by the server, as a bulk import would: one INSERT … SELECT per
    100,000 sessions copies the template's events under new ids, every hash computed
    by PostgreSQL's sha256 exactly as the store computes it, and the catalog rows go in
    the same transaction (each the row the projection folds from the template, under
    the copy's id), so the log verifies and its catalog stays current.
    :func:`check_pg_fill` proves the rows equal the row-by-row fill's."""
    from eventlog._postgres_catalog import COLUMNS
    from eventlog._postgres_writer import lock_for_append

    assert start + count <= 10**8, "bulk%08d ids"
    streams, blobs = template
    per = sum(len(events) for _, events in streams)
    events: list[Any] = []
    for name, new in streams:
        events += build_events(name.format(MARK), "0" * 64, 0, len(events) + 1, new)
    rows: dict[str, Any] = {}
    fold_into(SESSIONS, rows, lambda key: None, events)
    (row,) = rows.values()
    tpl = [(kind, name, seq, off, e.type, e.recorded_at, e.body)
           for off, (kind, name, seq, e) in enumerate(
               (k, name, s, e) for k, (name, new) in enumerate(streams) for s, e in enumerate(new)
           )]  # fmt: skip
    row_values = (row.status, row.claimable, row.created_at, row.updated_at, row.text, MARK,
                  row.pending, row.holder, row.lease_until, row.doc, MARK)  # fmt: skip

    key = "'bulk' || lpad(g.i::text, 8, '0')"
    catalog_rows = _PG_CATALOG_ROWS.format(columns=COLUMNS, key=key).encode()

    def copies(conn: Any, lo: int, hi: int) -> None:
        conn.execute(b"SET LOCAL work_mem = '256MB'")  # the position sort in memory
        conn.execute(
            b"CREATE TEMP TABLE IF NOT EXISTS pg_tpl (kind int, fmt text, seq int8, off int8, "
            b"type text, recorded_at int8, body bytea) ON COMMIT DELETE ROWS"
        )
        with conn.cursor() as cur:
            cur.executemany(b"INSERT INTO pg_tpl VALUES (%s, %s, %s, %s, %s, %s, %s)", tpl)
        base = lock_for_append(conn)
        params = {"genesis": "0" * 64, "lo": lo, "hi": hi, "base": base, "per": per}
        conn.execute(_PG_GENERATE.encode(), params)
        conn.execute(catalog_rows, (*row_values, lo, hi))

    async with open_log(url) as store:
        for data in blobs:
            await store.put_blob(data)
        for lo in range(start, start + count, 100_000):
            hi = min(lo + 100_000, start + count) - 1
            await store.call_in_writer(lambda conn, lo=lo, hi=hi: copies(conn, lo, hi))


def vacuum(url: str) -> float:
    """``VACUUM (ANALYZE)`` after a bulk load, as PostgreSQL's manual advises ("Populating
    a Database"): fresh statistics for the planner, and every page's visibility settled
    now rather than by an autovacuum rewriting the hint bits of the whole table while
    the bench measures; then a CHECKPOINT, so the gigabytes the load dirtied are on
    disk before the first measured commit waits on its own fsync. Returns the seconds
    both took."""
    import psycopg

    t = time.perf_counter()
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(b"VACUUM (ANALYZE)")
        conn.execute(b"CHECKPOINT")
    return time.perf_counter() - t


def check_pg_fill(url_of: Any, count: int = 30) -> None:
    """The server's fill makes exactly the rows (events, blobs, catalog) that chaining
    each event here and rebuilding the catalog from the log make."""
    import psycopg

    tables = ("events", "position"), ("blobs", "digest"), ("eventlog_catalog", "key")
    for waiting in (False, True):
        template = trio.run(lambda w=waiting: _template(waiting=w))
        mine, theirs = url_of(), url_of()
        trio.run(lambda: fill(mine, count, 0, template=template, rowwise=True))  # noqa: B023
        trio.run(lambda: fill(theirs, count, 0, template=template))  # noqa: B023
        for table, order in (*tables, ("eventlog_catalog_meta", "1")):
            sql = f"SELECT * FROM {table} ORDER BY {order}".encode()
            with psycopg.connect(mine) as a, psycopg.connect(theirs) as b:
                assert a.execute(sql).fetchall() == b.execute(sql).fetchall(), table


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


async def queued(store: Any, sid: str) -> Claim:
    """A fresh session ``sid`` queued, and the claim that should take it."""
    await queue_session(store, agent(), "fresh", session_id=sid)
    now = time.time_ns()
    return Claim(
        limit=1, now=now, stream_of=lease_stream,
        event_of=lambda key: CODEC.encode(
            LeaseAcquired(session=key, worker="bench", until=now + 10**12), recorded_at=now
        ),
    )  # fmt: skip


async def measure(
    url: str, repeat: int, cache_kib: int | None = None
) -> tuple[list[float], list[float]]:
    """ms of ``repeat`` claims (each of a fresh queued session) and default listings;
    with ``cache_kib`` (SQLite) the writer's page cache is set to that size first."""
    claims, listings = [], []
    async with open_log(url) as store:
        if cache_kib is not None:
            pragma = f"PRAGMA cache_size = -{cache_kib}"
            await store.call_in_writer(lambda conn: conn.execute(pragma))  # type: ignore[attr-defined]
        for i in range(repeat):
            sid = f"fresh{time.time_ns()}{i}"
            claim = await queued(store, sid)
            t = time.perf_counter()
            claimed = await store.claim(claim)  # type: ignore[attr-defined]
            claims.append((time.perf_counter() - t) * 1000)
            assert [e.stream for e in claimed] == [lease_stream(sid)]
            t = time.perf_counter()
            rows = await session_rows(store, Listing(limit=51))
            listings.append((time.perf_counter() - t) * 1000)
            assert len(rows) == 51
    return claims, listings


class _Explained:
    """A writer's connection that runs each query once more under ``EXPLAIN (ANALYZE,
    BUFFERS)`` first, in a savepoint it rolls back, and keeps the plans' totals."""

    def __init__(self, conn: Any) -> None:
        self.conn, self.statements, self.hit, self.read, self.ms = conn, 0, 0, 0, 0.0

    def __getattr__(self, name: str) -> Any:
        return getattr(self.conn, name)

    def execute(self, sql: Any, params: Any = None) -> Any:
        text = sql if isinstance(sql, bytes) else sql.encode()
        if text.split(None, 1)[0].upper() in (b"SELECT", b"INSERT", b"UPDATE", b"WITH"):
            self.conn.execute(b"SAVEPOINT explained")
            explain = b"EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) " + text
            (plan,) = self.conn.execute(explain, params).fetchone()[0]
            self.conn.execute(b"ROLLBACK TO SAVEPOINT explained")
            top = plan["Plan"]
            self.statements += 1
            self.hit += top["Shared Hit Blocks"] + plan.get("Planning", {}).get(
                "Shared Hit Blocks", 0
            )
            self.read += top["Shared Read Blocks"] + plan.get("Planning", {}).get(
                "Shared Read Blocks", 0
            )
            self.ms += plan["Planning Time"] + plan["Execution Time"]
        return self.conn.execute(sql, params)


async def claim_buffers(url: str) -> str:
    """PostgreSQL: what the server does for one claim (its queries explained: buffers
    touched, planning and execution time), independent of the machine's load."""
    async with open_log(url) as store:
        writer = store._writer  # type: ignore[attr-defined]
        for _ in range(3):  # the last one counts (the first warm the caches)
            sid = f"explained{time.time_ns()}"
            claim = await queued(store, sid)

            def explained(conn: Any, claim: Claim = claim) -> tuple[_Explained, list[Any]]:
                real, writer._conn = writer._conn, _Explained(conn)
                try:
                    return writer._conn, writer.claim(writer._conn, claim)
                finally:
                    writer._conn = real

            counts, claimed = await store.call_in_writer(explained)
            assert [e.stream for e in claimed] == [lease_stream(sid)]
    return (
        f"{counts.statements} queries, {counts.hit + counts.read} buffers "
        f"({counts.read} read), {counts.ms:.2f} ms planning and executing in the server"
    )


def claim_plan(url: str) -> str:
    """The database's plan for the claim's query (SQLite: EXPLAIN QUERY PLAN)."""
    if url.startswith("postgresql://"):
        import psycopg

        from eventlog._postgres_catalog import CLAIMABLE as PG_CLAIMABLE

        with psycopg.connect(url) as conn:
            sql = f"EXPLAIN {PG_CLAIMABLE}".encode()
            rows = conn.execute(sql, (time.time_ns(), 1)).fetchall()
    else:
        from eventlog._sqlite_catalog import CLAIMABLE

        with sqlite3.connect(url) as conn:
            rows = conn.execute(f"EXPLAIN QUERY PLAN {CLAIMABLE}", (time.time_ns(), 1)).fetchall()
    return "; ".join(str(r[-1]) for r in rows)


def catalog_figures(
    label: str,
    url_of: Any,
    sizes: list[int],
    caches: list[int | None],
    rounds: int = 6,
    *,
    verify: bool = False,
) -> None:
    """One log per size, filled in bulk; then the claim and the listing measured on
    each in turn, round after round (the first round is warm-up), so every size sees
    the same machine load: the ratios hold on a shared machine. With several writer
    page ``caches`` (KiB, SQLite; None: the default), each is measured on every log in
    the same rounds."""
    urls = []
    if label == "PostgreSQL":
        check_pg_fill(url_of)
        print(f"{label}: the server's fill writes the rows a row-by-row fill does", flush=True)
    for size in sizes:
        url = url_of()
        t, cpu = time.perf_counter(), time.process_time()
        vacuumed = trio.run(fill, url, size, 0)
        urls.append(url)
        print(
            f"{label}: {size:>9,} sessions filled in {time.perf_counter() - t:.0f} s "
            f"({time.process_time() - cpu:.0f} s CPU here"
            f"{f', VACUUM (ANALYZE) and CHECKPOINT {vacuumed:.0f} s' if vacuumed else ''}), "
            "load average "
            f"{os.getloadavg()[0]:.1f}",
            flush=True,
        )
    if verify:
        t = time.perf_counter()
        cli = [sys.executable, "-m", "orchestrator.cli", "log", "verify", "--db", urls[-1]]
        done = subprocess.run(cli, capture_output=True, text=True)
        print(
            f"{label}: `skillog log verify` of the {sizes[-1]:,}-session log: exit "
            f"{done.returncode} in {time.perf_counter() - t:.0f} s: "
            f"{(done.stdout or done.stderr).strip().splitlines()[-1:]}",
            flush=True,
        )
    print(f"{label}: claim plan at {sizes[-1]:,}: {claim_plan(urls[-1])}", flush=True)
    if label == "PostgreSQL":
        for size, url in zip(sizes, urls, strict=True):
            print(f"{label}: one claim at {size:>9,}: {trio.run(claim_buffers, url)}", flush=True)
    runs = [(url, cache) for cache in caches for url in urls]
    samples: list[tuple[list[float], list[float]]] = [([], []) for _ in runs]
    for round_ in range(rounds):
        for (url, cache), (claims, listings) in zip(runs, samples, strict=True):
            c, listed = trio.run(measure, url, 5, cache)
            if round_:
                claims += c
                listings += listed
    for i, cache in enumerate(caches):
        name = label if cache is None else f"{label} (writer cache {cache:,} KiB)"
        mine = samples[i * len(sizes) : (i + 1) * len(sizes)]
        first = (_median(mine[0][0]), _median(mine[0][1]))
        for size, (claims, listings) in zip(sizes, mine, strict=True):
            claim_ms, list_ms = _median(claims), _median(listings)
            print(
                f"{name}: {size:>9,} sessions: claim {claim_ms:.2f} ms "
                f"({claim_ms / first[0]:.2f}x), sessions listing {list_ms:.2f} ms "
                f"({list_ms / first[1]:.2f}x)",
                flush=True,
            )


def idle_growth(label: str, url_of: Any, sessions: int, seconds: float, workers: int) -> None:
    """``sessions`` suspended on approvals, ``workers`` worker processes running beside
    them for ``seconds`` with a 300 ms lease and a 20 ms poll (the production defaults
    scaled down 50x and 25x): events appended (goal 0) and rows written."""
    url = url_of()
    trio.run(lambda: fill(url, sessions, 0, waiting=True))
    time.sleep(1.0)  # the fill's rows in PostgreSQL's statistics before counting

    async def snapshot() -> tuple[int, list[Any], int]:
        async with open_log(url, readonly=True) as store:
            last = await store.last_position()  # type: ignore[attr-defined]
            rows = await store.read_catalog()  # type: ignore[attr-defined]
        return last, rows, _rows_written(url)

    watch = None if url.startswith("postgresql://") else sqlite3.connect(url)
    version = watch.execute("PRAGMA data_version").fetchone() if watch else None
    before = trio.run(snapshot)
    assert {r.status for r in before[1]} == {"awaiting_approval"}, {r.status for r in before[1]}
    pids = [
        fork_worker(url, f"idle{i}", once=False, lease_ms=300, poll_ms=20, concurrency=8)
        for i in range(workers)
    ]
    time.sleep(seconds)
    for pid in pids:
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
    time.sleep(1.0)  # PostgreSQL's statistics are flushed within a second
    after = trio.run(snapshot)
    events = after[0] - before[0]
    changed = sum(a != b for a, b in zip(before[1], after[1], strict=True))
    if watch is not None:  # SQLite counts no rows; data_version moves on any commit
        same = watch.execute("PRAGMA data_version").fetchone() == version
        watch.close()
        written = ", no commit changed the file" if same else ", commits changed the file"
    else:
        written = f", {after[2] - before[2]} rows inserted or updated"
    print(
        f"{label}: {sessions} sessions awaiting approval, {workers} workers for {seconds:.0f} s: "
        f"{events} events appended ({events * 3600 / seconds:.0f}/hour extrapolated, goal 0), "
        f"{changed} catalog rows changed{written}",
        flush=True,
    )


def _rows_written(url: str) -> int:
    """PostgreSQL: rows inserted and updated in the log's tables so far (-1 on SQLite,
    which keeps no such count)."""
    if not url.startswith("postgresql://"):
        return -1
    import psycopg

    with psycopg.connect(url) as conn:
        row = conn.execute(
            b"SELECT coalesce(sum(n_tup_ins + n_tup_upd), 0) FROM pg_stat_user_tables"
        ).fetchone()
    return int(row[0]) if row else 0


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
    ap.add_argument("--only", choices=["catalog", "fleet", "idle"])
    ap.add_argument("--idle-sessions", type=int, default=1000)
    ap.add_argument("--idle-seconds", type=float, default=60.0)
    ap.add_argument("--store", choices=["sqlite", "postgres"], help="only this store")
    ap.add_argument(
        "--rounds", type=int, default=6,
        help="catalog: measuring rounds over every size (the first is warm-up), 5 claims each",
    )  # fmt: skip
    ap.add_argument(
        "--verify-fill", action="store_true",
        help="run `skillog log verify` on the largest catalog log (and print its time)",
    )  # fmt: skip
    ap.add_argument(
        "--writer-cache-kib", default="",
        help="SQLite: also measure the catalog with the writer's page cache at these sizes "
        "(KiB, comma-separated; the default is SQLite's 2,000)",
    )  # fmt: skip
    args = ap.parse_args()
    sizes = [int(x) for x in args.catalog_sizes.split(",")]
    print(
        f"fleet bench: {os.cpu_count()} cores ({len(os.sched_getaffinity(0))} usable), "
        f"load average {os.getloadavg()[0]:.1f}"
    )
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
                if args.only in (None, "catalog"):
                    caches: list[int | None] = [None]
                    if label == "SQLite" and args.writer_cache_kib:
                        caches += [int(x) for x in args.writer_cache_kib.split(",")]
                    catalog_figures(
                        label, url_of, sizes, caches, args.rounds, verify=args.verify_fill
                    )
                if args.only in (None, "idle"):
                    idle_growth(label, url_of, args.idle_sessions, args.idle_seconds, 2)
                if args.only in ("catalog", "idle"):
                    continue
                dbos = load_dbos() if label == "PostgreSQL" else None
                if label == "PostgreSQL" and dbos is None:
                    print("DBOS is not installed (pip install -e '.[bench]'): no comparison")
                fleet_figures(label, url_of, args.sessions, dbos)
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
