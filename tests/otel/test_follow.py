"""``follow_export``: tail the log, export sessions as they end, resume after a restart."""

from __future__ import annotations

from typing import Any

import trio
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from eventlog import MemoryStore
from orchestrator._events import CODEC, SessionEnded
from otel import ExportState, follow_export

# Real time, not autojump_clock: the exporter runs in a thread, and an autojump clock
# would fire these deadlines while the thread works. They only bound a hang.
DEADLINE = 10


async def test_sessions_are_exported_as_they_end_and_resume_after_restart(kit: Any) -> None:
    store = MemoryStore()
    await kit.append_session(store, "a")
    await kit.append_session(store, "b", end=False)
    state = ExportState()
    exporter = InMemorySpanExporter()
    send, receive = trio.open_memory_channel[str](10)

    def follow(exporter: InMemorySpanExporter) -> Any:
        return lambda task_status: follow_export(
            store,
            exporter,
            state=state,
            on_export=lambda session, spans: send.send_nowait(session),
            task_status=task_status,
        )

    with trio.fail_after(DEADLINE):
        async with trio.open_nursery() as nursery:
            await nursery.start(follow(exporter))
            assert await receive.receive() == "a"  # b has not ended
            b_len = len([e async for e in store.read("b")])
            # As the runtime ends it: turn 4's model call kept failing (export verifies
            # the session grammar, so an impossible end would not be exported).
            ended = CODEC.encode(
                SessionEnded(reason="error", turns=4, error="model timed out"),
                recorded_at=kit.T0 + 10**10,
            )
            (committed,) = await store.append("b", [ended], expected_seq=b_len)
            assert await receive.receive() == "b"
            nursery.cancel_scope.cancel()
    assert set(state.exported) == {"a", "b"}
    assert len(exporter.get_finished_spans()) == 18
    assert state.position == committed.position + 1

    # Restart from the saved state: a and b are not sent again, c is.
    await kit.append_session(store, "c", kit.T0 + 5)
    again = InMemorySpanExporter()
    with trio.fail_after(DEADLINE):
        async with trio.open_nursery() as nursery:
            await nursery.start(follow(again))
            assert await receive.receive() == "c"
            nursery.cancel_scope.cancel()
    sessions = {s.attributes["session.id"] for s in again.get_finished_spans() if s.attributes}
    assert sessions == {"c"}
