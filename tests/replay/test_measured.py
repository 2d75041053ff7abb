"""Which timed fields a re-drive leaves out of its comparison (``replay.MEASURED``).

A field timed by the runtime around I/O cannot match in a re-drive, which calls no
model and no server; one left out of ``MEASURED`` by mistake makes re-drive report
non-determinism whenever the recorded call took a millisecond or more (it did:
``mcp.sample_answered`` under load)."""

from __future__ import annotations

import msgspec

from orchestrator import McpSampleAnswered
from orchestrator._events import Event
from replay import MEASURED
from replay._compare import comparable

HANDED_BACK = {"script.executed", "mcp.result"}
"""Durations that are part of a recorded effect: the re-drive hands them back from the
recording, so they are compared."""


def _bodies() -> list[type[Event]]:
    found, todo = [], list(Event.__subclasses__())
    while todo:
        cls = todo.pop()
        todo.extend(cls.__subclasses__())
        found.append(cls)
    return found


def test_every_timed_field_is_measured_or_handed_back() -> None:
    timed = {
        cls.event_type: cls
        for cls in _bodies()
        if any(f.name == "duration_ms" for f in msgspec.structs.fields(cls))
    }
    assert timed, "no event body has a duration_ms field any more: update this test"
    for event_type, cls in sorted(timed.items()):
        if event_type in HANDED_BACK:
            assert cls not in MEASURED, event_type
        else:
            assert "duration_ms" in MEASURED.get(cls, frozenset()), event_type


def test_a_sampling_answers_time_is_not_compared() -> None:
    recorded = McpSampleAnswered(call_id="c1", server="s", index=0, error="x", duration_ms=1)
    redriven = McpSampleAnswered(call_id="c1", server="s", index=0, error="x", duration_ms=0)
    assert comparable(recorded) == comparable(redriven)
