"""``skillog mcp serve`` that also reports its own CPU time per recorded call: run by
bench/mcp_serve_ts.py as the server command.

    python -P bench/mcp_serve_cpu.py OUT.json [skillog mcp serve arguments ...]

From the durable commit of the third call's outcome (after the bench's ``skills.load``
and its warm-up read) to the last, it counts the commits that hold a
``tool.completed`` and the process's CPU time (every thread: the trio loop, the SQLite
writer, the kernel's share of the fsyncs), and writes both to OUT.json at exit. CPU
time, unlike the client's wall clock, hardly moves with the load of the machine.
"""

from __future__ import annotations

import atexit
import json
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from eventlog import Event, NewEvent
from eventlog._sqlite import SqliteStore
from orchestrator.cli._main import main

FIRST = 3
"""The outcome commit that opens the window: the first call the bench times."""


def count(out: Path) -> None:
    original = SqliteStore.append
    seen = {"outcomes": 0, "start": 0.0, "end": 0.0}

    async def append(
        self: SqliteStore, stream: str, events: Sequence[NewEvent], **kwargs: Any
    ) -> tuple[Event, ...]:
        committed = await original(self, stream, events, **kwargs)
        if any(e.type == "tool.completed" for e in events):
            seen["outcomes"] += 1
            now = time.process_time()
            if seen["outcomes"] == FIRST:
                seen["start"] = now
            seen["end"] = now
        return committed

    def report() -> None:
        calls = max(0, int(seen["outcomes"]) - FIRST)
        cpu = seen["end"] - seen["start"]
        out.write_text(json.dumps({"calls": calls, "cpu_s": cpu}))

    SqliteStore.append = append  # type: ignore[method-assign]
    atexit.register(report)


if __name__ == "__main__":
    count(Path(sys.argv[1]))
    sys.exit(main(["mcp", "serve", *sys.argv[2:]]))
