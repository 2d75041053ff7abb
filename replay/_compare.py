"""Comparing a re-driven session's events with the recorded ones (pure).

Bodies are compared as canonical builtins, field by field; the first difference is
named by its path (``$.response.parts[0].text``). Fields that are measurements of the
run rather than decisions of the code (:data:`MEASURED`) are left out: a re-drive
takes no time to call a recorded model, so its durations cannot match.
"""

from __future__ import annotations

from typing import Any

import msgspec

from eventlog import Event
from orchestrator import Event as Body
from orchestrator import (
    McpSampleAnswered,
    ModelFailed,
    ModelInterrupted,
    ModelResponded,
    PromptRendered,
    SessionEnded,
    SessionSuspended,
    SummaryAnswered,
    ToolCompleted,
    UserMessage,
)

MEASURED: dict[type[Body], frozenset[str]] = {
    ModelResponded: frozenset({"duration_ms"}),
    ModelFailed: frozenset({"duration_ms"}),
    ToolCompleted: frozenset({"duration_ms"}),
    SummaryAnswered: frozenset({"duration_ms"}),
    ModelInterrupted: frozenset({"duration_ms"}),
    McpSampleAnswered: frozenset({"duration_ms"}),  # the model's time, as ModelResponded's
}
"""Per body type, the fields timed by the runtime around I/O; not compared. A script's
``duration_ms`` (in ``script.executed`` and in the tool result the model read) is a
recorded effect the re-drive hands back, so it is compared."""


class EventDivergence(msgspec.Struct, frozen=True, kw_only=True):
    """Where a re-driven session first differs from its recording. ``redriven_type``
    is None when the re-drive stopped before ``seq``; ``recorded_type`` when the
    recording did."""

    seq: int
    turn: int
    recorded_type: str | None
    redriven_type: str | None
    field: str
    recorded: str
    redriven: str

    def __str__(self) -> str:
        kind = self.recorded_type or self.redriven_type
        return (
            f"non-determinism at seq {self.seq} (turn {self.turn}, {kind}): {self.field}: "
            f"recorded {self.recorded}, re-driven {self.redriven}"
        )


def comparable(body: Body) -> dict[str, Any]:
    """The body as builtins without its measured fields."""
    data: dict[str, Any] = msgspec.to_builtins(body)
    for name in MEASURED.get(type(body), ()):
        data.pop(name, None)
    return data


def first_difference(a: Any, b: Any, path: str = "$") -> tuple[str, Any, Any] | None:
    """The path and both values of the first place two builtin values differ."""
    if type(a) is not type(b):
        return path, a, b
    if isinstance(a, dict):
        for key in sorted(a.keys() | b.keys()):
            if key not in a or key not in b:
                return f"{path}.{key}", a.get(key, "(absent)"), b.get(key, "(absent)")
            found = first_difference(a[key], b[key], f"{path}.{key}")
            if found:
                return found
        return None
    if isinstance(a, list):
        for i, (x, y) in enumerate(zip(a, b, strict=False)):
            found = first_difference(x, y, f"{path}[{i}]")
            if found:
                return found
        if len(a) != len(b):
            return f"{path} length", len(a), len(b)
        return None
    return None if a == b else (path, a, b)


_TURN_END = (PromptRendered, SessionEnded, UserMessage)


def in_call_order(events: list[tuple[Event, Body]]) -> list[tuple[Event, Body]]:
    """The events with each turn's tool phase ordered call by call.

    Concurrent calls commit their outcomes as they finish, so their events interleave
    by timing; each call's own events are in pipeline order. Sorting a tool phase
    stably by the index of the call each event belongs to gives an order that only
    the code decides."""
    out: list[tuple[Event, Body]] = []
    phase: list[tuple[int, int, tuple[Event, Body]]] = []
    order: dict[str, int] = {}

    def flush() -> None:
        out.extend(item for _, _, item in sorted(phase, key=lambda p: (p[0], p[1])))
        phase.clear()

    for pair in events:
        body = pair[1]
        if isinstance(body, ModelResponded):
            flush()
            out.append(pair)
            order = {c.id: i for i, c in enumerate(body.response.tool_calls)}
        elif isinstance(body, (*_TURN_END, SessionSuspended)) or not order:
            # A suspension splits the tool phase: what came before it stays before it.
            flush()
            order = {} if isinstance(body, _TURN_END) else order
            out.append(pair)
        else:
            index = order.get(getattr(body, "call_id", None) or "", len(order))
            phase.append((index, len(phase), pair))
    flush()
    return out


def compare_events(
    recorded: list[tuple[Event, Body]],
    redriven: list[tuple[Event, Body]],
    turns: list[int],
    *,
    recording_complete: bool,
) -> EventDivergence | None:
    """The first divergence of ``redriven`` from ``recorded`` (type, then body), each
    taken :func:`in_call_order`.

    ``turns[seq]`` is the recorded turn of each seq. When the recording is not
    complete (the session never ended) events beyond its end are not compared."""
    recorded, redriven = in_call_order(recorded), in_call_order(redriven)
    for (re_, rb), (de, db) in zip(recorded, redriven, strict=False):
        turn = turns[re_.seq]
        if re_.type != de.type:
            return EventDivergence(
                seq=re_.seq,
                turn=turn,
                recorded_type=re_.type,
                redriven_type=de.type,
                field="event type",
                recorded=re_.type,
                redriven=de.type,
            )
        found = first_difference(comparable(rb), comparable(db))
        if found:
            path, a, b = found
            return EventDivergence(
                seq=re_.seq,
                turn=turn,
                recorded_type=re_.type,
                redriven_type=de.type,
                field=path,
                recorded=_show(a),
                redriven=_show(b),
            )
    if len(redriven) < len(recorded):
        re_ = recorded[len(redriven)][0]
        return EventDivergence(
            seq=re_.seq,
            turn=turns[re_.seq],
            recorded_type=re_.type,
            redriven_type=None,
            field="event",
            recorded=re_.type,
            redriven="(no event: the re-driven session stopped)",
        )
    if len(redriven) > len(recorded) and recording_complete:
        de = redriven[len(recorded)][0]
        return EventDivergence(
            seq=de.seq,
            turn=turns[-1] if turns else 0,
            recorded_type=None,
            redriven_type=de.type,
            field="event",
            recorded="(no event: the recorded session ended)",
            redriven=de.type,
        )
    return None


def _show(value: Any, limit: int = 200) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."
