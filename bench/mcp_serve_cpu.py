"""``skillog mcp serve`` that also reports its own CPU time per recorded call: run by
bench/mcp_serve_ts.py as the server command.

    python -P bench/mcp_serve_cpu.py OUT.json [skillog mcp serve arguments ...]

From the durable commit of the third call's outcome (after the bench's ``skills.load``
and its warm-up read) to the last, it counts the commits that hold a
``tool.completed``, every commit to the session's stream, the process's CPU time
(every thread: the trio loop, the SQLite writer, the kernel's share of the fsyncs), the
trio thread's own CPU time and trio's scheduler passes (each an I/O wait, as
bench/mcp.py counts them), and writes them to OUT.json at exit. CPU time and counts,
unlike the client's wall clock, hardly move with the load of the machine.
"""

from __future__ import annotations

import atexit
import json
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import trio

from eventlog import Event, NewEvent
from eventlog._sqlite import SqliteStore
from orchestrator._streams import is_session_stream
from orchestrator.cli._main import main

FIRST = 3
"""The outcome commit that opens the window: the first call the bench times."""


class _Passes(trio.abc.Instrument):
    """Counts trio's scheduler passes (each an I/O wait)."""

    def __init__(self) -> None:
        self.passes = 0

    def before_io_wait(self, timeout: float) -> None:
        self.passes += 1


def count(out: Path) -> None:
    original = SqliteStore.append
    passes = _Passes()
    seen = {"outcomes": 0, "commits": 0}
    start: dict[str, float] = {}
    end: dict[str, float] = {}

    async def append(
        self: SqliteStore, stream: str, events: Sequence[NewEvent], **kwargs: Any
    ) -> tuple[Event, ...]:
        committed = await original(self, stream, events, **kwargs)
        if is_session_stream(stream):
            seen["commits"] += 1
        if any(e.type == "tool.completed" for e in events):
            seen["outcomes"] += 1
            now = {"cpu": time.process_time(), "trio": time.thread_time()}
            now["passes"], now["commits"] = passes.passes, seen["commits"]
            if seen["outcomes"] == FIRST:
                start.update(now)
                trio.lowlevel.add_instrument(passes)
            end.update(now)
        return committed

    def report() -> None:
        calls = max(0, seen["outcomes"] - FIRST)
        figures = {k: end[k] - start[k] for k in start}
        out.write_text(
            json.dumps(
                {
                    "calls": calls,
                    "cpu_s": figures.get("cpu", 0.0),
                    "trio_s": figures.get("trio", 0.0),
                    "passes": figures.get("passes", 0.0),
                    "commits": figures.get("commits", 0.0),
                }
            )
        )

    SqliteStore.append = append  # type: ignore[method-assign]
    atexit.register(report)


if __name__ == "__main__":
    count(Path(sys.argv[1]))
    sys.exit(main(["mcp", "serve", *sys.argv[2:]]))
