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

The lease streams are events like any other: hashed, verified, exported; ``skillog
sessions`` reads them to show which worker ran what. Lease times are wall-clock
(``time.time_ns``): workers must keep their clocks roughly in sync, as with any lease.
"""

from __future__ import annotations

import logging
import os
import socket
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import trio

from eventlog import ConcurrencyError, EventStore, SkillogError, closing

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
from ._state import SessionState, apply
from ._streams import LEASE_PREFIX, QUEUED, lease_stream

log = logging.getLogger("skillog.worker")

AgentFactory = Callable[[SessionStarted], Agent]
"""Builds the agent that drives a session, from its recorded configuration (model,
policy); the worker's own skills and host tools come from the factory."""


def worker_name() -> str:
    """``host:pid:random``: unique among the workers of a fleet, recorded in leases."""
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:6]}"


@dataclass
class Lease:
    session: str
    worker: str
    seq: int
    until: int


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
        async for event in events:
            body = CODEC.decode(event)
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
    store: EventStore, agent: Agent, task: str, *, session_id: str | None = None
) -> str:
    """Queue a session for the fleet: its lease stream first (``lease.released``,
    outcome ``queued``: no holder yet), then the session's start with ``task``. Only
    sessions queued this way are ever claimed: a session an embedding program drives
    itself (``Agent.run``) is never taken from it. Returns the session id."""
    session_id = session_id or uuid.uuid4().hex
    queued = LeaseReleased(worker="submit", outcome=QUEUED)
    await store.append(
        lease_stream(session_id), [CODEC.encode(queued, recorded_at=time.time_ns())], expected_seq=0
    )
    await agent.start(store, session_id=session_id, task=task)
    return session_id


async def runnable_sessions(store: EventStore, now: int) -> list[str]:
    """Sessions a worker could take now, oldest first: queued for the fleet (they have a
    lease stream), started, not ended, not waiting for an approval, no live lease."""
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
        found.append((info.first_recorded_at, info.stream))
    return [stream for _, stream in sorted(found)]


async def _still_waiting(store: EventStore, session_id: str) -> bool:
    state = SessionState(session_id)
    async for event in store.read(session_id):
        apply(state, CODEC.decode(event), seq=event.seq, hash=event.hash)
    return state.status == "awaiting_approval"


async def try_acquire(
    store: EventStore, session_id: str, worker: str, ttl_ns: int, now: int
) -> Lease | None:
    """Claim the session unless a live lease is held; None when another worker holds
    it or won the race for it."""
    stream = lease_stream(session_id)
    head = await store.head(stream)
    seq = head.seq + 1 if head is not None else 0
    if head is not None and _held(await _last(store, stream, seq), now) not in (None, worker):
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
    """Extend the lease; False when it was taken over (the holder must stop)."""
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
    ``make_agent``, ``concurrency`` at a time. See the module docstring."""

    store: EventStore
    make_agent: AgentFactory
    name: str = ""
    concurrency: int = 4
    lease_ms: int = 15_000
    poll_ms: int = 500
    clock: Callable[[], int] = time.time_ns

    def __post_init__(self) -> None:
        self.name = self.name or worker_name()
        self.running: dict[str, trio.CancelScope] = {}
        self.finished: list[tuple[str, str]] = []
        self._settled = trio.Event()  # set whenever a session stops running

    async def run(self, stop: trio.Event, *, drain_s: float = 30.0, once: bool = False) -> None:
        """Claim and drive sessions until ``stop`` is set (or, with ``once``, until no
        runnable session is left); then stop claiming, give in-flight sessions
        ``drain_s`` seconds to finish, and hand the rest back (recorded)."""
        ttl = self.lease_ms * 1_000_000
        async with trio.open_nursery() as nursery:
            while not stop.is_set():
                free = self.concurrency - len(self.running)
                claimed = 0
                if free > 0:
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
                with trio.move_on_after(self.poll_ms / 1000):
                    await stop.wait()
            with trio.move_on_after(drain_s):
                while self.running:
                    self._settled = trio.Event()
                    await self._settled.wait()
            for scope in self.running.values():
                scope.cancel()

    async def _drive(self, lease: Lease) -> None:
        scope = self.running[lease.session]
        outcome = "handed back"
        lost = False
        try:
            with scope:
                async with trio.open_nursery() as nursery:
                    nursery.start_soon(self._heartbeat, lease, nursery.cancel_scope)
                    outcome = await self._resume(lease.session)
                    nursery.cancel_scope.cancel()
        except* LeaseLostError:
            lost = True
        finally:
            del self.running[lease.session]
            self._settled.set()
            if lost:
                outcome = "lost"
                log.warning(
                    "%s: lease on session %s was taken over; stopped acting on it",
                    self.name,
                    lease.session,
                )
            else:
                with trio.CancelScope(shield=True):
                    await release(self.store, lease, outcome, self.clock())
            self.finished.append((lease.session, outcome))

    async def _resume(self, session_id: str) -> str:
        started = await session_config(self.store, session_id)
        if started is None:
            return "failed: not a session this worker can start"
        head = await self.store.head(session_id)
        tail = await _last(self.store, session_id, head.seq + 1 if head else 0)
        if isinstance(tail, SessionEnded):
            # Another worker finished it between our look at the queue and our claim.
            return "already ended"
        agent = self.make_agent(started)
        outcome = "suspended"
        try:
            session = await agent.resume(self.store, session_id)
            if session.state.status == "ended":
                outcome = "ended"
        except* ConcurrencyError as group:
            raise LeaseLostError(f"session {session_id} moved on in another worker") from group
        except* SkillogError as group:
            outcome = f"failed: {group.exceptions[0]}"
        finally:
            agent.close()
        return outcome

    async def _heartbeat(self, lease: Lease, session_scope: trio.CancelScope) -> None:
        ttl = self.lease_ms * 1_000_000
        while True:
            await trio.sleep(self.lease_ms / 3000)
            if not await renew(self.store, lease, ttl, self.clock()):
                raise LeaseLostError(f"lease on {lease.session} was taken over")


def describe(finished: Sequence[tuple[str, str]]) -> str:
    return ", ".join(f"{s} {o}" for s, o in finished) or "nothing to do"
