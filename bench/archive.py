"""Retention figures (issue 25): archive N ended sessions (default 10,000) out of a log
(`skillog log archive`): the time to choose them, write and sign the archive, and
commit the deletion with its tombstones; the log file's size before, after, and after
VACUUM; the time `log verify` takes before and after; the archive's size. On SQLite,
and on a throwaway PostgreSQL cluster (tests/pgcluster.py) when its binaries exist
(time and `pg_total_relation_size` of the events table).

    .venv/bin/python bench/archive.py [--sessions 10000] [--blob-bytes 2048]
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

import msgspec
import trio
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from eventlog import GENESIS_HASH, MemoryStore, NewEvent, archive_streams
from eventlog._hashchain import blob_digest, build_events
from eventlog._jsonl import named_digests
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


async def _insert_blobs(store: Any, blobs: dict[str, bytes]) -> None:
    if type(store).__name__ == "SqliteStore":
        from eventlog._sqlite_writer import INSERT_BLOB

        rows = list(blobs.items())
        await store.call_in_writer(lambda conn: conn.executemany(INSERT_BLOB, rows))
    else:
        from eventlog._postgres_writer import insert_blobs

        await store.call_in_writer(lambda conn: insert_blobs(conn, blobs))


async def fill(url: str, count: int, blob_bytes: int) -> None:
    """``count`` ended fleet sessions (and their lease streams) with their blobs, bulk
    inserted (bench/fleet.py's rows), then the catalog rebuilt from the log. Each
    session's first prompt line is a blob of its own, ``blob_bytes`` long (content a
    real session would not share: a user message, a tool result), so blobs grow with
    the sessions as they do in a real log; the rest are shared by all."""
    template = MemoryStore()
    await FLEET.queue_session(template, FLEET.agent(), "template", session_id="t")
    await FLEET.agent().run(template, "unused", session_id="s")
    shared = {d: b async for d, b in template.read_blobs()}
    streams = {}
    for stream, sid in ((FLEET.lease_stream("t"), "t"), ("s", "s")):
        events = [NewEvent(type=e.type, body=e.body, recorded_at=e.recorded_at)
                  async for e in template.read(stream)]  # fmt: skip
        streams[stream.replace(sid, "{}")] = events
    first = next(i for i, e in enumerate(streams["{}"]) if e.type == "prompt.rendered")
    prompt = streams["{}"][first]
    own = min(d for d in named_digests(prompt.body) if d in shared)
    async with open_log(url) as store:
        await _insert_blobs(store, shared)
        last = store.last_position  # type: ignore[attr-defined]
        for base in range(0, count, 10_000):
            position = await last() + 1
            rows, blobs = [], {}
            for i in range(base, min(base + 10_000, count)):
                sid = f"bulk{i:08d}"
                data = (shared[own] + f" {sid}".encode()).ljust(blob_bytes, b" ")
                digest = blob_digest(data)
                blobs[digest] = data
                body = prompt.body.replace(own.encode(), digest.encode())
                for name, events in streams.items():
                    if name == "{}":
                        events = [*events[:first], msgspec.structs.replace(prompt, body=body),
                                  *events[first + 1:]]  # fmt: skip
                    built = build_events(name.format(sid), GENESIS_HASH, 0, position, events)
                    position += len(built)
                    rows += built
            await _insert_blobs(store, blobs)
            await FLEET._insert(store, rows)
        await store.reindex()  # type: ignore[attr-defined]


async def blob_totals(store: Any) -> tuple[int, int]:
    """(rows, bytes) of the blob table."""
    if type(store).__name__ == "SqliteStore":
        sql = "SELECT count(*), coalesce(sum(length(data)), 0) FROM blobs"
    else:
        sql = "SELECT count(*), coalesce(sum(octet_length(data)), 0) FROM blobs"
    row = await store.call_in_writer(lambda conn: conn.execute(sql).fetchone())
    return int(row[0]), int(row[1])


def size(path: Path) -> int:
    return sum(os.path.getsize(p) for p in (path, Path(f"{path}-wal")) if p.exists())


async def run(url: str, out: Path) -> dict[str, Any]:
    figures: dict[str, Any] = {}
    async with open_log(url) as store:
        figures["blobs_before"] = await blob_totals(store)
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
        figures["blobs_after"] = await blob_totals(store)
        figures["blobs_removed"] = (result.blobs, result.blob_bytes)
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


def blob_line(figures: dict[str, Any]) -> str:
    (rows, size), (rows_after, size_after) = figures["blobs_before"], figures["blobs_after"]
    removed, freed = figures["blobs_removed"]
    return (f"  blobs {rows:,} ({size:,} B) before, {rows_after:,} ({size_after:,} B) after: "
            f"{removed:,} removed ({freed:,} B), the archive carries them")  # fmt: skip


def sqlite_figures(n: int, tmp: Path, blob_bytes: int) -> None:
    db = tmp / "log.db"
    trio.run(fill, str(db), n, blob_bytes)
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
    print(blob_line(figures))
    print(f"  archive file {(tmp / 'archive.jsonl').stat().st_size:,} B")
    print(f"  log verify {figures['verify_before_s']:.2f} s before, "
          f"{figures['verify_after_s']:.3f} s after")  # fmt: skip


def postgres_figures(n: int, tmp: Path, blob_bytes: int) -> None:
    urls = FLEET.pg_urls()
    if urls is None:
        print("PostgreSQL: no binaries, skipped")
        return
    cluster, new_url = urls
    try:
        url = new_url()
        trio.run(fill, url, n, blob_bytes)
        figures = trio.run(run, url, tmp / "archive-pg.jsonl")
    finally:
        cluster.stop()
    print(f"PostgreSQL: {figures['archived']:,} ended sessions ({figures['events']:,} events)")
    print(f"  choose {figures['choose_s']:.2f} s, archive {figures['archive_s']:.2f} s; events "
          f"table {figures['pg_events_bytes_after']:,} B after (autovacuum reclaims)")  # fmt: skip
    print(blob_line(figures))
    print(f"  log verify {figures['verify_before_s']:.2f} s before, "
          f"{figures['verify_after_s']:.3f} s after")  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sessions", type=int, default=10_000)
    parser.add_argument("--blob-bytes", type=int, default=2048,
                        help="size of each session's own blob (default 2048)")  # fmt: skip
    args = parser.parse_args()
    print(f"{os.cpu_count()} cores, load average {os.getloadavg()[0]:.2f}")
    with tempfile.TemporaryDirectory() as tmp:
        sqlite_figures(args.sessions, Path(tmp), args.blob_bytes)
        postgres_figures(args.sessions, Path(tmp), args.blob_bytes)
    print(f"load average {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
