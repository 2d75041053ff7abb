"""Benchmarks of the PostgreSQL store (issue 15, the store half). One run prints every
figure and ratio, all against the same local server.

    .venv/bin/pip install -e '.[bench]'
    .venv/bin/python bench/postgres.py            # the issue's sizes
    .venv/bin/python bench/postgres.py --quick    # small sizes, a smoke test

By default it starts a throwaway cluster (tests/pgcluster.py) with fsync on, so every
commit is durable; ``--dsn`` uses an existing server instead (its role must be allowed to
CREATE DATABASE). Measured: sequential appends against a raw psycopg insert-per-commit
floor, 64 concurrent streams against eventsourcing's PostgreSQL recorder saving the same
events from 64 threads, and a cold fold of one long stream against the SQLite store's
(in alternated rounds, ``--fold-rounds``).
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path
from typing import Any, ClassVar

import msgspec
import psycopg
import trio
from psycopg.conninfo import conninfo_to_dict, make_conninfo

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import eventlog as el


class Noted(msgspec.Struct, frozen=True, kw_only=True):
    event_type: ClassVar[str] = "bench.noted"
    n: int
    text: str


CODEC = el.Codec([Noted])
TEXT = "x" * 270  # the encoded body is ~300 bytes, as in bench/eventlog.py


def body(i: int) -> Noted:
    return Noted(n=i, text=TEXT)


def rate(n: int, seconds: float) -> float:
    return n / seconds if seconds > 0 else float("inf")


class Server:
    """Fresh databases on one server: our own throwaway cluster or ``--dsn``'s."""

    def __init__(self, dsn: str | None) -> None:
        self.cluster: Any = None
        if dsn is None:
            path = Path(__file__).resolve().parents[1] / "tests" / "pgcluster.py"
            spec = importlib.util.spec_from_file_location("pgcluster", path)
            assert spec is not None and spec.loader is not None
            pgcluster = importlib.util.module_from_spec(spec)
            spec.loader.exec_module(pgcluster)
            bindir = pgcluster.find_bindir()
            if bindir is None:
                sys.exit("no PostgreSQL binaries (initdb) found; install postgresql or use --dsn")
            self.cluster = pgcluster.PgCluster(bindir, durable=True)
            self.cluster.start()
            dsn = self.cluster.dsn()
        self.dsn = dsn
        self.made: list[str] = []

    def database(self, name: str) -> str:
        name = f"bench_{name}_{uuid.uuid4().hex[:8]}"
        with psycopg.connect(self.dsn, autocommit=True) as conn:
            conn.execute(f'CREATE DATABASE "{name}"'.encode())
        self.made.append(name)
        params = conninfo_to_dict(self.dsn)
        params["dbname"] = name
        return make_conninfo(**params)

    def close(self) -> None:
        if self.cluster is not None:
            self.cluster.stop()
            return
        with psycopg.connect(self.dsn, autocommit=True) as conn:
            for name in self.made:
                conn.execute(f'DROP DATABASE IF EXISTS "{name}"'.encode())


# -- the floor ------------------------------------------------------------------------


def raw_floor(dsn: str, n: int, *, off_loop: bool = False) -> float:
    """Plain psycopg, one INSERT and COMMIT per ~300-byte row, no event loop. With
    ``off_loop``, each transaction is awaited from trio on a worker thread: the floor under
    any design that keeps the driver off the event loop (two thread hand-offs more)."""
    rows = [CODEC.encode(body(i), recorded_at=i).body for i in range(n)]
    with psycopg.connect(dsn) as conn:
        conn.execute(
            b"CREATE TABLE t (id BIGSERIAL PRIMARY KEY, stream TEXT, seq BIGINT, data BYTEA)"
        )
        conn.commit()

        def txn(i: int) -> None:
            conn.execute(b"INSERT INTO t (stream, seq, data) VALUES ('s', %s, %s)", (i, rows[i]))
            conn.commit()

        async def awaited() -> None:
            for i in range(n):
                await trio.to_thread.run_sync(txn, i)

        t = time.perf_counter()
        if off_loop:
            trio.run(awaited)
        else:
            for i in range(n):
                txn(i)
        return rate(n, time.perf_counter() - t)


# -- skillog --------------------------------------------------------------------------


async def sequential(dsn: str, n: int) -> float:
    async with el.open_postgres_store(dsn) as store:
        t = time.perf_counter()
        for i in range(n):
            await store.append("s", [CODEC.encode(body(i), recorded_at=i)], expected_seq=i)
        return rate(n, time.perf_counter() - t)


async def concurrent(dsn: str, streams: int, per: int) -> float:
    async with el.open_postgres_store(dsn) as store:

        async def writer(k: int) -> None:
            for i in range(per):
                ev = CODEC.encode(body(i), recorded_at=i)
                await store.append(f"s{k}", [ev], expected_seq=i)

        t = time.perf_counter()
        async with trio.open_nursery() as nursery:
            for k in range(streams):
                nursery.start_soon(writer, k)
        return rate(streams * per, time.perf_counter() - t)


async def bulk(store: Any, n: int, batch: int = 10_000) -> None:
    for start in range(0, n, batch):
        stop = min(n, start + batch)
        evs = [CODEC.encode(body(i), recorded_at=i) for i in range(start, stop)]
        await store.append("big", evs, expected_seq=start)


def reduce(state: int, b: Noted) -> int:
    return state + b.n


async def load_big(url: str, n: int) -> float:
    """Bulk-load one ``n``-event stream into the store at ``url``; ev/s."""
    async with el.open_store(url) as store:
        t = time.perf_counter()
        await bulk(store, n)
        return rate(n, time.perf_counter() - t)


async def fold_rate(url: str, n: int) -> tuple[float, float]:
    """(ev/s, CPU seconds in this process) of a cold fold of the ``n``-event stream:
    the store opened afresh, read, decoded and reduced."""
    async with el.open_store(url, readonly=True) as store:
        t, cpu = time.perf_counter(), time.process_time()
        folded = await el.fold_stream(store, "big", reduce, 0, decode=CODEC.decode)
        fold = rate(n, time.perf_counter() - t), time.process_time() - cpu
    assert folded.state == n * (n - 1) // 2
    return fold


# -- eventsourcing --------------------------------------------------------------------


def es_concurrent(dsn: str, streams: int, per: int) -> float:
    """eventsourcing's PostgreSQL recorder: ``streams`` threads, each saving its own
    aggregate after every event (the same ~300-byte events), one pooled connection each."""
    from eventsourcing.application import Application
    from eventsourcing.domain import Aggregate, event

    class Item(Aggregate):
        @event("Created")
        def __init__(self) -> None:
            self.total = 0

        @event("Noted")
        def note(self, n: int, text: str) -> None:
            self.total += n

    p = conninfo_to_dict(dsn)
    app = Application(
        env={
            "PERSISTENCE_MODULE": "eventsourcing.postgres",
            "POSTGRES_DBNAME": p["dbname"],
            "POSTGRES_HOST": p["host"],
            "POSTGRES_PORT": p["port"],
            "POSTGRES_USER": p["user"],
            "POSTGRES_PASSWORD": p["password"],
            "POSTGRES_POOL_SIZE": str(streams),
            "POSTGRES_MAX_OVERFLOW": "0",
        }
    )
    items = [Item() for _ in range(streams)]
    for item in items:
        app.save(item)
    start = threading.Barrier(streams + 1)

    def writer(item: Item) -> None:
        start.wait()
        for i in range(per):
            item.note(n=i, text=TEXT)
            app.save(item)

    threads = [threading.Thread(target=writer, args=(item,)) for item in items]
    for th in threads:
        th.start()
    t = time.perf_counter()
    start.wait()
    for th in threads:
        th.join()
    r = rate(streams * per, time.perf_counter() - t)
    app.close()
    return r


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--quick", action="store_true", help="small sizes (smoke test)")
    ap.add_argument("--dsn", help="an existing server (role with CREATEDB) instead of our own")
    ap.add_argument("--fold", type=int, help="events in the fold stream (default 1,000,000)")
    ap.add_argument(
        "--fold-rounds", type=int, default=3, help="cold folds of each store, alternated"
    )
    args = ap.parse_args()
    seq_n = 300 if args.quick else 2_000
    streams, per = (64, 10) if args.quick else (64, 100)
    big = args.fold or (20_000 if args.quick else 1_000_000)
    server = Server(args.dsn)
    try:
        with psycopg.connect(server.dsn) as conn:
            version = conn.info.server_version
            fsync = conn.execute(b"SHOW fsync").fetchone()
            sync = conn.execute(b"SHOW synchronous_commit").fetchone()
        print(
            f"postgres bench ({'quick' if args.quick else 'full'}), server {version}, "
            f"fsync={fsync[0] if fsync else '?'}, synchronous_commit={sync[0] if sync else '?'}, "
            f"psycopg {psycopg.__version__}, {os.cpu_count()} cpus"
        )
        floor = raw_floor(server.database("raw"), seq_n)
        off_loop = raw_floor(server.database("raw_off"), seq_n, off_loop=True)
        seq = trio.run(sequential, server.database("seq"), seq_n)
        print(f"raw psycopg floor, 1 INSERT+COMMIT/row:  {floor:>10,.0f} rows/s")
        print(
            f"  the same, awaited on a worker thread:  {off_loop:>10,.0f} rows/s  "
            f"= {off_loop / floor:.2f} x floor (the cost of leaving the event loop)"
        )
        print(
            f"sequential append, awaited:              {seq:>10,.0f} ev/s  "
            f"= {seq / floor:.2f} x floor (target >= 0.8), {seq / off_loop:.2f} x the awaited floor"
        )
        conc = trio.run(concurrent, server.database("conc"), streams, per)
        es = es_concurrent(server.database("es"), streams, per)
        print(f"concurrent {streams}x{per}, each awaited:       {conc:>10,.0f} ev/s")
        print(
            f"eventsourcing, {streams} threads, save/event:  {es:>10,.0f} ev/s  "
            f"-> skillog concurrent = {conc / es:.1f} x (target >= 5)"
        )
        pg_url = server.database("fold")
        pg_load = trio.run(load_big, pg_url, big)
        with tempfile.TemporaryDirectory() as tmp:
            sq_url = str(Path(tmp) / "fold.db")
            sq_load = trio.run(load_big, sq_url, big)
            print(f"bulk append {big:,}, PostgreSQL:       {pg_load:>10,.0f} ev/s")
            print(f"bulk append {big:,}, SQLite:           {sq_load:>10,.0f} ev/s")
            ratios = []
            for round_ in range(args.fold_rounds):  # alternated: load drifts hit both
                pg_fold, pg_cpu = trio.run(fold_rate, pg_url, big)
                sq_fold, sq_cpu = trio.run(fold_rate, sq_url, big)
                ratios.append(pg_fold / sq_fold)
                print(
                    f"cold fold {big:,}, round {round_ + 1}: PostgreSQL {pg_fold:,.0f} ev/s "
                    f"({pg_cpu:.2f} s CPU here), SQLite {sq_fold:,.0f} ev/s ({sq_cpu:.2f} s "
                    f"CPU) -> {pg_fold / sq_fold:.2f} x SQLite's, load average "
                    f"{os.getloadavg()[0]:.1f}",
                    flush=True,
                )
        print(
            f"cold fold {big:,}: PostgreSQL = {sorted(ratios)[len(ratios) // 2]:.2f} x "
            f"SQLite's (median of {len(ratios)} alternated rounds; target >= 0.8)"
        )
    finally:
        server.close()


if __name__ == "__main__":
    main()
