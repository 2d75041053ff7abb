"""A database's one writer thread: queued requests, served in batches (group commit).

Appends from any number of trio tasks are queued; the writer takes everything queued
while the previous commit was running and hands it to the store's ``commit_appends`` as
one batch (one transaction, one fsync or round trip). Each append's ``expected_seq`` is
still checked on its own, so a conflicting append fails alone. The SQLite and the
PostgreSQL writers subclass :class:`BatchWriter` with their own transactions.

How an outcome reaches the appender: the first appender to find nobody watching
watches the writer's wake pipe itself, so the commit it waits for wakes it in one
scheduler pass (it then hands the other appenders theirs); with nobody watching, the
writer hands each batch to the trio thread with ``run_sync_soon`` (trio's entry-queue
task, then the appender: two passes).
"""

from __future__ import annotations

import collections
import contextlib
import logging
import os
import queue
import threading
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
    """One unit of work for the writer; ``task`` is rescheduled when it has an outcome
    (when ``parked``: the task watching the wake pipe looks for its own)."""

    task: trio.lowlevel.Task | None = None
    result: Any = None
    error: BaseException | None = None
    parked: bool = False
    delivered: bool = False


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
        # Delivered batches, taken by the trio thread; the appender watching the wake
        # pipe (None: nobody is). Both under the lock: the writer decides how to wake
        # the trio thread from what it sees there.
        self._delivered: collections.deque[tuple[list[Request], list[Event]]] = collections.deque()
        self._watcher: trio.lowlevel.Task | None = None
        self._handoff = threading.Lock()
        self._wake_read, self._wake_write = os.pipe()
        os.set_blocking(self._wake_read, False)
        os.set_blocking(self._wake_write, False)

    async def submit(self, request: Request) -> Any:
        """Queue ``request`` from the trio thread and wait for its outcome (never
        cancelled: a pending cancellation acts at the caller's next checkpoint)."""
        if self.closed:
            raise StoreError(f"{self.where}: the store is closed")
        request.task = task = trio.lowlevel.current_task()
        if self._watcher is None:
            with self._handoff:  # before the put: the writer must see who watches
                self._watcher = task
            self._queue.put(request)
            await self._watch(request)
        else:
            request.parked = True
            self._queue.put(request)
            # No checkpoint between the put and the wait: the delivery runs in this
            # trio thread, so it always finds the task parked.
            await wait_for_outcome(request)
        if request.error is not None:
            raise request.error
        return request.result

    async def _watch(self, request: Request) -> None:
        """Wait on the wake pipe until ``request`` is delivered, handing every batch
        delivered meanwhile to its appenders."""
        try:
            while not request.delivered:
                try:
                    await trio.lowlevel.wait_readable(self._wake_read)
                except (trio.Cancelled, trio.ClosedResourceError):
                    # Cancelled: wait parked below, as the others do. Closed: the writer
                    # has delivered everything; the pipe's number may be reused already.
                    break
                with contextlib.suppress(BlockingIOError):  # a wake taken already
                    os.read(self._wake_read, 4096)
                self._finish_delivered()
        finally:
            with self._handoff:
                self._watcher = None
            self._finish_delivered()  # what the writer saw this task watching for
        if not request.delivered:
            request.parked = True
            await wait_for_outcome(request)

    def _finish_delivered(self) -> None:
        """(In the trio thread) hand each delivered batch's appenders their outcome."""
        with self._handoff:
            batches = list(self._delivered)
            self._delivered.clear()
        reschedule = trio.lowlevel.reschedule
        on_events = self.on_events
        for batch, events in batches:
            for r in batch:
                r.delivered = True
                if r.parked and r.task is not None:
                    reschedule(r.task)
            if events and on_events is not None:
                on_events(events)  # before on_commit: a follower it wakes finds them
            self._on_commit()

    def release(self) -> None:
        """Close the wake pipe: in the trio thread once :meth:`run` has returned, or in
        the thread that made the writer when it never ran (trio never saw the pipe)."""
        for fd in (self._wake_read, self._wake_write):
            with contextlib.suppress(RuntimeError):  # not in trio: nobody waits on it
                trio.lowlevel.notify_closing(fd)
            os.close(fd)

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
        # Gathered here, off the trio thread: what the batch's appends committed.
        events = (
            [e for r in batch if isinstance(r, AppendRequest) and r.error is None and r.result
             for e in r.result]
            if self.on_events is not None
            else []
        )  # fmt: skip
        with self._handoff:
            self._delivered.append((batch, events))
            watched = self._watcher is not None
        if watched:
            with contextlib.suppress(BlockingIOError):  # full: a wake is pending anyway
                os.write(self._wake_write, b"\0")
            return
        # RunFinishedError: the trio run is gone, so nobody is left waiting.
        with contextlib.suppress(trio.RunFinishedError):
            self._token.run_sync_soon(self._finish_delivered)

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
