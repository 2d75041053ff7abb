"""A database's one writer thread: queued requests, served in batches (group commit).

Appends from any number of trio tasks are queued; the writer takes everything queued
while the previous commit was running and hands it to the store's ``commit_appends`` as
one batch (one transaction, one fsync or round trip). Each append's ``expected_seq`` is
still checked on its own, so a conflicting append fails alone. The SQLite and the
PostgreSQL writers subclass :class:`BatchWriter` with their own transactions.
"""

from __future__ import annotations

import contextlib
import logging
import queue
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import trio

from ._errors import StoreError
from ._types import Event, NewEvent

log = logging.getLogger(__name__)

MAX_BATCH = 4096
_STOP = object()


@dataclass(eq=False, slots=True)
class Request:
    """One unit of work for the writer; ``task`` is rescheduled when it has an outcome."""

    task: trio.lowlevel.Task | None = None
    result: Any = None
    error: BaseException | None = None


@dataclass(eq=False, slots=True)
class AppendRequest(Request):
    stream: str = ""
    events: Sequence[NewEvent] = ()
    expected_seq: int = 0
    blobs: Sequence[bytes] = ()
    on_durable: Callable[[], None] | None = None


@dataclass(eq=False, slots=True)
class CallRequest(Request):
    """Run ``fn(conn)`` inside its own write transaction (imports, snapshots)."""

    fn: Callable[[Any], Any] | None = None
    doing: str = "writing"


def call_on_durable(fn: Callable[[], None]) -> None:
    """Call an append's ``on_durable`` (its commit is durable). It is the appender's
    to handle what goes wrong in it: an exception is logged, never the append's."""
    try:
        fn()
    except Exception:
        log.exception("an append's on_durable callback raised; the append is committed")


def _no_abort(_: Any) -> trio.lowlevel.Abort:
    return trio.lowlevel.Abort.FAILED


async def wait_for_outcome(request: Request) -> None:
    """Park the current task until the writer has delivered ``request``'s outcome.

    Uncancellable, like a shielded scope: once queued the write happens, so the caller
    learns its outcome rather than leaving "maybe committed" behind (a pending
    cancellation is raised at the caller's next checkpoint). The writer's work is
    bounded (busy or statement timeouts, bounded reconnects), so this cannot hang. Lower
    level than a ``trio.Event`` per append, which showed up in profiles of 64 concurrent
    writers.
    """
    await trio.lowlevel.wait_task_rescheduled(_no_abort)


class BatchWriter:
    """The queue and the thread's loop; subclasses own the connection and transactions.

    ``where`` names the database in errors. :meth:`run` is the thread's body.
    """

    def __init__(
        self, where: str, token: trio.lowlevel.TrioToken, on_commit: Callable[[], None]
    ) -> None:
        self.where = where
        self._token = token
        self._on_commit = on_commit
        self._queue: queue.SimpleQueue[object] = queue.SimpleQueue()
        self.closed = False
        self.on_events: Callable[[list[Event]], None] | None = None
        """Called in the trio thread with the events each batch committed, in position
        order, just before ``on_commit`` (the SQLite store keeps them for its follows)."""

    async def submit(self, request: Request) -> Any:
        """Queue ``request`` from the trio thread and wait for its outcome."""
        if self.closed:
            raise StoreError(f"{self.where}: the store is closed")
        request.task = trio.lowlevel.current_task()
        self._queue.put(request)
        # No checkpoint between the put and the wait: the delivery runs in this trio
        # thread, so it always finds the task parked.
        await wait_for_outcome(request)
        if request.error is not None:
            raise request.error
        return request.result

    def stop(self) -> None:
        self.closed = True
        self._queue.put(_STOP)

    def run(self) -> None:
        """Serve requests until :meth:`stop`; always calls :meth:`close`."""
        try:
            stopping = False
            while not stopping:
                batch: list[Request] = []
                item = self._queue.get()
                while True:
                    if item is _STOP:
                        stopping = True
                        break
                    assert isinstance(item, Request)
                    batch.append(item)
                    if len(batch) >= MAX_BATCH:
                        break
                    try:
                        item = self._queue.get_nowait()
                    except queue.Empty:
                        break
                try:
                    self._serve(batch)
                except BaseException as e:  # pragma: no cover - never leave a caller hanging
                    for r in batch:
                        r.error = r.error or StoreError(f"{self.where}: {e!r}")
                    self._deliver(batch)
                    raise
        finally:
            self.close()

    def _serve(self, batch: list[Request]) -> None:
        i = 0
        while i < len(batch):
            j = i
            while j < len(batch) and isinstance(batch[j], AppendRequest):
                j += 1
            if j > i:
                self.commit_appends(batch[i:j])  # type: ignore[arg-type]
                i = j
            else:
                self.call(batch[i])  # type: ignore[arg-type]
                i += 1
        self._deliver(batch)

    def _deliver(self, batch: list[Request]) -> None:
        for r in batch:
            if isinstance(r, AppendRequest) and r.on_durable is not None and r.error is None:
                call_on_durable(r.on_durable)
        on_events = self.on_events
        # Gathered here, off the trio thread: what the batch's appends committed.
        events = (
            [e for r in batch if isinstance(r, AppendRequest) and r.error is None and r.result
             for e in r.result]
            if on_events is not None
            else []
        )  # fmt: skip

        def finish() -> None:
            reschedule = trio.lowlevel.reschedule
            for r in batch:
                if r.task is not None:
                    reschedule(r.task)
            if events and on_events is not None:
                on_events(events)  # before on_commit: a follower it wakes finds them
            self._on_commit()

        # RunFinishedError: the trio run is gone, so nobody is left waiting.
        with contextlib.suppress(trio.RunFinishedError):
            self._token.run_sync_soon(finish)

    # -- what a store's writer provides ----------------------------------------------

    def commit_appends(self, requests: Sequence[AppendRequest]) -> None:
        """Commit the appends (one transaction if possible); set each result or error."""
        raise NotImplementedError

    def call(self, request: CallRequest) -> None:
        """Run ``request.fn`` in one write transaction; set its result or error."""
        raise NotImplementedError

    def close(self) -> None:
        """Release the connection (the thread is ending)."""
        raise NotImplementedError
