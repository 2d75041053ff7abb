"""Telemetry benchmarks: offline export throughput, and live overhead per appended event.

    .venv/bin/python bench/otel.py [--sessions N]

Offline: N recorded sessions (9 spans each: the test suite's realistic session) are
verified, mapped and exported to an in-process exporter; prints spans/s (target >=
20,000). Live: the same events are appended one per append to a MemoryStore, with and
without an OtelObserver (BatchSpanProcessor + in-memory exporter, SDK MeterProvider),
in the same run; prints the cost per event and the ratio. The runtime's per-turn
overhead with the observer is measured by bench/runtime.py.
"""

from __future__ import annotations

import argparse
import importlib.util
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import trio
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from eventlog import Event, MemoryStore, NewEvent  # noqa: E402
from otel import ExportOptions, OtelObserver, export_sessions, map_session  # noqa: E402


def _kit() -> Any:
    # The realistic session lives with the tests; load it by path (tests are not a package).
    spec = importlib.util.spec_from_file_location("otel_kit", ROOT / "tests/otel/conftest.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


class CountingExporter(SpanExporter):
    """An in-process exporter that keeps only a count (no memory growth)."""

    def __init__(self) -> None:
        self.spans = 0

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        self.spans += len(spans)
        return SpanExportResult.SUCCESS


async def _store(kit: Any, sessions: int) -> MemoryStore:
    store = MemoryStore()
    events, blobs = kit.build_session()
    for i in range(sessions):
        await store.append(f"s{i:06d}", events, expected_seq=0, blobs=blobs)
    return store


async def offline(kit: Any, sessions: int) -> None:
    store = await _store(kit, sessions)
    all_events = [[e async for e in store.read(s.stream)] for s in await store.streams()]
    # Best of three runs: the figure is the code's speed, not the neighbours' load.
    mapped, elapsed, spans = [], [], 0
    for _ in range(3):
        start = time.perf_counter()
        spans = sum(len(map_session(events, metrics=False)[0]) for events in all_events)
        mapped.append(time.perf_counter() - start)
        exporter = CountingExporter()
        start = time.perf_counter()
        report = await export_sessions(store, exporter, options=ExportOptions(batch_spans=2048))
        elapsed.append(time.perf_counter() - start)
        assert report.spans == exporter.spans == spans
    print(f"offline: {sessions} sessions, {spans} spans (best of 3)")
    print(f"  mapping only          {spans / min(mapped):>10,.0f} spans/s")
    print(f"  verify+map+export     {spans / min(elapsed):>10,.0f} spans/s  (target >= 20,000)")


async def _append_all(
    sessions: int,
    events: list[NewEvent],
    blobs: list[bytes],
    observer: Callable[[Event], None] | None,
) -> float:
    store = MemoryStore()
    start = time.perf_counter()
    for i in range(sessions):
        stream = f"s{i:06d}"
        for seq, event in enumerate(events):
            committed = await store.append(stream, [event], expected_seq=seq, blobs=blobs)
            if observer is not None:
                for e in committed:
                    observer(e)
    return time.perf_counter() - start


async def live(kit: Any, sessions: int) -> None:
    events, blobs = kit.build_session()
    n = sessions * len(events)
    provider = TracerProvider()
    provider.add_span_processor(BatchSpanProcessor(CountingExporter(), max_queue_size=65536))
    observer = OtelObserver(provider, MeterProvider([InMemoryMetricReader()]))
    # Interleave the runs so drift (CPU frequency, GC) hits both alike; take the best.
    bare, observed = [], []
    for _ in range(3):
        bare.append(await _append_all(sessions, events, blobs, None))
        observed.append(await _append_all(sessions, events, blobs, observer))
    provider.shutdown()
    b, o = min(bare) / n * 1e6, min(observed) / n * 1e6
    print(f"live: {n} events appended one per append to a MemoryStore")
    print(f"  append, no observer    {b:>8.1f} us/event")
    print(f"  append + OtelObserver  {o:>8.1f} us/event  (observer {o - b:.1f} us/event)")
    print(f"  ratio                  {o / b:>8.2f}x  (per event, in-memory store: a worst case)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sessions", type=int, default=3000)
    args = parser.parse_args()
    kit = _kit()
    trio.run(offline, kit, args.sessions)
    trio.run(live, kit, max(args.sessions // 10, 50))


if __name__ == "__main__":
    main()
