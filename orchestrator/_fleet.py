"""Workers: many processes, on many machines, driving the sessions of one log.

A session is queued by being in the log and not finished: not ended, not waiting for
an approval. A worker *claims* it by appending ``lease.acquired`` to the stream
``lease/<session>`` at the next seq: the store's optimistic concurrency (a unique
``(stream, seq)``, the same on SQLite and PostgreSQL) lets exactly one claimant win,
with no coordination outside the database. The holder renews (``lease.renewed``)
every third of the lease and releases (``lease.released``) when the session ends,
suspends or is handed back; a lease that is neither renewed nor released expires, and
any worker may take the session over and resume it.

Fencing needs no more machinery: a worker that lost its lease (it stalled past the
expiry and another took over) finds out when its renewal or its next append to the
session fails on the seq the new holder moved; it stops acting on the session and says
so. Everything with an effect was written ahead (docs/effects.md), so the new holder
neither repeats an at-most-once effect nor loses a recorded one.

Every driver takes the lease before acting, not only workers: ``skillog run`` and
``resume``, ``serve``'s workers and each ``mcp serve`` connection (:func:`leased`);
one whose lease is live and held by another is refused, naming the holder and when the
lease expires (:class:`LeaseHeldError`), so no two drivers ever act on one session.
Only a lease stream that starts with ``queued`` (:func:`queue_session`) makes a
session the fleet's: a session a program drives itself is never claimed by a worker.

The lease streams are events like any other: hashed, verified, exported; ``skillog
sessions`` reads them to show which worker ran what. Lease times are wall-clock
(``time.time_ns``): workers must keep their clocks roughly in sync, as with any lease.
"""

from __future__ import annotations

import contextlib
import logging
import os
import socket
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from datetime import UTC, datetime

import trio

from eventlog import ConcurrencyError, EventStore, NewEvent, SkillogError, closing
from eventlog._catalog import Claim, Listing

from ._catalog import catalogued
from ._events import (
    CODEC,
    ApprovalResolved,
    Event,
    LeaseAcquired,
    LeaseReleased,
    LeaseRenewed,
    SessionEnded,
    SessionForked,
    SessionStarted,
    SessionSuspended,
)
from ._loop import Agent
from ._previews import PreviewSink, PreviewTap, fan_out
from ._state import SessionState, apply
from ._streams import LEASE_PREFIX, QUEUED, lease_stream

log = logging.getLogger("skillog.worker")

AgentFactory = Callable[[SessionStarted], Agent]
"""Builds the agent that drives a session, from its recorded configuration (model,
policy); the worker's own skills and host tools come from the factory."""


def worker_name() -> str:
    """``host:pid:random``: unique among the workers of a fleet, recorded in leases."""
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:6]}"


DRIVER_LEASE_MS = 15_000
"""The lease of a driver that is not a worker (``run``, ``resume``, ``mcp serve``):
renewed every third of it while the driver acts; another driver may take the session
over this long after the holder died."""


def driver_name(kind: str) -> str:
    """``kind:host:pid:random``: a driver that is not a worker (``run``, ``resume``,
    ``mcp``), as its leases record it."""
    return f"{kind}:{worker_name()}"


@dataclass
class Lease:
    """A held lease; ``outcome`` is what its release records (set by the driver)."""

    session: str
    worker: str
    seq: int
    until: int
    outcome: str = "handed back"


async def _last(store: EventStore, stream: str, length: int) -> Event | None:
    if length == 0:
        return None
    async with closing(store.read(stream, from_seq=length - 1)) as events:
        async for event in events:
            return CODEC.decode(event)
    return None


async def session_config(store: EventStore, stream: str) -> SessionStarted | None:
    """The recorded configuration of a session (a fork's comes after its
    ``session.forked``, at seq 1); None for a stream that is not a session."""
    async with closing(store.read(stream, to_seq=2)) as events:
        return config_of([CODEC.decode(event) async for event in events])


def config_of(bodies: Iterable[Event]) -> SessionStarted | None:
    """:func:`session_config` of a stream's first events (``bodies``, in order)."""
    for body in bodies:
        if isinstance(body, SessionStarted):
            return body
        if not isinstance(body, SessionForked):
            return None
    return None


def _held(last: Event | None, now: int) -> str | None:
    """Who holds a lease whose stream ends with ``last``, or None when it is free."""
    if isinstance(last, LeaseAcquired | LeaseRenewed) and last.until > now:
        return last.worker
    return None


async def lease_history(store: EventStore, session_id: str) -> list[str]:
    """The workers that held the session, in order (repeats folded)."""
    workers: list[str] = []
    async for event in store.read(lease_stream(session_id)):
        body = CODEC.decode(event)
        if isinstance(body, LeaseAcquired) and (not workers or workers[-1] != body.worker):
            workers.append(body.worker)
    return workers


async def queue_session(
    store: EventStore,
    agent: Agent,
    task: str,
    *,
    session_id: str | None = None,
    submitter: str = "",
    policy: str = "",
) -> str:
    """Queue a session for the fleet: its lease stream first (``lease.released``,
    outcome ``queued``: no holder yet), then the session's start with ``task``. Only
    sessions queued this way are ever claimed: a session an embedding program drives
    itself (``Agent.run``) is never taken from it. ``submitter`` and ``policy`` (the
    preset's name) are recorded for the catalog. Returns the session id."""
    session_id = session_id or uuid.uuid4().hex
    queued = LeaseReleased(worker="submit", outcome=QUEUED, submitter=submitter, policy=policy)
    await store.append(
        lease_stream(session_id), [CODEC.encode(queued, recorded_at=time.time_ns())], expected_seq=0
    )
    await agent.start(store, session_id=session_id, task=task)
    return session_id


async def runnable_sessions(store: EventStore, now: int) -> list[str]:
    """Sessions a worker could take now, oldest first: queued for the fleet (they have a
    lease stream), started, not ended, not waiting for an approval, no live lease.
    From the catalog when the store keeps it; else by reading every stream."""
    if catalogued(store):
        rows = await store.list_catalog(Listing(limit=None, free_at=now))  # type: ignore[attr-defined]
        return [row.key for row in rows]
    infos = await store.streams()
    leases = {i.stream[len(LEASE_PREFIX) :]: i for i in infos if i.stream.startswith(LEASE_PREFIX)}
    found: list[tuple[int, str]] = []
    for info in infos:
        lease = leases.get(info.stream)
        if lease is None or info.length == 0:
            continue  # a lease stream, or a session nobody queued for the fleet
        tail = await _last(store, info.stream, info.length)
        if isinstance(tail, SessionEnded | SessionSuspended):
            continue
        if _held(await _last(store, lease.stream, lease.length), now):
            continue
        if await session_config(store, info.stream) is None:
            continue  # not a session (the skills index, ...)
        if isinstance(tail, ApprovalResolved) and await _still_waiting(store, info.stream):
            continue
        if not await _queued(store, lease.stream):
            continue  # a session its own program drives (under a lease of its own)
        found.append((info.first_recorded_at, info.stream))
    return [stream for _, stream in sorted(found)]


async def _queued(store: EventStore, stream: str) -> bool:
    async with closing(store.read(stream, to_seq=1)) as events:
        async for event in events:
            body = CODEC.decode(event)
            return isinstance(body, LeaseReleased) and body.outcome == QUEUED
    return False


async def _still_waiting(store: EventStore, session_id: str) -> bool:
    state = SessionState(session_id)
    async for event in store.read(session_id):
        apply(state, CODEC.decode(event), seq=event.seq, hash=event.hash)
    return state.status == "awaiting_approval"


class LeaseHeldError(SkillogError):
    """Another driver holds the session's lease and it has not expired."""

    def __init__(self, session_id: str, holder: str, until: int, now: int) -> None:
        at = datetime.fromtimestamp(until / 1e9, UTC).strftime("%Y-%m-%d %H:%M:%S")
        left = max(0, (until - now) // 1_000_000_000)
        super().__init__(
            f"session {session_id} is being driven by {holder} (its lease runs until {at} "
            f"UTC, {left}s from now, and is renewed while it acts): wait for it to finish "
            f"(`skillog resume --wait {session_id}`) or stop that driver"
        )
        self.holder = holder
        self.until = until


async def holder(store: EventStore, session_id: str, now: int) -> tuple[str, int] | None:
    """The driver holding a live lease on the session and when it expires, or None."""
    if catalogued(store):  # heartbeats move the row's expiry, not the lease stream
        row = await store.catalog_row(session_id)  # type: ignore[attr-defined]
        if row is not None and row.holder is not None and row.lease_until > now:
            return row.holder, row.lease_until
        return None
    stream = lease_stream(session_id)
    head = await store.head(stream)
    if head is None:
        return None
    last = await _last(store, stream, head.seq + 1)
    if isinstance(last, LeaseAcquired | LeaseRenewed) and last.until > now:
        return last.worker, last.until
    return None


async def acquire(
    store: EventStore,
    session_id: str,
    driver: str,
    *,
    ttl_ns: int,
    clock: Callable[[], int] = time.time_ns,
    wait: bool = False,
    poll_s: float = 0.2,
) -> Lease:
    """Take the session's lease for ``driver``; raise :class:`LeaseHeldError` when
    another holds a live one (with ``wait``, wait until it is released or expires)."""
    while True:
        now = clock()
        lease = await try_acquire(store, session_id, driver, ttl_ns, now)
        if lease is not None:
            return lease
        held = await holder(store, session_id, now)
        if not wait and held is not None:
            raise LeaseHeldError(session_id, *held, now)
        await trio.sleep(poll_s)  # held, or lost a race: look again


@asynccontextmanager
async def hold(
    store: EventStore, lease: Lease, ttl_ns: int, clock: Callable[[], int] = time.time_ns
) -> AsyncIterator[Lease]:
    """Renew ``lease`` every third of ``ttl_ns`` while the block runs; the block is
    cancelled and :class:`LeaseLostError` raised when another driver took it over. The
    caller releases (:func:`release`), unless the lease was lost."""
    try:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(_heartbeat, store, lease, ttl_ns, clock)
            try:
                yield lease
            finally:
                nursery.cancel_scope.cancel()
    except BaseExceptionGroup as group:
        # The block's own error or the heartbeat's loss, never both: raise it bare, as
        # the block would have without the heartbeat beside it.
        if len(group.exceptions) == 1:
            raise group.exceptions[0] from None
        raise


@asynccontextmanager
async def leased(
    store: EventStore,
    session_id: str,
    driver: str,
    *,
    lease_ms: int = DRIVER_LEASE_MS,
    clock: Callable[[], int] = time.time_ns,
    wait: bool = False,
) -> AsyncIterator[Lease]:
    """Drive ``session_id`` as ``driver`` under its lease: take it (see
    :func:`acquire`), renew it while the block runs, release it after with the
    block's ``lease.outcome``. A session moved on by another driver (its lease was
    taken over while this one stalled) raises :class:`LeaseLostError`."""
    ttl = lease_ms * 1_000_000
    lease = await acquire(store, session_id, driver, ttl_ns=ttl, clock=clock, wait=wait)
    try:
        async with hold(store, lease, ttl, clock):
            try:
                yield lease
            except BaseException as e:
                if _contains(e, ConcurrencyError):
                    raise LeaseLostError(
                        f"session {session_id} moved on in another driver; stopped acting on it"
                    ) from e
                raise
    except LeaseLostError:
        raise
    except BaseException as e:
        if isinstance(e, Exception) and lease.outcome == "handed back":
            lease.outcome = "failed"
        with trio.CancelScope(shield=True):
            await release(store, lease, lease.outcome, clock())
        raise
    with trio.CancelScope(shield=True):
        await release(store, lease, lease.outcome, clock())


def _contains(error: BaseException, kind: type[BaseException]) -> bool:
    if isinstance(error, BaseExceptionGroup):
        return error.subgroup(kind) is not None
    return isinstance(error, kind)


async def _heartbeat(
    store: EventStore, lease: Lease, ttl_ns: int, clock: Callable[[], int]
) -> None:
    while True:
        await trio.sleep(ttl_ns / 3e9)
        if not await renew(store, lease, ttl_ns, clock()):
            raise LeaseLostError(f"lease on {lease.session} was taken over")


async def try_acquire(
    store: EventStore, session_id: str, worker: str, ttl_ns: int, now: int
) -> Lease | None:
    """Claim the session unless a live lease is held; None when another worker holds
    it or won the race for it."""
    stream = lease_stream(session_id)
    head = await store.head(stream)
    seq = head.seq + 1 if head is not None else 0
    held = await holder(store, session_id, now)
    if held is not None and held[0] != worker:
        return None
    event = LeaseAcquired(session=session_id, worker=worker, until=now + ttl_ns)
    try:
        await store.append(stream, [CODEC.encode(event, recorded_at=now)], expected_seq=seq)
    except ConcurrencyError:
        return None
    return Lease(session=session_id, worker=worker, seq=seq, until=event.until)


async def _extend(store: EventStore, lease: Lease, event: Event, now: int) -> bool:
    """Append the holder's next lease event; False when the lease was taken over."""
    try:
        await store.append(
            lease_stream(lease.session),
            [CODEC.encode(event, recorded_at=now)],
            expected_seq=lease.seq + 1,
        )
    except ConcurrencyError:
        return False
    lease.seq += 1
    return True


async def renew(store: EventStore, lease: Lease, ttl_ns: int, now: int) -> bool:
    """Extend the lease; False when it was taken over (the holder must stop). With
    the catalog a heartbeat updates the session's row (no event)."""
    if catalogued(store):
        until = now + ttl_ns
        if not await store.renew(lease.session, lease.worker, until):  # type: ignore[attr-defined]
            return False
        lease.until = until
        return True
    event = LeaseRenewed(worker=lease.worker, until=now + ttl_ns)
    if not await _extend(store, lease, event, now):
        return False
    lease.until = event.until
    return True


async def release(store: EventStore, lease: Lease, outcome: str, now: int) -> None:
    if not await _extend(store, lease, LeaseReleased(worker=lease.worker, outcome=outcome), now):
        log.warning("%s: lease on %s was taken over before release", lease.worker, lease.session)


class LeaseLostError(SkillogError):
    """Another worker took the session over: this one stopped acting on it."""


@dataclass
class Worker:
    """Claims runnable sessions of ``store`` and drives them with agents from
    ``make_agent``, ``concurrency`` at a time. See the module docstring. With
    ``previews``, the models stream and their deltas go there, as do MCP calls'
    progress notifications (``_previews``)."""

    store: EventStore
    make_agent: AgentFactory
    name: str = ""
    concurrency: int = 4
    lease_ms: int = 15_000
    poll_ms: int = 500
    clock: Callable[[], int] = time.time_ns
    previews: PreviewSink | None = None

    def __post_init__(self) -> None:
        self.name = self.name or worker_name()
        self.running: dict[str, trio.CancelScope] = {}
        self._stopping: dict[str, _Stop] = {}
        self.finished: list[tuple[str, str]] = []
        self._settled = trio.Event()  # set whenever a session stops running
        self._wakeup: Callable[[], Awaitable[bool]] | None = None

    async def run(self, stop: trio.Event, *, drain_s: float = 30.0, once: bool = False) -> None:
        """Claim and drive sessions until ``stop`` is set (or, with ``once``, until no
        runnable session is left); then stop claiming, give in-flight sessions
        ``drain_s`` seconds to finish, and hand the rest back (recorded)."""
        ttl = self.lease_ms * 1_000_000
        wakeups = getattr(self.store, "wakeups", None)
        async with contextlib.AsyncExitStack() as stack, trio.open_nursery() as nursery:
            if wakeups is not None and catalogued(self.store):  # PostgreSQL: LISTEN
                self._wakeup = await stack.enter_async_context(wakeups())
            while not stop.is_set():
                free = self.concurrency - len(self.running)
                claimed = 0
                if free > 0 and catalogued(self.store):
                    for claimed_lease in await self._claim(free, ttl):
                        claimed += 1
                        self.running[claimed_lease.session] = trio.CancelScope()
                        nursery.start_soon(self._drive, claimed_lease)
                elif free > 0:
                    for session_id in await runnable_sessions(self.store, self.clock()):
                        if claimed >= free:
                            break
                        if session_id in self.running:
                            continue
                        lease = await try_acquire(
                            self.store, session_id, self.name, ttl, self.clock()
                        )
                        if lease is not None:
                            claimed += 1
                            self.running[session_id] = trio.CancelScope()
                            nursery.start_soon(self._drive, lease)
                if once and not claimed and not self.running:
                    break
                await self._idle(stop, full=free - claimed <= 0)
            with trio.move_on_after(drain_s):
                while self.running:
                    self._settled = trio.Event()
                    await self._settled.wait()
            for scope in self.running.values():
                scope.cancel()

    async def stop(self, session_id: str, finish: Callable[[], Awaitable[object]]) -> bool:
        """Cut this worker's turn on ``session_id`` (a model call cut mid-stream is
        recorded as ``model.interrupted``) and run ``finish`` while still holding the
        lease, before handing it back: no driver, this worker included, acts on the
        session in between (a cancel records the session's end there). False when this
        worker is not driving it; ``finish``'s error is raised here."""
        scope = self.running.get(session_id)
        if scope is None:
            return False
        earlier = self._stopping.get(session_id)
        if earlier is not None:  # someone else's stop: once it is done, not driving
            await earlier.done.wait()
            return False
        stopping = self._stopping[session_id] = _Stop(finish)
        scope.cancel()
        await stopping.done.wait()
        if stopping.error is not None:
            raise stopping.error
        return True

    async def _idle(self, stop: trio.Event, *, full: bool) -> None:
        """Wait ``poll_ms`` before looking for work again, or less: until ``stop``;
        when every slot is taken, until one of this worker's sessions stops (its slot is
        free: claim again at once instead of sleeping); otherwise, on PostgreSQL, until
        a transaction makes a session runnable (NOTIFY). A lease that expires wakes
        nobody: the poll finds it."""
        self._settled = trio.Event()
        with trio.move_on_after(self.poll_ms / 1000):
            async with trio.open_nursery() as waits:

                async def first(event: trio.Event) -> None:
                    await event.wait()
                    waits.cancel_scope.cancel()

                waits.start_soon(first, stop)
                if full:
                    waits.start_soon(first, self._settled)
                elif self._wakeup is not None:
                    wakeup = self._wakeup

                    async def notified() -> None:
                        if await wakeup():
                            waits.cancel_scope.cancel()
                        else:  # the listening connection was lost: poll
                            await trio.sleep_forever()

                    waits.start_soon(notified)

    async def _claim(self, free: int, ttl: int) -> list[Lease]:
        """Claim up to ``free`` runnable sessions with the database's own lock (one
        transaction: no two workers take one row)."""
        now = self.clock()

        def claim_event(session_id: str) -> NewEvent:
            event = LeaseAcquired(session=session_id, worker=self.name, until=now + ttl)
            return CODEC.encode(event, recorded_at=now)

        claim = Claim(limit=free, now=now, stream_of=lease_stream, event_of=claim_event)
        claimed = await self.store.claim(claim)  # type: ignore[attr-defined]
        return [
            Lease(session=e.stream[len(LEASE_PREFIX) :], worker=self.name, seq=e.seq,
                  until=now + ttl)
            for e in claimed
            if e.stream[len(LEASE_PREFIX) :] not in self.running
        ]  # fmt: skip

    async def _drive(self, lease: Lease) -> None:
        scope = self.running[lease.session]
        lost = False
        try:
            with scope:
                async with hold(self.store, lease, self.lease_ms * 1_000_000, self.clock):
                    lease.outcome = await self._resume(lease.session)
        except* LeaseLostError:
            lost = True
        finally:
            del self.running[lease.session]
            stopping = self._stopping.pop(lease.session, None)
            self._settled.set()
            if lost:
                lease.outcome = "lost"
                log.warning(
                    "%s: lease on session %s was taken over; stopped acting on it",
                    self.name,
                    lease.session,
                )
                if stopping is not None:
                    stopping.fail(LeaseLostError(f"session {lease.session} moved on elsewhere"))
            else:
                with trio.CancelScope(shield=True):
                    if stopping is not None:
                        await stopping.run(lease)
                    await release(self.store, lease, lease.outcome, self.clock())
            self.finished.append((lease.session, lease.outcome))

    async def _resume(self, session_id: str) -> str:
        # One read of the stream (we hold its lease): its configuration, whether it
        # ended, and the fold the agent resumes from.
        read = [(event, CODEC.decode(event)) async for event in self.store.read(session_id)]
        started = config_of(body for _, body in read[:2])
        if started is None:
            return "failed: not a session this worker can start"
        if isinstance(read[-1][1], SessionEnded):
            # Another worker finished it between our look at the queue and our claim.
            return "already ended"
        agent = self.make_agent(started)
        if self.previews is not None:
            tap = PreviewTap(session_id, self.previews)
            agent.on_delta = (
                tap.delta if agent.on_delta is None else fan_out(agent.on_delta, tap.delta)
            )
            agent.on_progress = (
                tap.progress
                if agent.on_progress is None
                else fan_out(agent.on_progress, tap.progress)
            )
            agent.observers = [*agent.observers, tap.event]
        outcome = "suspended"
        try:
            session = await agent._resume(self.store, session_id, read)
            if session.state.status == "ended":
                outcome = "ended"
        except* ConcurrencyError as group:
            raise LeaseLostError(f"session {session_id} moved on in another worker") from group
        except* SkillogError as group:
            outcome = f"failed: {group.exceptions[0]}"
        finally:
            agent.close()
        return outcome


class _Stop:
    """A request to stop driving a session and finish it under the lease
    (:meth:`Worker.stop`); ``done`` is set once ``finish`` ran or cannot."""

    def __init__(self, finish: Callable[[], Awaitable[object]]) -> None:
        self.finish = finish
        self.done = trio.Event()
        self.error: Exception | None = None

    async def run(self, lease: Lease) -> None:
        try:
            await self.finish()
            lease.outcome = "ended"
        except Exception as e:  # handed to the caller of stop(), who reports it
            self.error = e
        finally:
            self.done.set()

    def fail(self, error: Exception) -> None:
        self.error = error
        self.done.set()


def describe(finished: Sequence[tuple[str, str]]) -> str:
    return ", ".join(f"{s} {o}" for s, o in finished) or "nothing to do"
