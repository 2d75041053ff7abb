"""Live telemetry: an observer of appended events that exports spans and metrics."""

from __future__ import annotations

import logging
from collections.abc import Iterable

from opentelemetry import metrics, trace
from opentelemetry.metrics import MeterProvider
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import SpanProcessor, TracerProvider
from opentelemetry.sdk.trace.sampling import Decision
from opentelemetry.trace import SpanKind

from eventlog import Event

from ._mapping import BlobLookup, SessionMapper
from ._metrics import MetricsRecorder
from ._sdk import default_resource, span_processor_of, to_readable

_log = logging.getLogger("skillog.otel")


class OtelObserver:
    """Exports a session's spans and metrics while it runs; pass it to the runtime.

    Call it with every committed event, in append order, from one thread (the
    runtime's observer contract: ``Callable[[eventlog.Event], None]``, invoked after
    each append commits). It feeds the same mapping as offline export, so the spans
    carry the same ids and recorded timestamps as a later ``skillog otel export`` of
    the log. A span is handed to the span processors when its closing event arrives
    (the root at ``session.ended``); use a ``BatchSpanProcessor`` so exporting never
    blocks the agent loop.

    ``tracer_provider`` defaults to the global one; if that is not an SDK
    ``TracerProvider`` (nothing configured), no spans are emitted. ``span_processor``
    overrides where spans go. The provider's sampler decides per session, from the
    derived trace id, so ratio sampling keeps or drops whole sessions consistently.
    ``meter_provider`` defaults to the global one. ``content=True`` opts into message
    content; ``blobs`` is a synchronous lookup for prompt blobs (without it, content
    covers responses and tool arguments/results but not the prompt history).

    The observer never raises into the runtime: a failure is logged to the
    ``skillog.otel`` logger and counted in :attr:`errors`.
    """

    def __init__(
        self,
        tracer_provider: TracerProvider | None = None,
        meter_provider: MeterProvider | None = None,
        *,
        span_processor: SpanProcessor | None = None,
        content: bool = False,
        blobs: BlobLookup | None = None,
    ) -> None:
        provider = tracer_provider if tracer_provider is not None else trace.get_tracer_provider()
        self._sampler = None
        self._resource: Resource = default_resource()
        self._processor: SpanProcessor | None = span_processor
        if isinstance(provider, TracerProvider):
            self._resource = provider.resource
            self._sampler = provider.sampler
            if self._processor is None:
                self._processor = span_processor_of(provider)
        self._metrics = MetricsRecorder(
            meter_provider if meter_provider is not None else metrics.get_meter_provider()
        )
        self._content = content
        self._blobs = blobs
        self._sessions: dict[str, tuple[SessionMapper, bool]] = {}  # stream -> (mapper, sampled)
        self._skipped: set[str] = set()
        self.errors = 0
        """Events whose telemetry failed (logged to the ``skillog.otel`` logger)."""

    def __call__(self, event: Event) -> None:
        """Map one committed event and export whatever it finished."""
        try:
            self._observe(event, emit=True)
        except Exception:
            self.errors += 1
            _log.exception(
                "telemetry for stream %r seq %d failed; the session continues, "
                "export it later with `skillog otel export`",
                event.stream,
                event.seq,
            )

    def resume(self, events: Iterable[Event]) -> None:
        """Rebuild a session's mapping state from the events it already has, without
        exporting them (a resumed session's earlier spans were exported before, or are
        left to offline export, which yields the same ids)."""
        for event in events:
            self._observe(event, emit=False)

    def _observe(self, event: Event, *, emit: bool) -> None:
        entry = self._sessions.get(event.stream)
        if entry is None:
            if event.seq != 0:
                if event.stream not in self._skipped:
                    self._skipped.add(event.stream)
                    _log.warning(
                        "stream %r was first seen at seq %d: its trace id needs seq 0; "
                        "call OtelObserver.resume() with its earlier events, or export it "
                        "offline",
                        event.stream,
                        event.seq,
                    )
                return
            mapper = SessionMapper(content=self._content, blobs=self._blobs)
            entry = (mapper, True)
            self._sessions[event.stream] = entry
        mapper, sampled = entry
        first = mapper.stream is None
        spans, measurements = mapper.feed(event)
        if first:
            sampled = self._sample(mapper.trace_id)
            self._sessions[event.stream] = (mapper, sampled)
        if mapper.ended:
            del self._sessions[event.stream]
        if not emit:
            return
        self._metrics.record(measurements)
        if sampled and self._processor is not None:
            on_end = self._processor.on_end
            resource = self._resource
            for span in spans:
                on_end(to_readable(span, resource))

    def _sample(self, trace_id: int) -> bool:
        if self._sampler is None:
            return True
        result = self._sampler.should_sample(None, trace_id, "invoke_agent", SpanKind.INTERNAL)
        return result.decision is Decision.RECORD_AND_SAMPLE

    def force_flush(self, timeout_millis: int = 30_000) -> bool:
        """Ask the span processor to export what it buffers; True if it finished."""
        if self._processor is None:
            return True
        return bool(self._processor.force_flush(timeout_millis))
