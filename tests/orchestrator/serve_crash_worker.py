"""``skillog mcp serve`` that kills itself (SIGKILL) at one commit of its session: the
crash points of a served call (test_mcp_serve_crash.py).

usage: serve_crash_worker.py WHEN N [skillog mcp serve arguments ...]
  WHEN  before: die as the N-th commit that holds a ``tool.completed`` is about to be
        sent to the store (nothing of it durable);
        durable: die as that commit becomes durable, in the store's writer thread,
        before the call's reply can leave (the served-call lane writes it there)
        after: die as soon as that commit is durable, before the session folds it (a
        reply the lane wrote as the commit became durable has left)
        replied: die as soon as the N-th call's result was written to the client (the
        next turn's prompt, deferred to the next call's commit, is not in the log)
"""

from __future__ import annotations

import json
import os
import signal
import sys
from collections.abc import Sequence
from typing import Any

from mcp.shared.message import SessionMessage
from mcp.types import JSONRPCResponse

from eventlog import Event, NewEvent
from eventlog._sqlite import SqliteStore
from orchestrator._streams import is_session_stream
from orchestrator.cli._main import main
from orchestrator.mcp_server._stdio import LineWriter


def crash_at(when: str, n: int) -> None:
    if when == "replied":
        crash_after_reply(n)
        return
    original = SqliteStore.append
    seen = 0

    async def append(
        self: SqliteStore, stream: str, events: Sequence[NewEvent], **kwargs: Any
    ) -> tuple[Event, ...]:
        nonlocal seen
        if not is_session_stream(stream) or all(e.type != "tool.completed" for e in events):
            return await original(self, stream, events, **kwargs)
        seen += 1
        if seen == n and when == "before":
            os.kill(os.getpid(), signal.SIGKILL)
        if seen == n and when == "durable":
            kwargs["on_durable"] = lambda: os.kill(os.getpid(), signal.SIGKILL)
        committed = await original(self, stream, events, **kwargs)
        if seen == n and when == "after":
            os.kill(os.getpid(), signal.SIGKILL)
        return committed

    SqliteStore.append = append  # type: ignore[method-assign]


def crash_after_reply(n: int) -> None:
    original = LineWriter.send
    seen = 0

    async def send(self: LineWriter, item: SessionMessage, /) -> None:
        nonlocal seen
        await original(self, item)
        message = item.message
        if isinstance(message, JSONRPCResponse) and "content" in message.result:
            seen += 1
            if seen == n:
                os.kill(os.getpid(), signal.SIGKILL)

    def replied(line: bytes) -> None:
        nonlocal seen
        if line and "content" in json.loads(line).get("result", {}):
            seen += 1
            if seen == n:
                os.kill(os.getpid(), signal.SIGKILL)

    # The served-call lane's replies: from the trio thread, or the store's writer.
    def write_soon(self: LineWriter, line: bytes) -> None:
        original_soon(self, line)
        replied(line)

    def write_now(self: LineWriter, line: bytes) -> bool:
        written = original_now(self, line)
        if written:
            replied(line)
        return written

    original_soon, original_now = LineWriter.write_soon, LineWriter.write_now
    LineWriter.send = send  # type: ignore[method-assign]
    LineWriter.write_soon = write_soon  # type: ignore[method-assign]
    LineWriter.write_now = write_now  # type: ignore[method-assign]


if __name__ == "__main__":
    crash_at(sys.argv[1], int(sys.argv[2]))
    sys.argv = ["skillog", "mcp", "serve", *sys.argv[3:]]
    sys.exit(main())
