"""The OTLP/HTTP exporter for offline export, and sending a batch with a readable outcome."""

from __future__ import annotations

import logging
import os
import socket
from collections.abc import Sequence
from urllib.parse import urlsplit

from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult

from ._errors import OtelError

DEFAULT_ENDPOINT = "http://localhost:4318"


def traces_url(endpoint: str | None) -> str:
    """The URL spans are POSTed to: ``ENDPOINT/v1/traces``.

    Without ``endpoint``: ``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`` as is, else
    ``OTEL_EXPORTER_OTLP_ENDPOINT`` + ``/v1/traces``, else ``http://localhost:4318/v1/traces``
    (the standard OTLP/HTTP environment variables).
    """
    if endpoint is None:
        full = os.environ.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
        if full:
            return _checked(full)
        endpoint = os.environ.get("OTEL_EXPORTER_OTLP_ENDPOINT") or DEFAULT_ENDPOINT
    return _checked(endpoint.rstrip("/") + "/v1/traces")


def _checked(url: str) -> str:
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise OtelError(
            f"endpoint {url!r} is not an http(s) URL; pass the collector's OTLP/HTTP base "
            "URL, e.g. --endpoint http://localhost:4318"
        )
    try:
        parts.port  # noqa: B018 - raises on a malformed port
    except ValueError as e:
        raise OtelError(f"endpoint {url!r} has an invalid port: {e}") from e
    return url


def otlp_exporter(url: str, *, timeout_s: float) -> SpanExporter:
    """An OTLP/HTTP protobuf exporter to ``url``; headers, compression and TLS come from
    the standard ``OTEL_EXPORTER_OTLP_*`` variables. ``timeout_s`` bounds each export
    call, including the exporter's own retries."""
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

    return OTLPSpanExporter(endpoint=url, timeout=timeout_s)


class _Capture(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.messages.append(record.getMessage())


# The SDK exporters report why an export failed only through logging.
_EXPORTER_LOGGER = logging.getLogger("opentelemetry.exporter")


def diagnose(url: str, timeout_s: float) -> str | None:
    """Why ``url``'s host cannot be reached (refused, timed out, unknown host), or None
    if a TCP connection opens. The SDK exporter often logs only "timeout, max retries or
    shutdown"; this names the actual cause for the user."""
    parts = urlsplit(url)
    host = parts.hostname or ""
    port = parts.port or (443 if parts.scheme == "https" else 80)
    try:
        with socket.create_connection((host, port), timeout=timeout_s):
            return None
    except TimeoutError:
        return f"connecting to {host}:{port} timed out after {timeout_s:g} s"
    except OSError as e:
        return f"cannot connect to {host}:{port}: {e.strerror or e}"


def send(exporter: SpanExporter, spans: Sequence[ReadableSpan]) -> str | None:
    """Export ``spans`` (blocking: run it in a thread); None if accepted, else why not."""
    capture = _Capture()
    _EXPORTER_LOGGER.addHandler(capture)
    try:
        result = exporter.export(spans)
    except Exception as e:
        return f"{type(e).__name__}: {e}"
    finally:
        _EXPORTER_LOGGER.removeHandler(capture)
    if result is SpanExportResult.SUCCESS:
        return None
    return capture.messages[-1] if capture.messages else "the exporter reported a failure"
