"""The edge to the OpenTelemetry SDK: turning :class:`SpanData` into ``ReadableSpan``.

skillog does not start spans through a ``Tracer``: a tracer would pick random ids and
the current clock, but our ids are derived from the log and our times are the recorded
ones. So the mapping's spans are built as finished ``ReadableSpan`` objects and handed
to exporters (offline) or to a ``TracerProvider``'s span processors (live), which
is exactly what a tracer does when a span ends.
"""

from __future__ import annotations

from collections.abc import Sequence
from importlib.metadata import PackageNotFoundError, version

from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import Event as SdkEvent
from opentelemetry.sdk.trace import ReadableSpan, SpanProcessor, TracerProvider
from opentelemetry.sdk.util.instrumentation import InstrumentationScope
from opentelemetry.trace import SpanContext, SpanKind, Status, StatusCode, TraceFlags

from ._errors import OtelError
from ._spandata import SpanData

try:
    _VERSION = version("skillog")
except PackageNotFoundError:  # running from a source tree that was never installed
    _VERSION = "0"

#: The instrumentation scope of every span and instrument skillog emits.
SCOPE = InstrumentationScope("skillog.otel", _VERSION)

_SAMPLED = TraceFlags(TraceFlags.SAMPLED)
_KINDS = {"internal": SpanKind.INTERNAL, "client": SpanKind.CLIENT}
_STATUS = {"unset": StatusCode.UNSET, "ok": StatusCode.OK, "error": StatusCode.ERROR}
_UNSET = Status(StatusCode.UNSET)


def default_resource() -> Resource:
    """The resource of offline exports: ``service.name`` from the environment
    (``OTEL_SERVICE_NAME`` / ``OTEL_RESOURCE_ATTRIBUTES``), else ``skillog``."""
    detected = Resource.create({})
    name = detected.attributes.get("service.name")
    if not isinstance(name, str) or name.startswith("unknown_service"):
        return detected.merge(Resource({"service.name": "skillog"}))
    return detected


def to_readable(span: SpanData, resource: Resource) -> ReadableSpan:
    """A finished SDK span with the mapping's ids, times, attributes and events."""
    context = SpanContext(span.trace_id, span.span_id, is_remote=False, trace_flags=_SAMPLED)
    parent = (
        None
        if span.parent_span_id is None
        else SpanContext(span.trace_id, span.parent_span_id, is_remote=False, trace_flags=_SAMPLED)
    )
    status = (
        _UNSET if span.status == "unset" else Status(_STATUS[span.status], span.status_description)
    )
    return ReadableSpan(
        name=span.name,
        context=context,
        parent=parent,
        resource=resource,
        attributes=span.attributes,
        events=[SdkEvent(e.name, e.attributes, e.time_ns) for e in span.events],
        kind=_KINDS[span.kind],
        status=status,
        start_time=span.start_ns,
        end_time=span.end_ns,
        instrumentation_scope=SCOPE,
    )


def to_readables(spans: Sequence[SpanData], resource: Resource) -> list[ReadableSpan]:
    return [to_readable(s, resource) for s in spans]


def span_processor_of(provider: TracerProvider) -> SpanProcessor:
    """The provider's composite span processor (everything added with
    ``add_span_processor``), which receives finished spans exactly as from a tracer."""
    processor = getattr(provider, "_active_span_processor", None)
    if processor is None:
        raise OtelError(
            f"{type(provider).__qualname__} has no span processors skillog can feed; pass an "
            "opentelemetry.sdk.trace.TracerProvider (or a SpanProcessor) to OtelObserver"
        )
    return processor  # type: ignore[no-any-return]
