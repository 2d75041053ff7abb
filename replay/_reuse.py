"""``prefix_reuse``: how much of each recorded request repeats the previous one's bytes.

Providers cache a request's prefix in their order: tools, then system, then messages.
For each recorded request (after the first), the share of its bytes, laid out in that
order, that equal the start of the previous request is what a prompt cache could have
served. Computed offline from the recorded requests alone (the blobs the proof read),
before any bill arrives. Messages are measured as their canonical lines, a faithful
proxy of the wire bytes (the same message gives the same line; a changed one differs).

A **break** is a request that does not repeat the whole previous one: the tools or the
system prompt changed (a skill activated, a catalog refresh) or the history was
rewritten (``context.compacted``).
"""

from __future__ import annotations

import msgspec

from orchestrator import ContextCompacted, PromptRendered

from ._recording import Recording
from ._request import RecordedRequests

_canonical = msgspec.json.Encoder(order="sorted").encode  # the composer's encoding


class ReuseBreak(msgspec.Struct, frozen=True, kw_only=True):
    """A request that does not repeat all of the previous one: ``where`` the common
    prefix ends (``tools``, ``system`` or ``messages``), ``compacted`` whether a
    ``context.compacted`` came between the two."""

    turn: int
    seq: int
    share: float
    where: str
    compacted: bool


class RequestReuse(msgspec.Struct, frozen=True, kw_only=True):
    turn: int
    seq: int
    size: int
    reused: int
    share: float


class PrefixReuse(msgspec.Struct, frozen=True, kw_only=True):
    """Per request (but the first), the bytes repeated from the previous request's
    start and their share; the mean and minimum share; the breaks."""

    requests: tuple[RequestReuse, ...]
    mean: float | None
    min: float | None
    breaks: tuple[ReuseBreak, ...]


def prefix_reuse(recording: Recording, recorded: RecordedRequests) -> PrefixReuse:
    """The prefix reuse of the requests ``recorded`` holds (those the proof read)."""
    parts: dict[str, tuple[bytes, bytes]] = {}  # tail digest -> (tools, system) bytes
    previous: tuple[bytes, bytes, int, int, int] | None = None  # tools, system, start, n, size
    out: list[RequestReuse] = []
    breaks: list[ReuseBreak] = []
    starts = iter(recorded.starts)
    compacted = False
    for event, body in zip(recording.events, recording.bodies, strict=True):
        if isinstance(body, ContextCompacted):
            compacted = True
        if not isinstance(body, PromptRendered):
            continue
        start = next(starts, None)
        tail = recorded.tails.get(body.tail_digest)
        if start is None or tail is None:
            break  # the proof stopped before this request
        if body.tail_digest not in parts:
            decoded = msgspec.json.decode(tail)
            parts[body.tail_digest] = (
                _canonical(decoded["tools"]),
                decoded["system"].encode(),
            )
        tools, system = parts[body.tail_digest]
        lines = recorded.lines[start : start + body.message_count]
        size = len(tools) + len(system) + sum(len(line) for line in lines)
        if previous is not None:
            reused, where = _common(previous, tools, system, start, lines, recorded)
            share = round(reused / size, 4) if size else 1.0
            out.append(
                RequestReuse(turn=body.turn, seq=event.seq, size=size, reused=reused, share=share)
            )
            if where:
                breaks.append(
                    ReuseBreak(
                        turn=body.turn, seq=event.seq, share=share, where=where, compacted=compacted
                    )
                )
        previous = (tools, system, start, body.message_count, size)
        compacted = False
    shares = [r.share for r in out]
    return PrefixReuse(
        requests=tuple(out),
        mean=round(sum(shares) / len(shares), 4) if shares else None,
        min=min(shares) if shares else None,
        breaks=tuple(breaks),
    )


def _common(
    previous: tuple[bytes, bytes, int, int, int],
    tools: bytes,
    system: bytes,
    start: int,
    lines: list[bytes],
    recorded: RecordedRequests,
) -> tuple[int, str]:
    """Bytes of the common prefix with the previous request, and where it ended early
    ('' when the whole previous request is repeated)."""
    old_tools, old_system, old_start, old_count, old_size = previous
    if tools != old_tools:
        return common_prefix(old_tools, tools), "tools"
    reused = len(tools)
    if system != old_system:
        return reused + common_prefix(old_system, system), "system"
    reused += len(system)
    old_lines = recorded.lines[old_start : old_start + old_count]
    if old_start == start and old_count <= len(lines):
        # The same history slots: the previous request's lines are this one's first.
        return old_size, ""
    for old, new in zip(old_lines, lines, strict=False):
        if old is not new and old != new:
            return reused + common_prefix(old, new), "messages"
        reused += len(new)
    if len(old_lines) > len(lines):
        return reused, "messages"
    return reused, ""


def common_prefix(a: bytes, b: bytes) -> int:
    """The length of the longest common prefix of ``a`` and ``b``."""
    n = min(len(a), len(b))
    lo, hi = 0, n
    while lo < hi:  # the longest common prefix, by halving (C-level comparisons)
        mid = (lo + hi + 1) // 2
        if a[:mid] == b[:mid]:
            lo = mid
        else:
            hi = mid - 1
    return lo
