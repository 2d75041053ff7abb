"""A live writer for the verify-under-load tests: a fleet worker process driving the
sessions it keeps queueing, until the file STOP exists.

usage: catalog_writer.py DB STOP
Prints ``ready`` once its first session ended, and at the end how many it queued.
"""

from __future__ import annotations

import sys

import trio

from orchestrator import Agent
from orchestrator._catalog import open_log
from orchestrator._fleet import Worker, queue_session
from orchestrator.adapters import ScriptedModel


def agent(*_: object) -> Agent:
    return Agent(model=ScriptedModel([{"text": "done"}]), model_name="m")


async def main(db: str, stop_file: str) -> None:
    stop = trio.Event()
    async with open_log(db) as store:
        worker = Worker(store, agent, name="live", poll_ms=5)
        queued = 0
        async with trio.open_nursery() as nursery:
            nursery.start_soon(worker.run, stop)
            while not await trio.Path(stop_file).exists():
                await queue_session(store, agent(), f"task {queued}", session_id=f"live{queued}")
                queued += 1
                if queued == 1:
                    while not worker.finished:  # noqa: ASYNC110
                        await trio.sleep(0.01)
                    print("ready", flush=True)
                await trio.sleep(0.002)
            stop.set()
    print(queued, flush=True)


if __name__ == "__main__":
    trio.run(main, sys.argv[1], sys.argv[2])
