"""Live export: the observer fed event by event, as the runtime does after each append."""

from __future__ import annotations

import logging
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.sdk.trace.sampling import ALWAYS_OFF, TraceIdRatioBased

from eventlog import Event, MemoryStore
from otel import (
    ExportOptions,
    OtelObserver,
    export_sessions,
    otlp_exporter,
    summarize_log,
    traces_url,
)


async def run_live(
    kit: Any, observer: Callable[[Event], None], stream: str = "s1", t0: int | None = None
) -> MemoryStore:
    """Append a session one event per append, calling ``observer`` after each commit."""
    store = MemoryStore()
    events, blobs = kit.build_session(kit.T0 if t0 is None else t0)
    for seq, event in enumerate(events):
        (committed,) = await store.append(stream, [event], expected_seq=seq, blobs=blobs)
        observer(committed)
    return store


def _provider(exporter: InMemorySpanExporter, **kwargs: Any) -> TracerProvider:
    provider = TracerProvider(resource=Resource({"service.name": "skillog"}), **kwargs)
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    return provider


def _key(spans: list[ReadableSpan]) -> list[str]:
    return sorted(s.to_json() for s in spans)


async def test_live_and_offline_spans_are_identical(kit: Any) -> None:
    live = InMemorySpanExporter()
    store = await run_live(kit, OtelObserver(_provider(live), MeterProvider()))
    offline = InMemorySpanExporter()
    await export_sessions(store, offline, resource=Resource({"service.name": "skillog"}))
    assert len(live.get_finished_spans()) == 9
    assert _key(list(live.get_finished_spans())) == _key(list(offline.get_finished_spans()))


async def test_children_are_exported_as_they_end_and_the_root_last(kit: Any) -> None:
    exporter = InMemorySpanExporter()
    observer = OtelObserver(_provider(exporter), MeterProvider())
    store = MemoryStore()
    events, blobs = kit.build_session()
    seen: list[int] = []
    for seq, event in enumerate(events):
        (committed,) = await store.append("s1", [event], expected_seq=seq, blobs=blobs)
        observer(committed)
        seen.append(len(exporter.get_finished_spans()))
    first_chat_end = next(i for i, e in enumerate(events) if e.type == "model.responded")
    assert seen[first_chat_end - 1] == 0 and seen[first_chat_end] == 1
    assert seen[-2] == 8 and seen[-1] == 9
    assert exporter.get_finished_spans()[-1].name == "invoke_agent demo-agent"


async def test_live_over_otlp_matches_offline_over_otlp(kit: Any, receiver: Any) -> None:
    url = traces_url(receiver.url)
    provider = TracerProvider(resource=Resource({"service.name": "skillog"}))
    provider.add_span_processor(BatchSpanProcessor(otlp_exporter(url, timeout_s=5)))
    store = await run_live(kit, OtelObserver(provider, MeterProvider()))
    provider.shutdown()  # flushes the batch
    live = {s.span_id: s.SerializeToString() for s in receiver.spans}
    receiver.requests.clear()
    exporter = otlp_exporter(url, timeout_s=5)
    await export_sessions(store, exporter, resource=Resource({"service.name": "skillog"}))
    exporter.shutdown()
    offline = {s.span_id: s.SerializeToString() for s in receiver.spans}
    assert len(live) == 9 and live == offline


def _points(reader: InMemoryMetricReader) -> dict[str, list[Any]]:
    data = reader.get_metrics_data()
    assert data is not None
    return {
        m.name: list(m.data.data_points)
        for rm in data.resource_metrics
        for sm in rm.scope_metrics
        for m in sm.metrics
    }


async def test_live_metrics_agree_with_the_summary_from_the_log(kit: Any) -> None:
    reader = InMemoryMetricReader()
    observer = OtelObserver(_provider(InMemorySpanExporter()), MeterProvider([reader]))
    store = await run_live(kit, observer)
    points = _points(reader)

    def total(name: str, **attrs: Any) -> int:
        return sum(
            p.value for p in points[name] if all(p.attributes.get(k) == v for k, v in attrs.items())
        )

    skill = "gen_ai.skill.name"
    assert total("skillog.skill.activations", **{skill: "pdf"}) == 1
    assert total("skillog.skill.activation_failures", **{skill: "nope"}) == 1
    assert total("skillog.skill.resource_reads", **{skill: "pdf"}) == 1
    assert total("skillog.skill.script_runs", **{skill: "pdf"}) == 1
    assert total("skillog.skill.script_failures", **{skill: "pdf"}) == 1
    assert total("skillog.policy.denials", **{skill: "csv-tools"}) == 1
    usage = points["gen_ai.client.token.usage"]
    assert sum(p.sum for p in usage if p.attributes["gen_ai.token.type"] == "input") == 840
    durations = points["gen_ai.client.operation.duration"]
    assert sum(p.count for p in durations) == 5  # 3 answers, 1 retried failure, 1 final failure
    assert list(durations[0].explicit_bounds)[:3] == [0.01, 0.02, 0.04]

    summary = await summarize_log(store)
    (s1,) = summary.sessions
    assert s1.skills["pdf"].activations == 1 and s1.skills["pdf"].script_failures == 1
    assert s1.skills["nope"].activation_failures == 1
    assert s1.skills["csv-tools"].policy_denials == 1
    assert (s1.model_calls, s1.model_failures, s1.input_tokens) == (5, 2, 840)
    assert (s1.ended, s1.end_reason, s1.turns) == (True, "error", 4)


async def test_the_sampler_decides_per_session(kit: Any) -> None:
    dropped = InMemorySpanExporter()
    await run_live(kit, OtelObserver(_provider(dropped, sampler=ALWAYS_OFF), MeterProvider()))
    assert dropped.get_finished_spans() == ()
    # Ratio sampling keeps or drops whole sessions, the same way for the same trace id.
    kept = InMemorySpanExporter()
    observer = OtelObserver(_provider(kept, sampler=TraceIdRatioBased(0.5)), MeterProvider())
    for i in range(20):
        await run_live(kit, observer, stream=f"s{i}", t0=kit.T0 + i)
    per_trace: dict[int, int] = {}
    for span in kept.get_finished_spans():
        assert span.context is not None
        per_trace[span.context.trace_id] = per_trace.get(span.context.trace_id, 0) + 1
    assert 0 < len(per_trace) < 20
    assert set(per_trace.values()) == {9}


async def test_a_failing_exporter_never_reaches_the_runtime(
    kit: Any, caplog: pytest.LogCaptureFixture
) -> None:
    class Boom(InMemorySpanExporter):
        def export(self, spans: Any) -> Any:
            raise RuntimeError("collector exploded")

    provider = TracerProvider()
    processor = SimpleSpanProcessor(Boom())
    observer = OtelObserver(provider, MeterProvider(), span_processor=processor)

    def on_end(span: Any) -> None:
        raise RuntimeError("processor exploded")

    processor.on_end = on_end  # type: ignore[method-assign]
    with caplog.at_level(logging.ERROR, logger="skillog.otel"):
        await run_live(kit, observer)
    assert observer.errors == 9  # one per span-closing event, each logged, none raised
    assert "export it later with `skillog otel export`" in caplog.text


async def test_resume_rebuilds_state_for_a_session_seen_midway(kit: Any) -> None:
    exporter = InMemorySpanExporter()
    observer = OtelObserver(_provider(exporter), MeterProvider())
    store = MemoryStore()
    events, blobs = kit.build_session()
    committed = list(await store.append("s1", events, expected_seq=0, blobs=blobs))
    half = len(committed) // 2
    observer.resume(committed[:half])
    for event in committed[half:]:
        observer(event)
    offline = InMemorySpanExporter()
    await export_sessions(store, offline, options=ExportOptions())
    live_ids = {s.context.span_id for s in exporter.get_finished_spans() if s.context}
    offline_ids = {s.context.span_id for s in offline.get_finished_spans() if s.context}
    assert live_ids and live_ids < offline_ids
    assert "invoke_agent demo-agent" in {s.name for s in exporter.get_finished_spans()}


async def test_a_session_first_seen_midway_is_skipped_with_a_warning(
    kit: Any, caplog: pytest.LogCaptureFixture
) -> None:
    exporter = InMemorySpanExporter()
    observer = OtelObserver(_provider(exporter), MeterProvider())
    store = MemoryStore()
    events, blobs = kit.build_session()
    committed = await store.append("s1", events, expected_seq=0, blobs=blobs)
    with caplog.at_level(logging.WARNING, logger="skillog.otel"):
        for event in committed[3:]:
            observer(event)
    assert exporter.get_finished_spans() == ()
    assert caplog.text.count("first seen at seq 3") == 1
    assert observer.errors == 0


async def test_the_real_runtime_live_matches_offline(autojump_clock: Any) -> None:
    from orchestrator._loop import Agent, RetryPolicy
    from orchestrator.adapters import ScriptedModel

    model = ScriptedModel(
        [{"error": {"kind": "rate_limited", "retry_after_ms": 200}}, {"text": "fine"}]
    )
    live = InMemorySpanExporter()
    observer = OtelObserver(_provider(live), MeterProvider())
    agent = Agent(model=model, model_name="m", retry=RetryPolicy(base_ms=10), observers=[observer])
    store = MemoryStore()
    session = await agent.run(store, "hi")
    offline = InMemorySpanExporter()
    await export_sessions(store, offline, resource=Resource({"service.name": "skillog"}))
    assert _key(list(live.get_finished_spans())) == _key(list(offline.get_finished_spans()))
    names = sorted(s.name for s in live.get_finished_spans())
    assert names == ["chat m", "invoke_agent skillog"]
    chat = next(s for s in live.get_finished_spans() if s.name == "chat m")
    assert [e.name for e in chat.events] == ["skillog.model.retry"]
    assert observer.errors == 0 and session.id


async def test_a_streamed_response_carries_its_time_to_first_chunk() -> None:
    """Live only: the chat span of a streamed answer has
    gen_ai.response.time_to_first_chunk, and the histogram of the GenAI conventions has
    a point; one not streamed has neither, and the log is the same."""
    from orchestrator import PreviewTap
    from orchestrator._loop import Agent
    from orchestrator.adapters import ScriptedModel

    turns = [{"text": "streamed, slowly at first", "stream_delay_ms": 50}]
    spans, reader = InMemorySpanExporter(), InMemoryMetricReader()
    observer = OtelObserver(_provider(spans), MeterProvider(metric_readers=[reader]))
    tap = PreviewTap("streamed", observer.preview)
    streamed = Agent(
        model=ScriptedModel(turns), model_name="m", observers=[observer, tap.event],
        on_delta=tap.delta,
    )  # fmt: skip
    store = MemoryStore()
    await streamed.run(store, "hi", session_id="streamed")
    (chat,) = [s for s in spans.get_finished_spans() if s.name == "chat m"]
    first = chat.attributes["gen_ai.response.time_to_first_chunk"]  # type: ignore[index]
    assert isinstance(first, float) and 0.05 <= first < 5
    (point,) = _points(reader)["gen_ai.client.operation.time_to_first_chunk"]
    assert point.count == 1 and point.attributes["gen_ai.operation.name"] == "chat"

    plain = Agent(model=ScriptedModel(turns), model_name="m", observers=[observer])
    await plain.run(store, "hi", session_id="plain")
    chats = [s for s in spans.get_finished_spans() if s.name == "chat m"]
    assert "gen_ai.response.time_to_first_chunk" not in (chats[-1].attributes or {})
    (point,) = _points(reader)["gen_ai.client.operation.time_to_first_chunk"]
    assert point.count == 1
    a = [e.type for e in [e async for e in store.read("streamed")]]
    b = [e.type for e in [e async for e in store.read("plain")]]
    assert a == b


async def test_mcp_progress_is_a_span_event_of_its_tool_span_live_only() -> None:
    """Live only: each MCP progress notification of a call is a skillog.mcp.progress
    span event of its execute_tool span (its message with content only); the offline
    export of the same log has none (the log holds no tick)."""
    import sys

    from orchestrator import PreviewTap
    from orchestrator._loop import Agent
    from orchestrator.adapters import ScriptedModel
    from orchestrator.mcp import McpServerConfig

    server = Path(__file__).parents[1] / "orchestrator" / "mcp" / "mcp_server.py"
    steps = {"tool_calls": [{"name": "mcp__modern__steps", "arguments": {"count": 3}}]}
    spans = InMemorySpanExporter()
    observer = OtelObserver(_provider(spans), MeterProvider())
    tap = PreviewTap("steps", observer.preview)
    agent = Agent(
        model=ScriptedModel([steps, {"text": "done"}]), model_name="m",
        mcp_servers=[McpServerConfig(name="modern", command=sys.executable,
                                     args=(str(server), "modern"))],
        observers=[observer, tap.event], on_progress=tap.progress,
    )  # fmt: skip
    store = MemoryStore()
    try:
        await agent.run(store, "take steps", session_id="steps")
    finally:
        agent.close()
    (tool,) = [s for s in spans.get_finished_spans() if s.name == "execute_tool mcp__modern__steps"]
    ticks = [e for e in tool.events if e.name == "skillog.mcp.progress"]
    assert [dict(e.attributes or {}) for e in ticks] == [
        {"skillog.mcp.server": "modern", "skillog.mcp.progress": f"{n}.0",
         "skillog.mcp.total": "3.0"}
        for n in (1, 2, 3)
    ]  # fmt: skip
    assert all(tool.start_time <= e.timestamp for e in ticks)  # type: ignore[operator]
    assert observer.errors == 0
    offline = InMemorySpanExporter()
    await export_sessions(store, offline, resource=Resource({"service.name": "skillog"}))
    (again,) = [s for s in offline.get_finished_spans() if s.name == tool.name]
    assert not [e for e in again.events if e.name == "skillog.mcp.progress"]
