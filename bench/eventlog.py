"""Benchmarks of the event log (issue 2). One run prints every figure and ratio.

    .venv/bin/python bench/eventlog.py            # the issue's sizes (several minutes)
    .venv/bin/python bench/eventlog.py --quick    # small sizes, a smoke test

Everything is measured in the same run on the same disk: the raw floor (plain sqlite3,
same pragmas, ~300-byte JSON rows), skillog, and eventsourcing's SQLite recorder. Verify
with the session grammar (issue 14) is measured on a 1M-event session log beside verify
of the same file without it (``--verify-only`` runs just the verify figures).
"""

from __future__ import annotations

import argparse
import gc
import os
import sqlite3
import sys
import tempfile
import time
import tracemalloc
from pathlib import Path
from typing import ClassVar

import msgspec
import trio

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import eventlog as el
from orchestrator import _events as ev
from orchestrator._grammar import session_grammar
from orchestrator._model import ModelResponse, TextPart, ToolCall, Usage
from orchestrator._verdict import verdict


class Noted(msgspec.Struct, frozen=True, kw_only=True):
    event_type: ClassVar[str] = "bench.noted"
    n: int
    text: str


CODEC = el.Codec([Noted])
TEXT = "x" * 270  # the encoded body is ~300 bytes


def body(i: int) -> Noted:
    return Noted(n=i, text=TEXT)


def fresh(dirpath: Path, name: str) -> Path:
    p = dirpath / name
    for suffix in ("", "-wal", "-shm"):
        Path(f"{p}{suffix}").unlink(missing_ok=True)
    return p


def rate(n: int, seconds: float) -> float:
    return n / seconds if seconds > 0 else float("inf")


def raw_floor(path: Path, n: int, *, off_loop: bool = False) -> float:
    """Plain sqlite3, WAL, synchronous=FULL, one transaction per ~300-byte JSON row.

    With ``off_loop``, each transaction is awaited from trio on a worker thread (trio's
    own thread cache): the floor under any design that keeps fsync off the event loop,
    which adds only the two thread hand-offs.
    """
    conn = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("PRAGMA synchronous=FULL")
    conn.execute("CREATE TABLE t (id INTEGER PRIMARY KEY, stream TEXT, seq INT, data BLOB)")
    rows = [CODEC.encode(body(i), recorded_at=i).body for i in range(n)]

    def txn(i: int) -> None:
        conn.execute("BEGIN")
        conn.execute("INSERT INTO t (stream, seq, data) VALUES ('s', ?, ?)", (i, rows[i]))
        conn.execute("COMMIT")

    async def awaited() -> None:
        for i in range(n):
            await trio.to_thread.run_sync(txn, i)

    t = time.perf_counter()
    if off_loop:
        trio.run(awaited)
    else:
        for i in range(n):
            txn(i)
    dt = time.perf_counter() - t
    conn.close()
    return rate(n, dt)


def raw_events_commits(path: Path, streams: int, per: int, batch: int) -> float:
    """Ready-made rows into skillog's own ``events`` table with plain sqlite3, no event
    loop, no encoding or hashing: ``streams`` streams of ``per`` events, ``batch`` rows
    per transaction (the writer thread's share of the work, alone)."""
    trio.run(_create_schema, path)
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute("PRAGMA synchronous=FULL")
    data = CODEC.encode(body(0), recorded_at=0).body
    rows = [
        (f"s{k}", i, i * streams + k + 1, "bench.noted", i, data, "0" * 64, "f" * 64)
        for i in range(per)
        for k in range(streams)
    ]
    sql = (
        "INSERT INTO events (stream, seq, position, type, recorded_at, body, prev_hash, hash) "
        "VALUES (?, ?, ?, ?, ?, ?, ?, ?)"
    )
    t = time.perf_counter()
    for start in range(0, len(rows), batch):
        conn.execute("BEGIN IMMEDIATE")
        conn.executemany(sql, rows[start : start + batch])
        conn.execute("COMMIT")
    dt = time.perf_counter() - t
    conn.close()
    fresh(path.parent, path.name)  # delete it: its writeback must not slow what follows
    return rate(len(rows), dt)


async def _create_schema(path: Path) -> None:
    async with el.open_sqlite_store(path):
        pass


async def sequential(path: Path, n: int) -> float:
    async with el.open_sqlite_store(path) as store:
        t = time.perf_counter()
        for i in range(n):
            await store.append("s", [CODEC.encode(body(i), recorded_at=i)], expected_seq=i)
        return rate(n, time.perf_counter() - t)


async def concurrent(path: Path, streams: int, per: int) -> float:
    async with el.open_sqlite_store(path) as store:

        async def writer(k: int) -> None:
            for i in range(per):
                ev = CODEC.encode(body(i), recorded_at=i)
                await store.append(f"s{k}", [ev], expected_seq=i)

        t = time.perf_counter()
        async with trio.open_nursery() as nursery:
            for k in range(streams):
                nursery.start_soon(writer, k)
        return rate(streams * per, time.perf_counter() - t)


async def bulk(path: Path, n: int, batch: int = 10_000) -> float:
    async with el.open_sqlite_store(path) as store:
        t = time.perf_counter()
        for start in range(0, n, batch):
            stop = min(n, start + batch)
            evs = [CODEC.encode(body(i), recorded_at=i) for i in range(start, stop)]
            await store.append("big", evs, expected_seq=start)
        return rate(n, time.perf_counter() - t)


async def export_import(src: Path, dst: Path, dump: Path, n: int) -> float:
    async with el.open_sqlite_store(src, readonly=True) as store:
        with dump.open("wb") as f:
            await el.export_jsonl(store, f)
    async with el.open_sqlite_store(dst) as store:
        t = time.perf_counter()
        await el.import_jsonl(store, str(dump))
        return rate(n, time.perf_counter() - t)


async def verify_log(path: Path, n: int, trace: bool) -> float:
    """Events/s of a whole-log verify (every chain, the stray-row count, every blob);
    with ``trace``, its peak traced bytes."""
    async with el.open_sqlite_store(path, readonly=True) as store:
        gc.collect()
        if trace:
            tracemalloc.start()
        t = time.perf_counter()
        report = await el.verify(store)
        dt = time.perf_counter() - t
        assert report.ok and report.events == n, report.fault
        if trace:
            peak = tracemalloc.get_traced_memory()[1]
            tracemalloc.stop()
            return float(peak)
        return rate(n, dt)


def print_verify(bigdb: Path, big: int, small: Path, small_n: int) -> None:
    """verify_stream (one chain: the figure before issue 14) beside the whole-log verify
    that also proves no row lies outside the chains, and both memory peaks."""
    v, _ = trio.run(verify_and_fold, bigdb, big, False)
    whole = trio.run(verify_log, bigdb, big, False)
    print(f"verify {big:,}-event stream:            {v:>10,.0f} ev/s  (target >= 400,000)")
    print(
        f"verify whole log {big:,} (+strays, blobs): {whole:>8,.0f} ev/s  "
        f"= {whole / v:.2f} x the stream figure (target >= 300,000)"
    )
    speak, peak = (trio.run(verify_log, db, k, True) for db, k in ((small, small_n), (bigdb, big)))
    print(
        f"peak traced memory whole-log verify: {speak / 1e6:.1f} MB at {small_n:,} events, "
        f"{peak / 1e6:.1f} MB at {big:,} (ratio {peak / speak:.2f}; flat = ~1)"
    )


BLOB = b"the bench's one blob: every digest the session names"
BLOB_DIGEST = el.blob_digest(BLOB)


def session_turn(turn: int) -> list[ev.Event]:
    """One turn as the runtime writes it (11 events): a prompt, an answer with two
    calls, a read and an approved script."""
    read, run = f"call_{turn}_0", f"call_{turn}_1"
    digest = BLOB_DIGEST
    response = ModelResponse(
        parts=(
            TextPart(text="Reading the guide, then running the check." * 2),
            ToolCall(id=read, name="skills.read", arguments='{"path":"references/guide.md"}'),
            ToolCall(id=run, name="skills.run_script", arguments='{"path":"scripts/check.py"}'),
        ),
        stop_reason="tool_use",
        usage=Usage(input_tokens=1200, output_tokens=40),
    )
    return [
        ev.PromptRendered(
            turn=turn, request_hash=digest, message_count=2 * turn,
            new_message_digests=(digest, digest), tail_digest=digest,
        ),
        ev.ModelResponded(turn=turn, response=response, duration_ms=812),
        ev.ToolCalled(turn=turn, call_id=read, tool="skills.read",
                      arguments='{"path":"references/guide.md"}', skills=("alpha",),
                      effect="pure"),
        ev.ToolCalled(turn=turn, call_id=run, tool="skills.run_script",
                      arguments='{"path":"scripts/check.py"}', skills=("alpha",)),
        ev.ResourceRead(call_id=read, skill="alpha", path="references/guide.md", size=912,
                        digest=digest),
        ev.ToolCompleted(call_id=read, tool="skills.read", is_error=False,
                         content="The guide says: " + "check every row. " * 12, duration_ms=1),
        ev.ApprovalRequested(call_id=run, tool="skills.run_script",
                             action="run scripts/check.py", skill="alpha", tier="user"),
        ev.ApprovalResolved(call_id=run, approved=True, decided_by="reviewer"),
        ev.ScriptStarted(call_id=run, skill="alpha", path="scripts/check.py", args=(),
                         sandbox="required", network=False, timeout_ms=30_000),
        ev.ScriptExecuted(call_id=run, skill="alpha", path="scripts/check.py", args=(),
                          exit_code=0, duration_ms=23, stdout_digest=digest,
                          stderr_digest=digest, sandbox="bwrap", network=False,
                          timed_out=False, truncated=False),
        ev.ToolCompleted(call_id=run, tool="skills.run_script", is_error=False,
                         content='{"exit_code":0,"stdout":"2 rows invalid"}', duration_ms=27),
    ]  # fmt: skip


def session_events(n: int) -> list[ev.Event]:
    """One session of ``n`` events: start, catalog, task, turns, padded with messages."""
    start = ev.SessionStarted(
        agent="bench", provider="skillog.scripted", model="m", max_tokens=4096,
        max_turns=10**9, max_active_skills=3, file_access=False, policy=ev.PolicyConfig(),
    )  # fmt: skip
    out: list[ev.Event] = [start, ev.CatalogSnapshot(skills=()), ev.UserMessage(text="go")]
    turn = 0
    while len(out) + 11 <= n:
        turn += 1
        out += session_turn(turn)
    out += [ev.UserMessage(text="more")] * (n - len(out))
    return out


async def bulk_session(path: Path, n: int, batch: int = 10_000) -> None:
    """A log holding one ``n``-event session (the grammar's worst case: one stream)."""
    bodies = session_events(n)
    async with el.open_sqlite_store(path) as store:
        for start in range(0, n, batch):
            chunk = enumerate(bodies[start : start + batch], start)
            evs = [ev.CODEC.encode(b, recorded_at=i) for i, b in chunk]
            blobs = [BLOB] if start == 0 else []
            await store.append("session", evs, expected_seq=start, blobs=blobs)


async def verify_grammar(path: Path, n: int, mode: str, trace: bool) -> float:
    """Events/s of a whole-log verify of the session log: chains only (``plain``), with
    the session grammar (``grammar``), or the runtime's verdict (``verdict``: grammar
    and every referenced blob); with ``trace``, its peak traced bytes."""
    async with el.open_sqlite_store(path, readonly=True) as store:
        gc.collect()
        if trace:
            tracemalloc.start()
        t = time.perf_counter()
        if mode == "verdict":
            report = await verdict(store)
        else:
            report = await el.verify(store, grammar=session_grammar if mode == "grammar" else None)
        dt = time.perf_counter() - t
        assert report.ok and report.events == n, report.faults
        if trace:
            peak = tracemalloc.get_traced_memory()[1]
            tracemalloc.stop()
            return float(peak)
        return rate(n, dt)


def print_grammar(d: Path, big: int) -> None:
    """verify with the session grammar beside plain verify, same session log, same run."""
    small_n = big // 10
    sessdb, small = fresh(d, "session.db"), fresh(d, "session_small.db")
    trio.run(bulk_session, sessdb, big)
    trio.run(bulk_session, small, small_n)
    plain = max(trio.run(verify_grammar, sessdb, big, "plain", False) for _ in range(2))
    checked = max(trio.run(verify_grammar, sessdb, big, "grammar", False) for _ in range(2))
    full = max(trio.run(verify_grammar, sessdb, big, "verdict", False) for _ in range(2))
    print(f"verify {big:,}-event session log, chains only:  {plain:>10,.0f} ev/s")
    print(
        f"verify {big:,}-event session log + grammar:    {checked:>10,.0f} ev/s  "
        f"= {checked / plain:.2f} x chains only (target >= 300,000)"
    )
    print(
        f"verdict {big:,}-event session log (+ blob refs): {full:>8,.0f} ev/s  "
        f"= {full / checked:.2f} x with grammar (target >= 300,000)"
    )
    sizes = ((small, small_n), (sessdb, big))
    speak, peak = (trio.run(verify_grammar, db, k, "verdict", True) for db, k in sizes)
    print(
        f"peak traced memory of the verdict:   {speak / 1e6:.1f} MB at {small_n:,} events, "
        f"{peak / 1e6:.1f} MB at {big:,} (ratio {peak / speak:.2f}; flat = ~1)"
    )


def reduce(state: int, b: Noted) -> int:
    return state + b.n


async def verify_and_fold(path: Path, n: int, trace: bool) -> tuple[float, float]:
    """Events/s of verify and of a cold fold; with ``trace``, their peak traced bytes."""
    out: list[float] = []
    async with el.open_sqlite_store(path, readonly=True) as store:
        for job in ("verify", "fold"):
            gc.collect()
            if trace:
                tracemalloc.start()
            t = time.perf_counter()
            if job == "verify":
                count, fault = await el.verify_stream(store, "big")
                assert fault is None and count == n, fault
            else:
                folded = await el.fold_stream(store, "big", reduce, 0, decode=CODEC.decode)
                assert folded.state == n * (n - 1) // 2
            dt = time.perf_counter() - t
            if trace:
                out.append(tracemalloc.get_traced_memory()[1])
                tracemalloc.stop()
            else:
                out.append(rate(n, dt))
    return out[0], out[1]


# -- eventsourcing ------------------------------------------------------------------


def es_app(path: Path):  # type: ignore[no-untyped-def]
    from eventsourcing.application import Application

    return Application(
        env={"PERSISTENCE_MODULE": "eventsourcing.sqlite", "SQLITE_DBNAME": str(path)}
    )


_ES_CLS: list[type] = []


def es_aggregate_cls():  # type: ignore[no-untyped-def]
    if _ES_CLS:
        return _ES_CLS[0]
    from eventsourcing.domain import Aggregate, event

    class Item(Aggregate):
        @event("Created")
        def __init__(self) -> None:
            self.total = 0

        @event("Noted")
        def note(self, n: int, text: str) -> None:
            self.total += n

    _ES_CLS.append(Item)
    return Item


def es_save_every_event(path: Path, n: int) -> float:
    app, item_cls = es_app(path), es_aggregate_cls()
    item = item_cls()
    app.save(item)
    t = time.perf_counter()
    for i in range(n):
        item.note(n=i, text=TEXT)
        app.save(item)
    return rate(n, time.perf_counter() - t)


def es_get(path: Path, n: int) -> float:
    app, item_cls = es_app(path), es_aggregate_cls()
    item = item_cls()
    for start in range(0, n, 10_000):
        for i in range(start, min(n, start + 10_000)):
            item.note(n=i, text=TEXT)
        app.save(item)
    t = time.perf_counter()
    got = app.repository.get(item.id)
    r = rate(n, time.perf_counter() - t)
    assert got.total == n * (n - 1) // 2
    return r


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--quick", action="store_true", help="small sizes (smoke test)")
    ap.add_argument("--dir", type=Path, help="where to put the databases (default: a temp dir)")
    ap.add_argument("--verify-only", action="store_true", help="only the verify figures")
    args = ap.parse_args()
    seq_n = 300 if args.quick else 3_000
    streams, per = (64, 20) if args.quick else (64, 1_000)
    big = 20_000 if args.quick else 1_000_000
    es_n = 300 if args.quick else 3_000
    with tempfile.TemporaryDirectory(dir=args.dir) as tmp:
        d = Path(tmp)
        print(
            f"eventlog bench ({'quick' if args.quick else 'full'}), "
            f"sqlite {sqlite3.sqlite_version}, "
            f"{os.cpu_count()} cpus, dir {d}"
        )
        if args.verify_only:
            bigdb, small = fresh(d, "big.db"), fresh(d, "small.db")
            trio.run(bulk, bigdb, big)
            trio.run(bulk, small, big // 10)
            print_verify(bigdb, big, small, big // 10)
            print_grammar(d, big)
            return
        floor = raw_floor(fresh(d, "raw.db"), seq_n)
        off_loop = raw_floor(fresh(d, "raw_off.db"), seq_n, off_loop=True)
        seq = trio.run(sequential, fresh(d, "seq.db"), seq_n)
        print(f"raw sqlite3 floor, 1 txn/row, FULL:      {floor:>10,.0f} rows/s")
        print(
            f"  the same, awaited on a worker thread:  {off_loop:>10,.0f} rows/s  "
            f"= {off_loop / floor:.2f} x floor (the cost of leaving the event loop)"
        )
        print(
            f"sequential append, awaited, FULL:        {seq:>10,.0f} ev/s  "
            f"= {seq / floor:.2f} x floor (target >= 0.70)"
        )
        writer_alone = raw_events_commits(fresh(d, "raw_conc.db"), streams, per, streams)
        conc = trio.run(concurrent, fresh(d, "conc.db"), streams, per)
        es_save = es_save_every_event(fresh(d, "es_save.db"), es_n)
        print(
            f"concurrent {streams}x{per}, each awaited:      {conc:>10,.0f} ev/s  "
            f"(target >= 50,000)"
        )
        print(
            f"  raw rows, {streams} per txn, no event loop: {writer_alone:>10,.0f} ev/s  "
            "(the writer's SQLite work alone)"
        )
        print(
            f"eventsourcing save after every event:     {es_save:>10,.0f} ev/s  "
            f"-> skillog concurrent = {conc / es_save:.1f} x (target >= 10)"
        )
        bigdb = fresh(d, "big.db")
        raw_bulk = raw_events_commits(fresh(d, "raw_bulk.db"), 1, big, 10_000)
        b = trio.run(bulk, bigdb, big)
        print(f"bulk append {big:,} (encode+hash+insert): {b:>10,.0f} ev/s  (target >= 200,000)")
        print(
            f"  raw rows, 10,000 per txn, no encode/hash: {raw_bulk:>8,.0f} ev/s  "
            f"(skillog bulk = {b / raw_bulk:.2f} x)"
        )
        imp = trio.run(export_import, bigdb, fresh(d, "imp.db"), d / "dump.jsonl", big)
        print(f"JSONL import {big:,} (parse+hash+insert): {imp:>10,.0f} ev/s")
        _, f = trio.run(verify_and_fold, bigdb, big, False)
        print(f"cold fold {big:,} (read+decode+reduce): {f:>10,.0f} ev/s  (target >= 250,000)")
        g = es_get(fresh(d, "es_get.db"), big)
        print(
            f"eventsourcing repository.get {big:,}:    {g:>10,.0f} ev/s  "
            f"-> skillog fold = {f / g:.1f} x (target >= 6)"
        )
        small_n = big // 10
        small = fresh(d, "small.db")
        trio.run(bulk, small, small_n)
        print_verify(bigdb, big, small, small_n)
        print_grammar(d, big)
        svpeak, sfpeak = trio.run(verify_and_fold, small, small_n, True)
        vpeak, fpeak = trio.run(verify_and_fold, bigdb, big, True)
        print(
            f"peak traced memory verify: {svpeak / 1e6:.1f} MB at {small_n:,} events, "
            f"{vpeak / 1e6:.1f} MB at {big:,} (ratio {vpeak / svpeak:.2f}; flat = ~1)"
        )
        print(
            f"peak traced memory fold:   {sfpeak / 1e6:.1f} MB at {small_n:,} events, "
            f"{fpeak / 1e6:.1f} MB at {big:,} (ratio {fpeak / sfpeak:.2f}; flat = ~1)"
        )


if __name__ == "__main__":
    main()
