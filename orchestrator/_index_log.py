"""Indexing runs, environments built and installs recorded in the log: what the skill
sources held, and when."""

from __future__ import annotations

import contextlib
import time
import weakref
from collections.abc import Callable
from typing import Literal

from eventlog import ConcurrencyError, Event, EventStore, Head, NewEvent

from ._events import CODEC, CatalogIndexed, SkillEnvBuilt, SkillsInstalled
from ._streams import INDEX_STREAM, INSTALL_STREAM
from .skills import Catalog, CatalogRecord, EnvRecord, InstalledSkill

# The last event of each index stream this process appended or read, per store: a head
# with that event's seq and hash is that event (the hash commits to its type and body),
# so deduplicating against it needs no read. ``serve`` records the same indexing run at
# every submission; the read was one thread hop of each. Weak keys: a closed store's
# entries go with it.
_LAST: weakref.WeakKeyDictionary[EventStore, dict[str, Event]] = weakref.WeakKeyDictionary()


async def record_index_run(
    store: EventStore,
    catalog: Catalog | CatalogRecord,
    *,
    clock: Callable[[], int] = time.time_ns,
) -> Event:
    """Append one ``catalog.indexed`` event for ``catalog`` to :data:`INDEX_STREAM`,
    unless the last run recorded found exactly the same: then that event is returned.

    Every session that indexes calls this, and many start at once (a service takes
    dozens of submissions a second): a lost race for the next seq is retried against
    the new head (the chain never forks), and an unchanged result is not recorded again,
    which keeps the stream to the changes and the racers few."""
    record = catalog.record if isinstance(catalog, Catalog) else catalog
    event = CODEC.encode(CatalogIndexed(record=record), recorded_at=clock())
    return await append_to_index(store, event)


async def record_env_built(
    store: EventStore, skill: str, env: EnvRecord, *, clock: Callable[[], int] = time.time_ns
) -> Event:
    """Append ``skill.env_built`` for ``env`` to :data:`INDEX_STREAM` (the lock)."""
    body = SkillEnvBuilt.of(skill, env)
    return await append_to_index(store, CODEC.encode(body, recorded_at=clock()))


async def record_installed(
    store: EventStore,
    action: Literal["install", "update", "remove"],
    skill: InstalledSkill,
    *,
    previous_hash: str | None = None,
    clock: Callable[[], int] = time.time_ns,
) -> Event:
    """Append ``skills.installed`` for ``skill`` to :data:`INSTALL_STREAM` (every one:
    installing the same skill twice is two events)."""
    body = SkillsInstalled(
        action=action,
        name=skill.name,
        origin=skill.origin,
        kind=skill.kind,
        tier=str(skill.tier),
        hash=skill.hash,
        ref=skill.ref,
        previous_hash=previous_hash,
    )
    event = CODEC.encode(body, recorded_at=clock())
    return await append_to_index(store, event, stream=INSTALL_STREAM, dedupe=False)


async def append_to_index(
    store: EventStore, event: NewEvent, *, stream: str = INDEX_STREAM, dedupe: bool = True
) -> Event:
    """Append ``event`` to ``stream``, unless (``dedupe``) its last event has the same
    type and body; a lost race for the next seq is retried against the new head."""
    attempts = 20
    for attempt in range(attempts):
        head = await store.head(stream)
        if head is not None and dedupe:
            last = await _last(store, stream, head)
            if last is not None and (last.type, last.body) == (event.type, event.body):
                return last
        try:
            (committed,) = await store.append(
                stream, [event], expected_seq=0 if head is None else head.seq + 1
            )
            _remember(store, committed)
            return committed
        except ConcurrencyError:
            if attempt == attempts - 1:
                raise
    raise AssertionError("unreachable")  # pragma: no cover


async def _last(store: EventStore, stream: str, head: Head) -> Event | None:
    """The event at ``head``: remembered when this process last saw it, else read."""
    known = _LAST.get(store, {}).get(stream)
    if known is not None and (known.seq, known.hash) == (head.seq, head.hash):
        return known
    last = await _event_at(store, stream, head.seq)
    if last is not None:
        _remember(store, last)
    return last


def _remember(store: EventStore, event: Event) -> None:
    with contextlib.suppress(TypeError):  # a store with no weak reference: read each time
        _LAST.setdefault(store, {})[event.stream] = event


async def _event_at(store: EventStore, stream: str, seq: int) -> Event | None:
    found = [e async for e in store.read(stream, from_seq=seq, to_seq=seq + 1)]
    return found[0] if found else None
