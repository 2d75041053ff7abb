"""Trace and span ids derived from the log, so every export of a session agrees.

A trace id is a function of the session (stream) id and the hash of its first event;
a span id is a function of the hash of the event that opens the span. Exporting the
same log twice, or live and then offline, therefore yields identical ids, and OTLP
backends deduplicate. The first event's hash covers its stream id, so two sessions
never share a trace even if their first events have identical bodies and times.
"""

from __future__ import annotations

import hashlib

_TRACE_DOMAIN = b"skillog/otel/trace\n"
_SPAN_DOMAIN = b"skillog/otel/span\n"


def trace_id_for(stream: str, first_event_hash: str) -> int:
    """The 128-bit trace id of the session ``stream`` whose seq-0 hash is given."""
    digest = hashlib.sha256(
        _TRACE_DOMAIN + stream.encode() + b"\n" + first_event_hash.encode()
    ).digest()
    # All-zero ids are invalid in OTLP; a collision with 0 is 2**-128 but costs nothing.
    return int.from_bytes(digest[:16], "big") or 1


def span_id_for(event_hash: str) -> int:
    """The 64-bit span id of the span opened by the event with this hash."""
    digest = hashlib.sha256(_SPAN_DOMAIN + event_hash.encode()).digest()
    return int.from_bytes(digest[:8], "big") or 1
