"""Replay proper: refold a session and re-render every model request it recorded.

For each ``prompt.rendered`` the current composer renders the request from the state
folded so far (skill bodies from the log's snapshots, never from disk) and its sha256
is compared with the recorded ``request_hash``; the recorded request itself is rebuilt
from the blob store and must hash to it too. The first turn that differs gets a diff.
"""

from __future__ import annotations

from collections.abc import Callable

import msgspec

from eventlog import EventStore
from orchestrator import (
    PromptRendered,
    ScriptExecuted,
    SessionState,
    SkillActivated,
    SummaryRequested,
    apply,
)
from orchestrator.runtime import composer as _prompt
from orchestrator.runtime import summary_request

from ._errors import BrokenLogError
from ._recording import Recording, get_checked_blob
from ._request import RecordedRequests, RenderedRequests, request_diff
from ._skills import pin_skill


class TurnCheck(msgspec.Struct, frozen=True, kw_only=True):
    """One model request: the recorded hash and the re-rendered one. ``skills`` are
    the active skills (name, skill hash) the request was rendered with."""

    turn: int
    seq: int
    skills: tuple[tuple[str, str], ...]
    request_hash: str
    rerendered_hash: str

    @property
    def ok(self) -> bool:
        return self.request_hash == self.rerendered_hash


class Divergence(msgspec.Struct, frozen=True, kw_only=True):
    """The first request the current code renders differently, with a unified diff of
    the recorded and the re-rendered bytes."""

    turn: int
    seq: int
    request_hash: str
    rerendered_hash: str
    diff: str


class ReplayReport(msgspec.Struct, frozen=True, kw_only=True):
    """The result of :func:`replay_session`. ``ok`` when every request matched.
    ``request_bytes`` is the total size of the requests re-rendered."""

    session: str
    events: int
    turns: tuple[TurnCheck, ...]
    divergence: Divergence | None
    request_bytes: int

    @property
    def ok(self) -> bool:
        return self.divergence is None


async def replay_session(
    store: EventStore,
    recording: Recording,
    *,
    recorded: RecordedRequests | None = None,
    progress: Callable[[int], None] | None = None,
) -> ReplayReport:
    """Refold ``recording`` and prove every recorded request against the composer.

    Needs only the log: skill bodies come from the snapshots the log pins (each proven
    by :func:`pin_skill`), so it works after the skill folders changed or vanished.
    Every turn is checked, the first mismatch gets a :class:`Divergence`. Raises
    :class:`BrokenLogError` when a blob is missing or altered or the recorded request
    blobs do not hash to the recorded ``request_hash``. The recorded requests are
    gathered in ``recorded`` when given (as far as the proof got); ``progress(1)`` is
    called after each event."""
    session = recording.session
    state = SessionState(session)
    bodies: dict[str, str] = {}
    checked: set[str] = set()
    rendered, recorded = RenderedRequests(), recorded or RecordedRequests()
    turns: list[TurnCheck] = []
    divergence: Divergence | None = None
    for event, body in zip(recording.events, recording.bodies, strict=True):
        seq = event.seq
        if isinstance(body, SkillActivated) and body.body_digest not in bodies:
            bodies[body.body_digest] = await pin_skill(store, session, seq, body)
        elif isinstance(body, ScriptExecuted):
            for digest in (body.stdout_digest, body.stderr_digest):
                if digest not in checked:
                    await get_checked_blob(
                        store, digest, session=session, seq=seq, what="script output"
                    )
                    checked.add(digest)
        elif isinstance(body, PromptRendered):
            tail = await recorded_turn(store, session, seq, body, recorded)
            try:
                request = _prompt.compose(state, bodies)
            except ValueError as e:
                raise BrokenLogError(session, seq, f"cannot compose turn {body.turn}: {e}") from e
            check = TurnCheck(
                turn=body.turn,
                seq=seq,
                skills=tuple((s.name, s.hash) for s in state.active),
                request_hash=body.request_hash,
                rerendered_hash=rendered.digest(request),
            )
            turns.append(check)
            if not check.ok and divergence is None:
                divergence = Divergence(
                    turn=body.turn,
                    seq=seq,
                    request_hash=check.request_hash,
                    rerendered_hash=check.rerendered_hash,
                    diff=request_diff(recorded.request_bytes(tail), _prompt.request_bytes(request)),
                )
        elif isinstance(body, SummaryRequested) and state.config is not None:
            # The summary call's request: composed again from the history folded here,
            # it must be the bytes the log holds (its blob, named by its hash).
            what = "context.summary_requested request"
            blob = await get_checked_blob(
                store, body.request_hash, session=session, seq=seq, what=what
            )
            again = summary_request(state.messages, body.dropped, state.config)
            if _prompt.request_hash(again) != body.request_hash and divergence is None:
                divergence = Divergence(
                    turn=state.turn,
                    seq=seq,
                    request_hash=body.request_hash,
                    rerendered_hash=_prompt.request_hash(again),
                    diff=request_diff(blob, _prompt.request_bytes(again)),
                )
        apply(state, body, seq=seq, hash=event.hash)
        if progress is not None:
            progress(1)
    return ReplayReport(
        session=session,
        events=len(recording),
        turns=tuple(turns),
        divergence=divergence,
        request_bytes=rendered.total_bytes,
    )


async def recorded_turn(
    store: EventStore, session: str, seq: int, body: PromptRendered, recorded: RecordedRequests
) -> bytes:
    """Add the turn's recorded message blobs to ``recorded``; return its tail. The
    recorded request must hash to ``request_hash``: the runtime hashed exactly those
    bytes. Raises :class:`BrokenLogError` (:class:`BlobError` for a blob)."""
    what = f"prompt.rendered turn {body.turn}"
    lines = [
        await get_checked_blob(store, d, session=session, seq=seq, what=f"{what} message")
        for d in body.new_message_digests
    ]
    tail = recorded.tails.get(body.tail_digest)
    if tail is None:  # most turns reuse the previous tail: read and check it once
        tail = await get_checked_blob(store, body.tail_digest, session=session, seq=seq, what=what)
        recorded.tails[body.tail_digest] = tail
    # The messages before the new ones are the history's first ones (all of them but
    # after a compaction, which names the history again from the first it rewrote).
    recorded.extend(lines, keep=body.message_count - len(lines))
    if body.message_count != recorded.count:
        raise BrokenLogError(
            session,
            seq,
            f"{what}: message_count {body.message_count} but the log names "
            f"{recorded.count} message blobs so far",
        )
    if recorded.digest(tail) != body.request_hash:
        raise BrokenLogError(
            session,
            seq,
            f"{what}: the recorded request blobs do not hash to the recorded request_hash "
            f"{body.request_hash[:16]}...; the log is inconsistent",
        )
    return tail
