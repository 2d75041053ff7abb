"""Fork: a new session whose log begins with another session's events up to a seq."""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable

import msgspec

from eventlog import EventStore, NewEvent, closing, verify_stream
from orchestrator import CODEC, SessionForked

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


class ForkLink(msgspec.Struct, frozen=True, kw_only=True):
    """What a fork's ``session.forked`` claims, checked against its parent in the same
    log. ``ok`` is None when the parent is not in this log (an export of the fork
    alone): the claim is then reported, not proven."""

    parent: str
    at_seq: int
    ok: bool | None
    detail: str


async def check_fork_link(store: EventStore, recording: Recording) -> ForkLink | None:
    """None for a session that is not a fork. For a fork: its parent's chain must
    verify, the parent's event at ``at_seq`` must hash to the recorded ``at_hash``,
    and the fork's seqs 1..``at_seq``+1 must be the parent's seqs 0..``at_seq``
    (type, body and recorded time)."""
    link = recording.bodies[0]
    if not isinstance(link, SessionForked):
        return None
    parent, at = link.from_session, link.at_seq

    def result(ok: bool | None, detail: str) -> ForkLink:
        return ForkLink(parent=parent, at_seq=at, ok=ok, detail=detail)

    async with closing(store.read(parent, to_seq=at + 1)) as events:
        copied_from = [e async for e in events]
    if not copied_from:
        return result(
            None,
            f"the parent session {parent} is not in this log: the copied events and the "
            f"link hash {link.at_hash[:16]}... cannot be checked here",
        )
    _, fault = await verify_stream(store, parent)
    if fault is not None:
        return result(False, f"the parent's chain does not verify: {fault}")
    if len(copied_from) <= at:
        return result(False, f"the parent has seqs 0..{len(copied_from) - 1}, not {at}")
    if copied_from[at].hash != link.at_hash:
        return result(
            False,
            f"the parent's event at seq {at} hashes to {copied_from[at].hash[:16]}..., not "
            f"to the recorded at_hash {link.at_hash[:16]}...",
        )
    copies = recording.events[1 : at + 2]
    for original, copy in zip(copied_from, copies, strict=False):
        if (original.type, original.body, original.recorded_at) != (
            copy.type,
            copy.body,
            copy.recorded_at,
        ):
            return result(
                False,
                f"the fork's seq {copy.seq} is not the parent's seq {original.seq}: the "
                "copied prefix was altered",
            )
    if len(copies) != at + 1:
        return result(False, f"the fork holds {len(copies)} copied events, not {at + 1}")
    return result(
        True,
        f"fork of {parent}@{at}: the {at + 1} copied events are the parent's seqs 0..{at}, "
        f"whose chain verifies and whose event at seq {at} hashes to the recorded at_hash",
    )
