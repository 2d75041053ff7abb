"""SIGKILL a writer mid-stream, repeatedly: every acknowledged event survives."""

from __future__ import annotations

import hashlib
import os
import random
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from eventlog import open_sqlite_store, verify

ROOT = Path(__file__).parents[2]
WRITER = """
import sys, trio, eventlog as el
async def main():
    async with el.open_sqlite_store(sys.argv[1]) as s:
        head = await s.head("crash")
        seq = 0 if head is None else head.seq + 1
        while True:
            n = 1 + seq % 3
            evs = [el.NewEvent(type="t", body=b'{"i":%d}' % (seq + k), recorded_at=seq + k)
                   for k in range(n)]
            await s.append("crash", evs, expected_seq=seq, blobs=[b"blob-%d" % seq])
            seq += n
            print(seq - 1, flush=True)
trio.run(main)
"""


def kill_after_some_acks(db: Path, rng: random.Random) -> int:
    """Start a writer, SIGKILL it after a random number of acks; the last acked seq."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.Popen(
        [sys.executable, "-c", WRITER, str(db)], stdout=subprocess.PIPE, env=env, text=True
    )
    assert proc.stdout is not None
    last = -1
    for _ in range(rng.randint(5, 60)):
        line = proc.stdout.readline()
        if not line:
            break
        last = int(line)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait(timeout=10)
    proc.stdout.close()
    return last


@pytest.mark.slow
async def test_sigkill_loses_no_acknowledged_event(tmp_path: Path) -> None:
    db = tmp_path / "crash.db"
    rng = random.Random(7)
    acked = -1
    for _ in range(4):
        acked = max(acked, kill_after_some_acks(db, rng))
        async with open_sqlite_store(db) as store:
            head = await store.head("crash")
            assert head is not None and head.seq >= acked
            report = await verify(store)
            assert report.ok, str(report.fault)
            events = [e async for e in store.read("crash")]
            assert [e.seq for e in events] == list(range(head.seq + 1))
            assert await store.has_blob(hashlib.sha256(b"blob-0").hexdigest())
    assert acked > 20
