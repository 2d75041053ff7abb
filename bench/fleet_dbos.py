"""DBOS's queue, the comparison in bench/fleet.py (issue 25): trivial workflows (one
step each) enqueued on a PostgreSQL server, then drained by 1, 2, 4 or 8 worker
processes, each a launched DBOS app listening on the queue with the same per-process
concurrency as skillog's workers. Loaded by bench/fleet.py (``pip install -e
'.[bench]'`` installs ``dbos``); not a module of the package.
"""

from __future__ import annotations

import os
import time
from typing import Any

import psycopg
from dbos import DBOS, DBOSConfig

QUEUE = "bench"


@DBOS.step()
def step(i: int) -> int:
    return i


@DBOS.workflow()
def trivial(i: int) -> int:
    return step(i)


def _launch(dsn: str, executor: str, concurrency: int, polling_ms: int, *, listen: bool) -> Any:
    config: DBOSConfig = {
        "name": "fleet-bench",
        "system_database_url": dsn,
        "executor_id": executor,
        "log_level": "WARNING",
    }
    DBOS(config=config)
    if not listen:
        DBOS.listen_queues([])
    DBOS.launch()  # a queue is registered (in the database) by a launched DBOS
    return DBOS.register_queue(
        QUEUE, worker_concurrency=concurrency, polling_interval_sec=polling_ms / 1000
    )


def enqueue(dsn: str, count: int) -> None:
    """(In a process of its own) create DBOS's tables and enqueue ``count`` workflows."""
    queue = _launch(dsn, "enqueuer", 1, 1000, listen=False)
    for i in range(count):
        queue.enqueue(trivial, i)
    DBOS.destroy()


def work(dsn: str, name: str, concurrency: int, polling_ms: int) -> None:
    """(In a process of its own) run workflows from the queue until killed."""
    _launch(dsn, name, concurrency, polling_ms, listen=True)
    while True:
        time.sleep(3600)


def finished(dsn: str, count: int) -> tuple[int, int] | None:
    """(first, last) completion in ms once ``count`` workflows succeeded, else None."""
    with psycopg.connect(dsn) as conn:
        row = conn.execute(
            b"SELECT count(*), min(updated_at), max(updated_at) FROM dbos.workflow_status "
            b"WHERE status = 'SUCCESS' AND queue_name = 'bench'"
        ).fetchone()
    return None if row is None or row[0] < count else (row[1], row[2])


def run_forked(fn: Any, *args: Any) -> int:
    pid = os.fork()
    if pid == 0:
        try:
            fn(*args)
        finally:
            os._exit(0)
    return pid
