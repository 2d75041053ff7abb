"""Deferred live export: calls only queue, ``run`` maps while the loop is idle, and the
spans and measurements are exactly those of synchronous and offline export."""

from __future__ import annotations

import json
import logging
from typing import Any

import pytest
import trio
import trio.testing
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from eventlog import Event, MemoryStore
from otel import OtelError, OtelObserver, export_sessions

RESOURCE = Resource({"service.name": "skillog"})


class Sink:
    """An observer wired to in-memory span and metric exporters."""

    def __init__(self, **kwargs: Any) -> None:
        self.spans = InMemorySpanExporter()
        provider = TracerProvider(resource=RESOURCE)
        provider.add_span_processor(SimpleSpanProcessor(self.spans))
        self.reader = InMemoryMetricReader()
        self.observer = OtelObserver(provider, MeterProvider([self.reader]), **kwargs)

    def span_keys(self) -> list[str]:
        return _key(list(self.spans.get_finished_spans()))

    def points(self) -> list[str]:
        """Every data point without its collection times, which differ between runs."""
        data = self.reader.get_metrics_data()
        assert data is not None
        out = []
        for rm in data.resource_metrics:
            for sm in rm.scope_metrics:
                for m in sm.metrics:
                    for p in m.data.data_points:
                        point = json.loads(p.to_json())
                        del point["start_time_unix_nano"], point["time_unix_nano"]
                        out.append(f"{m.name} {json.dumps(point, sort_keys=True)}")
        return sorted(out)


def _key(spans: list[ReadableSpan]) -> list[str]:
    return sorted(s.to_json() for s in spans)


async def _committed(kit: Any, store: MemoryStore | None = None) -> list[Event]:
    """The kit's session appended one event per append, as the runtime commits them."""
    store = store if store is not None else MemoryStore()
    events, blobs = kit.build_session()
    out: list[Event] = []
    for seq, event in enumerate(events):
        out += await store.append("s1", [event], expected_seq=seq, blobs=blobs)
    return out


async def test_deferred_spans_and_metrics_are_those_of_sync_and_offline(kit: Any) -> None:
    store = MemoryStore()
    events = await _committed(kit, store)
    sync = Sink()
    for event in events:
        sync.observer(event)
    deferred = Sink(deferred=True)
    async with trio.open_nursery() as nursery:
        await nursery.start(deferred.observer.run)
        for event in events:
            deferred.observer(event)
            await trio.lowlevel.checkpoint()
        await trio.testing.wait_all_tasks_blocked(0.01)
        assert deferred.observer.pending == 0
        nursery.cancel_scope.cancel()
    offline = InMemorySpanExporter()
    await export_sessions(store, offline, resource=RESOURCE)
    assert len(deferred.span_keys()) == 9
    assert deferred.span_keys() == sync.span_keys() == _key(list(offline.get_finished_spans()))
    assert deferred.points() == sync.points() and len(sync.points()) > 10
    assert deferred.observer.errors == 0


async def test_calls_only_queue_until_the_loop_is_idle(kit: Any) -> None:
    events = await _committed(kit)
    sink = Sink(deferred=True)
    async with trio.open_nursery() as nursery:
        await nursery.start(sink.observer.run)
        for event in events:
            sink.observer(event)
        assert sink.observer.pending == len(events)
        assert sink.spans.get_finished_spans() == ()
        await trio.testing.wait_all_tasks_blocked(0.01)  # longer than the observer's cushion
        assert sink.observer.pending == 0
        assert len(sink.spans.get_finished_spans()) == 9
        nursery.cancel_scope.cancel()


async def test_cancelling_run_maps_everything_still_queued(kit: Any) -> None:
    events = await _committed(kit)
    sink = Sink(deferred=True)
    with trio.CancelScope() as scope:
        async with trio.open_nursery() as nursery:
            await nursery.start(sink.observer.run)
            for event in events:
                sink.observer(event)
            scope.cancel()
    assert sink.observer.pending == 0
    assert len(sink.spans.get_finished_spans()) == 9


async def test_a_full_queue_maps_the_oldest_event_on_the_call(kit: Any) -> None:
    events = await _committed(kit)
    sync, head = Sink(), Sink()
    for i, event in enumerate(events):
        sync.observer(event)
        if i < len(events) - 3:
            head.observer(event)
    sink = Sink(deferred=True, max_pending=3)
    async with trio.open_nursery() as nursery:
        await nursery.start(sink.observer.run)
        for i, event in enumerate(events):
            sink.observer(event)
            assert sink.observer.pending == min(i + 1, 3)
        # All but the last three were mapped on the calls, in order, without waiting.
        assert sink.span_keys() == head.span_keys()
        nursery.cancel_scope.cancel()
    assert sink.span_keys() == sync.span_keys()
    assert sink.points() == sync.points()


async def test_without_run_a_deferred_observer_maps_synchronously_and_warns_once(
    kit: Any, caplog: pytest.LogCaptureFixture
) -> None:
    events = await _committed(kit)
    sink = Sink(deferred=True)
    with caplog.at_level(logging.WARNING, logger="skillog.otel"):
        for event in events:
            sink.observer(event)
    assert sink.observer.pending == 0
    assert len(sink.spans.get_finished_spans()) == 9
    assert caplog.text.count("await nursery.start(observer.run)") == 1


async def test_force_flush_maps_what_is_queued(kit: Any) -> None:
    events = await _committed(kit)
    sink = Sink(deferred=True)
    async with trio.open_nursery() as nursery:
        await nursery.start(sink.observer.run)
        for event in events:
            sink.observer(event)
        assert sink.observer.force_flush()
        assert sink.observer.pending == 0
        assert len(sink.spans.get_finished_spans()) == 9
        nursery.cancel_scope.cancel()


async def test_failures_are_counted_not_raised_in_deferred_mode(kit: Any) -> None:
    class Boom(InMemorySpanExporter):
        def export(self, spans: Any) -> Any:
            raise RuntimeError("collector exploded")

    processor = SimpleSpanProcessor(Boom())

    def on_end(span: Any) -> None:
        raise RuntimeError("processor exploded")

    processor.on_end = on_end  # type: ignore[method-assign]
    observer = OtelObserver(
        TracerProvider(), MeterProvider(), span_processor=processor, deferred=True
    )
    events = await _committed(kit)
    async with trio.open_nursery() as nursery:
        await nursery.start(observer.run)
        for event in events:
            observer(event)
        nursery.cancel_scope.cancel()
    assert observer.errors == 9


async def test_run_is_for_deferred_mode_and_runs_once() -> None:
    with pytest.raises(OtelError, match="deferred=True"):
        await OtelObserver(TracerProvider(), MeterProvider()).run()
    observer = OtelObserver(TracerProvider(), MeterProvider(), deferred=True)
    async with trio.open_nursery() as nursery:
        await nursery.start(observer.run)
        with pytest.raises(OtelError, match="already running"):
            await observer.run()
        nursery.cancel_scope.cancel()
    with pytest.raises(OtelError, match="max_pending"):
        OtelObserver(TracerProvider(), MeterProvider(), deferred=True, max_pending=0)


async def test_the_real_runtime_deferred_matches_offline(autojump_clock: Any) -> None:
    from orchestrator._loop import Agent, RetryPolicy
    from orchestrator.adapters import ScriptedModel

    model = ScriptedModel(
        [{"error": {"kind": "rate_limited", "retry_after_ms": 200}}, {"text": "fine"}]
    )
    sink = Sink(deferred=True)
    agent = Agent(
        model=model, model_name="m", retry=RetryPolicy(base_ms=10), observers=[sink.observer]
    )
    store = MemoryStore()
    async with trio.open_nursery() as nursery:
        await nursery.start(sink.observer.run)
        await agent.run(store, "hi")
        nursery.cancel_scope.cancel()
    offline = InMemorySpanExporter()
    await export_sessions(store, offline, resource=RESOURCE)
    assert sink.span_keys() == _key(list(offline.get_finished_spans()))
    names = sorted(s.name for s in sink.spans.get_finished_spans())
    assert names == ["chat m", "invoke_agent skillog"]
    assert sink.observer.errors == 0
