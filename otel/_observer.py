"""Live telemetry: an observer of appended events that exports spans and metrics."""

from __future__ import annotations

import logging
import time
from collections import deque
from collections.abc import Iterable

import msgspec
import trio
import trio.testing
from opentelemetry import context as otel_context
from opentelemetry import metrics, trace
from opentelemetry.context import Context
from opentelemetry.metrics import MeterProvider
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import SpanProcessor, TracerProvider
from opentelemetry.sdk.trace.sampling import Decision
from opentelemetry.trace import SpanKind

from eventlog import Event
from orchestrator import Preview

from ._errors import OtelError
from ._mapping import BlobLookup, SessionMapper
from ._metrics import MetricsRecorder
from ._sdk import default_resource, span_processor_of, to_readable

_log = logging.getLogger("skillog.otel")

#: How long the trio loop must have had nothing to do before a deferred observer maps
#: queued events. Not zero on purpose: when the runtime starts awaiting an append, the
#: SQLite writer thread still needs the GIL to build and insert its rows before it
#: blocks in fsync; mapping at that instant would hold the GIL and delay the commit by
#: as much as it saves. A millisecond of idle (the finest an epoll wait resolves) means
#: the writer is in fsync or done, or the runtime is waiting on a model or a script.
IDLE_CUSHION_S = 0.001

#: Default bound of a deferred observer's queue (see ``max_pending``).
MAX_PENDING = 4096


class OtelObserver:
    """Exports a session's spans and metrics while it runs; pass it to the runtime.

    Call it with every committed event, in append order, from the trio thread (the
    runtime's observer contract: ``Callable[[eventlog.Event], None]``, invoked after
    each append commits). It feeds the same mapping as offline export, so the spans
    carry the same ids and recorded timestamps as a later ``skillog otel export`` of
    the log. A span is handed to the span processors when its closing event is mapped
    (the root at ``session.ended``); use a ``BatchSpanProcessor`` so exporting never
    blocks the agent loop.

    ``tracer_provider`` defaults to the global one; if that is not an SDK
    ``TracerProvider`` (nothing configured), no spans are emitted. ``span_processor``
    overrides where spans go. The provider's sampler decides per session, from the
    derived trace id, so ratio sampling keeps or drops whole sessions consistently.
    ``meter_provider`` defaults to the global one. ``content=True`` opts into message
    content; ``blobs`` is a synchronous lookup for prompt blobs (without it, content
    covers responses and tool arguments/results but not the prompt history).

    By default each call maps and exports at once, on the runtime's turn. With
    ``deferred=True`` a call only queues the event, and :meth:`run`, started in the
    embedding program's nursery (``await nursery.start(observer.run)``), maps and
    exports queued events while the trio loop is idle: the spans and measurements are
    the same, in the same order, only later. If ``max_pending`` events are queued, a
    call maps the oldest one itself before queueing (nothing is dropped and the
    runtime never waits on the queue); while :meth:`run` is not running, calls map
    synchronously. When :meth:`run` ends (cancelled, or its nursery exits) it maps
    whatever is still queued before returning.

    Streamed answers: pass :meth:`preview` as a preview sink (``PreviewTap(session,
    observer.preview)``, the tap's ``delta`` as ``Agent.on_delta`` and its ``event``
    among the observers) and each ``chat`` span of a streamed response carries
    ``gen_ai.response.time_to_first_chunk``, with the
    ``gen_ai.client.operation.time_to_first_chunk`` histogram: measured live, from when
    the request's ``prompt.rendered`` was reported to the first delta, so only live
    export has them (the log holds no preview). Pass the tap's ``progress`` as
    ``Agent.on_progress`` too and each MCP progress notification becomes a
    ``skillog.mcp.progress`` span event of its ``execute_tool`` span (live only too).

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
        deferred: bool = False,
        max_pending: int = MAX_PENDING,
    ) -> None:
        if max_pending < 1:
            raise OtelError(f"OtelObserver: max_pending must be at least 1, got {max_pending}")
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
        self._deferred = deferred
        self._max_pending = max_pending
        # Each event with the OTel context current when the runtime reported it, so
        # measurements see the same context (exemplars) as when mapped at once.
        self._pending: deque[tuple[Event, Context]] = deque()
        self._running = False
        self._wakeup: trio.Event | None = None
        self._warned_not_running = False
        # (stream, turn) -> when its request was reported / its time to first chunk (s)
        self._requested: dict[tuple[str, int], int] = {}
        self._first_chunk: dict[tuple[str, int], float] = {}

    @property
    def deferred(self) -> bool:
        """Whether calls queue events for :meth:`run` (else they map at once)."""
        return self._deferred

    @property
    def pending(self) -> int:
        """Events queued for :meth:`run` and not mapped yet (always 0 unless deferred)."""
        return len(self._pending)

    def preview(self, preview: Preview) -> None:
        """A preview sink (see the class docstring): times the first chunk of a turn;
        an MCP call's progress becomes a span event of its tool span."""
        if preview.kind == "progress":
            self._progress(preview)
            return
        start = self._requested.pop((preview.session, preview.turn), None)
        if start is not None:
            elapsed = (time.monotonic_ns() - start) / 1e9
            self._first_chunk[(preview.session, preview.turn)] = elapsed

    def _progress(self, preview: Preview) -> None:
        try:
            # Deferred, the call's tool.called may still be queued: map what is queued
            # first (rare: progress comes only while an MCP call runs).
            self._drain()
            entry = self._sessions.get(preview.session)
            if entry is not None:
                entry[0].progress(
                    preview.call_id,
                    time.time_ns(),  # live only, never hashed: the log has no tick
                    server=preview.name,
                    progress=preview.progress or "",
                    total=preview.total,
                    message=preview.text,
                )
        except Exception:
            self.errors += 1
            _log.exception("telemetry of a progress notification of %r failed", preview.session)

    def __call__(self, event: Event) -> None:
        """Map one committed event and export whatever it finished; deferred, queue it."""
        if event.type.split("@")[0] == "prompt.rendered":  # timed now, even if deferred
            self._requested[(event.stream, _turn_of(event))] = time.monotonic_ns()
        if not self._running:
            if self._deferred and not self._warned_not_running:
                self._warned_not_running = True
                _log.warning(
                    "deferred OtelObserver called while its run() is not running: mapping "
                    "synchronously; start it with `await nursery.start(observer.run)`"
                )
            self._process(event, None)
            return
        pending = self._pending
        if len(pending) >= self._max_pending:
            self._process(*pending.popleft())  # full: pay for the oldest now, keep order
        pending.append((event, otel_context.get_current()))
        wakeup = self._wakeup
        if wakeup is not None:
            self._wakeup = None
            wakeup.set()

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Map and export queued events while the trio loop is idle; runs until cancelled.

        Start it with ``await nursery.start(observer.run)`` before the runtime appends;
        it reports started once calls are being queued. Queued events are mapped, in
        order, once the loop has had no runnable task for a millisecond, yielding to
        other tasks between events; on exit everything still queued is mapped before
        this returns, so cancelling it loses nothing."""
        if not self._deferred:
            raise OtelError(
                "OtelObserver.run() serves deferred mode; construct the observer with "
                "deferred=True (without it every call maps synchronously)"
            )
        if self._running:
            raise OtelError("OtelObserver.run() is already running; start it once")
        self._running = True
        pending = self._pending
        try:
            task_status.started()
            while True:
                if not pending:
                    wakeup = self._wakeup = trio.Event()
                    await wakeup.wait()
                # trio's public way to learn that the loop is idle (it lives in
                # trio.testing but is plain run-loop API, not a test double).
                await trio.testing.wait_all_tasks_blocked(IDLE_CUSHION_S)
                while pending:
                    self._process(*pending.popleft())
                    await trio.lowlevel.checkpoint()
        finally:
            self._running = False
            self._wakeup = None
            # Synchronous, so a cancellation cannot interrupt it: nothing queued is lost.
            self._drain()

    def _drain(self) -> None:
        pending = self._pending
        while pending:
            self._process(*pending.popleft())

    def _process(self, event: Event, context: Context | None) -> None:
        try:
            self._observe(event, emit=True, context=context)
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
        self._drain()  # keep the order of anything queued
        for event in events:
            self._observe(event, emit=False, context=None)

    def _observe(self, event: Event, *, emit: bool, context: Context | None) -> None:
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
            entry = (SessionMapper(content=self._content, blobs=self._blobs), True)
            self._sessions[event.stream] = entry
        mapper, sampled = entry
        first = mapper.stream is None
        if event.type.split("@")[0] == "model.responded":
            key = (event.stream, _turn_of(event))
            self._requested.pop(key, None)
            mapper.first_chunk_s = self._first_chunk.pop(key, None)
        spans, measurements = mapper.feed(event)
        if first:
            sampled = self._sample(mapper.trace_id)
            self._sessions[event.stream] = (mapper, sampled)
        if mapper.ended:
            del self._sessions[event.stream]
            for key in [k for k in self._requested if k[0] == event.stream]:
                del self._requested[key]
        if not emit:
            return
        if measurements:
            self._metrics.record(measurements, context)
        if spans and sampled and self._processor is not None:
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
        """Map anything queued, then ask the span processor to export what it buffers;
        True if it finished."""
        self._drain()
        if self._processor is None:
            return True
        return bool(self._processor.force_flush(timeout_millis))


class _Turn(msgspec.Struct, frozen=True):
    turn: int = 0


def _turn_of(event: Event) -> int:
    return msgspec.json.decode(event.body, type=_Turn).turn
