"""Indexing runs recorded in the log: what the skill sources held, and when."""

from __future__ import annotations

import time
from collections.abc import Callable

from eventlog import ConcurrencyError, Event, EventStore

from ._events import CODEC, CatalogIndexed
from .skills import Catalog, CatalogRecord

INDEX_STREAM = "skills-index"
"""The stream of ``catalog.indexed`` events; sessions are the other streams."""


async def record_index_run(
    store: EventStore,
    catalog: Catalog | CatalogRecord,
    *,
    clock: Callable[[], int] = time.time_ns,
) -> Event:
    """Append one ``catalog.indexed`` event for ``catalog`` to :data:`INDEX_STREAM`.

    Several processes may index at once: a lost race for the next seq is retried
    against the new head (the chain never forks)."""
    record = catalog.record if isinstance(catalog, Catalog) else catalog
    event = CODEC.encode(CatalogIndexed(record=record), recorded_at=clock())
    attempts = 5
    for attempt in range(attempts):
        head = await store.head(INDEX_STREAM)
        try:
            (committed,) = await store.append(
                INDEX_STREAM, [event], expected_seq=0 if head is None else head.seq + 1
            )
            return committed
        except ConcurrencyError:
            if attempt == attempts - 1:
                raise
    raise AssertionError("unreachable")  # pragma: no cover
