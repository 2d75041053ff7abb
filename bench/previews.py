"""Previews of streamed answers: what they cost the session, and how late they arrive.

    python bench/previews.py [--n N] [--pg]

Prints, from one run:
  - publish: the worker's cost per delta (what the agent loop pays), for the in-process
    board with one follower, the side file's and NOTIFY's queues;
  - delivery: publish -> a follower's receipt, p50/p99, through the board (same
    process), the SQLite side file (writer and reader on two connections, as two
    processes would be), and with --pg PostgreSQL NOTIFY (a throwaway cluster);
  - the log's own appends (durable SQLite, synchronous=FULL) while a model streams a
    delta every millisecond, with those deltas going to a side-file writer vs nowhere:
    previews must not slow the session (target: p50 within 10%).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import trio

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from eventlog import NewEvent, open_sqlite_store
from orchestrator._previews import (
    NotifyReader,
    NotifyWriter,
    Preview,
    PreviewBoard,
    SideFileReader,
    SideFileWriter,
)


def preview(n: int) -> Preview:
    return Preview(session="s", turn=1, n=n, kind="text", index=0, text="a token ")


def ms(values: list[float]) -> str:
    values = sorted(values)
    p99 = values[min(len(values) - 1, int(len(values) * 0.99))]
    return f"p50 {statistics.median(values) * 1000:7.2f} ms   p99 {p99 * 1000:7.2f} ms"


def publish_cost(n: int) -> None:
    board = PreviewBoard(per_follower=n + 1)
    sinks: dict[str, Any] = {
        "board, 1 follower": board.publish,
        "side file queue": SideFileWriter(Path(tempfile.mkdtemp()) / "x.db").publish,
        "NOTIFY queue": NotifyWriter(None).publish,  # type: ignore[arg-type]
    }
    items = [preview(i) for i in range(n)]

    async def main() -> None:
        with board.following("s"):
            for name, sink in sinks.items():
                start = time.perf_counter()
                for p in items:
                    sink(p)
                took = time.perf_counter() - start
                print(f"  publish, {name:18}: {took / n * 1e6:6.2f} us per delta")

    trio.run(main)


async def delivery(writer: Any, reader: Any, board: PreviewBoard, n: int) -> list[float]:
    """Publish ``n`` previews 5 ms apart; each one's publish -> receipt time."""
    sent: dict[int, float] = {}
    late: list[float] = []
    async with trio.open_nursery() as nursery:
        if writer is not None:
            await nursery.start(writer.run)
        with board.following("s") as seen:
            if reader is not None:
                await nursery.start(reader.run)
            await trio.sleep(0.3)  # the reader knows where it starts
            publish = board.publish if writer is None else writer.publish

            async def produce() -> None:
                for i in range(1, n + 1):
                    sent[i] = time.perf_counter()
                    publish(preview(i))
                    await trio.sleep(0.005)

            nursery.start_soon(produce)
            with trio.move_on_after(30):
                while len(late) < n:
                    got = await seen.receive()
                    late.append(time.perf_counter() - sent[got.n])
        nursery.cancel_scope.cancel()
    if len(late) < n:
        print(f"  ({n - len(late)} of {n} previews lost)")
    return late


async def appends(db: Path, n: int, beside: bool) -> list[float]:
    times: list[float] = []
    writer = SideFileWriter(db)
    async with open_sqlite_store(db) as store, trio.open_nursery() as nursery:
        if beside:
            await nursery.start(writer.run)
        # The model streams a delta every millisecond either way; only where it goes
        # differs (the side file, or nowhere).
        publish = writer.publish if beside else (lambda p: None)

        async def stream() -> None:
            i = 0
            while True:
                i += 1
                publish(preview(i))
                await trio.sleep(0.001)

        nursery.start_soon(stream)
        for seq in range(n):
            event = NewEvent(type="bench.noted", body=b'{"n":%d}' % seq, recorded_at=seq)
            start = time.perf_counter()
            await store.append("bench", [event], expected_seq=seq)
            times.append(time.perf_counter() - start)
            await trio.sleep(0.002)
        nursery.cancel_scope.cancel()
    return times


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--n", type=int, default=400, help="previews per measurement (400)")
    ap.add_argument("--pg", action="store_true", help="also PostgreSQL NOTIFY")
    args = ap.parse_args()
    print(f"previews: {args.n} per measurement")
    publish_cost(20_000)
    tmp = Path(tempfile.mkdtemp())

    board = PreviewBoard(per_follower=args.n + 1)
    print(f"  delivery, board (in process): {ms(trio.run(delivery, None, None, board, args.n))}")
    db = tmp / "side.db"
    board = PreviewBoard(per_follower=args.n + 1)
    side = trio.run(delivery, SideFileWriter(db), SideFileReader(db, board), board, args.n)
    print(f"  delivery, SQLite side file:   {ms(side)}")
    if args.pg:
        from postgres import Server  # bench/postgres.py: a throwaway cluster

        from eventlog import open_postgres_store

        server = Server(None)
        dsn = server.database("previews")
        try:

            async def notify() -> list[float]:
                async with open_postgres_store(dsn) as a, open_postgres_store(dsn) as b:
                    board = PreviewBoard(per_follower=args.n + 1)
                    return await delivery(NotifyWriter(a), NotifyReader(b, board), board, args.n)

            print(f"  delivery, PostgreSQL NOTIFY:  {ms(trio.run(notify))}")
        finally:
            server.close()

    alone: list[float] = []
    beside: list[float] = []
    for round_ in range(3):  # alternated: the machine's noise falls on both
        alone += trio.run(appends, tmp / f"alone{round_}.db", args.n, False)
        beside += trio.run(appends, tmp / f"beside{round_}.db", args.n, True)
    print(f"  log appends, alone:                 {ms(alone)}")
    print(f"  log appends, side-file writer beside: {ms(beside)}")
    ratio = statistics.median(beside) / statistics.median(alone)
    print(f"  ratio of p50s: {ratio:.2f}x (target <= 1.10)")


if __name__ == "__main__":
    main()
