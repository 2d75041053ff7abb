"""Fork: a new session whose log begins with another session's events up to a seq."""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable

from eventlog import EventStore, NewEvent
from orchestrator._events import CODEC, SessionForked

from ._errors import BrokenLogError
from ._recording import Recording


async def fork_session(
    store: EventStore,
    recording: Recording,
    at_seq: int,
    *,
    session_id: str | None = None,
    clock: Callable[[], int] = time.time_ns,
) -> str:
    """Start a new session in ``store`` from ``recording``'s events 0..``at_seq``;
    returns its id.

    Its log is ``session.forked`` (naming the original session, ``at_seq`` and the
    hash of the event there, so the link can be checked against the original chain)
    followed by the copied events: the same types, bodies and recorded times,
    re-chained in the new stream. Blobs are content-addressed and already in the
    store. The new session folds to the original's state at ``at_seq`` and can be
    continued with ``skillog resume`` (with another model, for "what if" analysis)."""
    if not 0 <= at_seq < len(recording):
        raise BrokenLogError(
            recording.session,
            None,
            f"cannot fork at seq {at_seq}: the session has seqs 0..{len(recording) - 1}",
        )
    at = recording.events[at_seq]
    link = SessionForked(from_session=recording.session, at_seq=at_seq, at_hash=at.hash)
    copies = [
        NewEvent(type=e.type, body=e.body, recorded_at=e.recorded_at)
        for e in recording.events[: at_seq + 1]
    ]
    new_id = session_id or uuid.uuid4().hex
    await store.append(new_id, [CODEC.encode(link, recorded_at=clock()), *copies], expected_seq=0)
    return new_id
