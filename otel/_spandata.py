"""What the mapping produces: plain, SDK-independent span and measurement records.

The mapping (``_mapping.py``) is pure and emits these; converting them to the SDK's
``ReadableSpan`` or to instrument calls happens at the edges (``_sdk.py``,
``_metrics.py``). Keeping them plain makes the mapping testable and fast.
"""

from __future__ import annotations

from typing import Literal

import msgspec

AttrValue = str | bool | int | float | tuple[str, ...]
"""An attribute value: OTel primitives, or a homogeneous tuple of strings."""

Attributes = dict[str, AttrValue]

SpanKindName = Literal["internal", "client"]
StatusName = Literal["unset", "ok", "error"]


class SpanEventData(msgspec.Struct, frozen=True, kw_only=True):
    """A timestamped annotation on a span (a policy denial, an approval, a script run)."""

    name: str
    time_ns: int
    attributes: Attributes


class SpanData(msgspec.Struct, frozen=True, kw_only=True):
    """One finished span: ids, tree link, recorded times, attributes and events.

    ``parent_span_id`` is None for the session's root span. Times are the ``recorded_at``
    of the events that opened and closed the span (integer ns since the epoch).
    """

    name: str
    trace_id: int
    span_id: int
    parent_span_id: int | None
    kind: SpanKindName
    start_ns: int
    end_ns: int
    attributes: Attributes
    events: tuple[SpanEventData, ...] = ()
    status: StatusName = "unset"
    status_description: str | None = None


class Measurement(msgspec.Struct, frozen=True, kw_only=True):
    """One value for one instrument (see ``INSTRUMENTS`` in ``_metrics.py``)."""

    instrument: str
    value: int | float
    attributes: Attributes
