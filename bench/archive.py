"""Retention figures (issue 25): archive N ended sessions (default 10,000) out of a log
(`skillog log archive`): the time to choose them, write and sign the archive, and
commit the deletion with its tombstones; the log file's size before, after, and after
VACUUM; the time `log verify` takes before and after; the archive's size. On SQLite,
and on a throwaway PostgreSQL cluster (tests/pgcluster.py) when its binaries exist
(time and `pg_total_relation_size` of the events table).

    .venv/bin/python bench/archive.py [--sessions 10000]
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import sys
import tempfile
import time
from pathlib import Path
from types import ModuleType
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import trio
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from eventlog import GENESIS_HASH, MemoryStore, NewEvent, archive_streams
from eventlog._hashchain import build_events
from eventlog._sqlite_db import vacuum
from orchestrator import verdict
from orchestrator._catalog import ended_before, open_log


def _load(name: str, path: Path) -> ModuleType:
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


FLEET = _load("fleet_bench", Path(__file__).with_name("fleet.py"))  # the fleet's trivial sessions


async def fill(url: str, count: int) -> None:
    """``count`` ended fleet sessions (and their lease streams) with their blobs, bulk
    inserted (bench/fleet.py's rows), then the catalog rebuilt from the log."""
    template = MemoryStore()
    await FLEET.queue_session(template, FLEET.agent(), "template", session_id="t")
    await FLEET.agent().run(template, "unused", session_id="s")
    streams = {}
    for stream, sid in ((FLEET.lease_stream("t"), "t"), ("s", "s")):
        events = [NewEvent(type=e.type, body=e.body, recorded_at=e.recorded_at)
                  async for e in template.read(stream)]  # fmt: skip
        streams[stream.replace(sid, "{}")] = events
    async with open_log(url) as store:
        for _, data in [b async for b in template.read_blobs()]:
            await store.put_blob(data)
        last = store.last_position  # type: ignore[attr-defined]
        for base in range(0, count, 10_000):
            position = await last() + 1
            rows = []
            for i in range(base, min(base + 10_000, count)):
                for name, events in streams.items():
                    built = build_events(name.format(f"bulk{i:08d}"), GENESIS_HASH, 0, position,
                                         events)  # fmt: skip
                    position += len(built)
                    rows += built
            await FLEET._insert(store, rows)
        await store.reindex()  # type: ignore[attr-defined]


def size(path: Path) -> int:
    return sum(os.path.getsize(p) for p in (path, Path(f"{path}-wal")) if p.exists())


async def run(url: str, out: Path) -> dict[str, Any]:
    figures: dict[str, Any] = {}
    async with open_log(url) as store:
        t = time.perf_counter()
        assert (await verdict(store)).ok
        figures["verify_before_s"] = time.perf_counter() - t
        t = time.perf_counter()
        heads = await ended_before(store, time.time_ns())
        figures["choose_s"] = time.perf_counter() - t
        t = time.perf_counter()
        result = await archive_streams(
            store, heads, out=out, key=Ed25519PrivateKey.generate(), by="bench",
            before=time.time_ns(), clock=time.time_ns,
        )  # fmt: skip
        figures["archive_s"] = time.perf_counter() - t
        figures["archived"] = len(result.archived)
        figures["events"] = result.events
        t = time.perf_counter()
        report = await verdict(store)
        assert report.ok, report.faults
        figures["verify_after_s"] = time.perf_counter() - t
        if type(store).__name__ == "PostgresStore":
            size_sql = b"SELECT pg_total_relation_size('events')"
            figures["pg_events_bytes_after"] = await store.call_in_writer(  # type: ignore[attr-defined]
                lambda conn: conn.execute(size_sql).fetchone()[0]
            )
    return figures


def sqlite_figures(n: int, tmp: Path) -> None:
    db = tmp / "log.db"
    trio.run(fill, str(db), n)
    before = size(db)
    figures = trio.run(run, str(db), tmp / "archive.jsonl")
    after = size(db)
    t = time.perf_counter()
    vacuum(db)
    vacuum_s = time.perf_counter() - t
    vacuumed = size(db)
    print(f"SQLite: {figures['archived']:,} ended sessions ({figures['events']:,} events)")
    print(f"  choose {figures['choose_s']:.2f} s, archive (write, sign, commit) "
          f"{figures['archive_s']:.2f} s, VACUUM {vacuum_s:.2f} s")  # fmt: skip
    print(f"  log file {before:,} B before, {after:,} B after ({after / before:.2f}x; freed "
          f"pages kept), {vacuumed:,} B after VACUUM ({vacuumed / before:.3f}x)")  # fmt: skip
    print(f"  archive file {(tmp / 'archive.jsonl').stat().st_size:,} B")
    print(f"  log verify {figures['verify_before_s']:.2f} s before, "
          f"{figures['verify_after_s']:.3f} s after")  # fmt: skip


def postgres_figures(n: int, tmp: Path) -> None:
    urls = FLEET.pg_urls()
    if urls is None:
        print("PostgreSQL: no binaries, skipped")
        return
    cluster, new_url = urls
    try:
        url = new_url()
        trio.run(fill, url, n)
        figures = trio.run(run, url, tmp / "archive-pg.jsonl")
    finally:
        cluster.stop()
    print(f"PostgreSQL: {figures['archived']:,} ended sessions ({figures['events']:,} events)")
    print(f"  choose {figures['choose_s']:.2f} s, archive {figures['archive_s']:.2f} s; events "
          f"table {figures['pg_events_bytes_after']:,} B after (autovacuum reclaims)")  # fmt: skip
    print(f"  log verify {figures['verify_before_s']:.2f} s before, "
          f"{figures['verify_after_s']:.3f} s after")  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sessions", type=int, default=10_000)
    args = parser.parse_args()
    print(f"{os.cpu_count()} cores")
    with tempfile.TemporaryDirectory() as tmp:
        sqlite_figures(args.sessions, Path(tmp))
        postgres_figures(args.sessions, Path(tmp))


if __name__ == "__main__":
    main()
