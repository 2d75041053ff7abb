"""Traces and metrics of skillog sessions, for any OpenTelemetry backend, live or offline.

One mapping (:class:`SessionMapper`) turns a session's events into GenAI-convention
spans and measurements. :class:`OtelObserver` runs it live as the runtime appends
events; :func:`export_sessions` / :func:`follow_export` run it over a stored log. Ids are
derived from the log, so both ways yield the same trace. See docs/telemetry.md.
"""

from ._errors import BrokenChainError as BrokenChainError
from ._errors import ExportFailedError as ExportFailedError
from ._errors import OtelError as OtelError
from ._errors import SessionNotEndedError as SessionNotEndedError
from ._export import ExportOptions as ExportOptions
from ._export import ExportReport as ExportReport
from ._export import export_sessions as export_sessions
from ._export import follow_export as follow_export
from ._export import summarize_log as summarize_log
from ._ids import span_id_for as span_id_for
from ._ids import trace_id_for as trace_id_for
from ._mapping import BlobLookup as BlobLookup
from ._mapping import SessionMapper as SessionMapper
from ._mapping import map_session as map_session
from ._metrics import INSTRUMENTS as INSTRUMENTS
from ._metrics import MetricsRecorder as MetricsRecorder
from ._observer import OtelObserver as OtelObserver
from ._otlp import otlp_exporter as otlp_exporter
from ._otlp import traces_url as traces_url
from ._sdk import to_readable as to_readable
from ._spandata import Measurement as Measurement
from ._spandata import SpanData as SpanData
from ._spandata import SpanEventData as SpanEventData
from ._state import ExportState as ExportState
from ._state import default_state_path as default_state_path
from ._state import load_state as load_state
from ._state import save_state as save_state
from ._summary import SessionSummary as SessionSummary
from ._summary import SkillTotals as SkillTotals
from ._summary import Summary as Summary
from ._summary import render_text as render_text
from ._summary import summarize as summarize
from ._summary import summarize_session as summarize_session
from ._summary import to_json as to_json

__all__ = [
    "INSTRUMENTS",
    "BlobLookup",
    "BrokenChainError",
    "ExportFailedError",
    "ExportOptions",
    "ExportReport",
    "ExportState",
    "Measurement",
    "MetricsRecorder",
    "OtelError",
    "OtelObserver",
    "SessionMapper",
    "SessionNotEndedError",
    "SessionSummary",
    "SkillTotals",
    "SpanData",
    "SpanEventData",
    "Summary",
    "default_state_path",
    "export_sessions",
    "follow_export",
    "load_state",
    "map_session",
    "otlp_exporter",
    "render_text",
    "save_state",
    "span_id_for",
    "summarize",
    "summarize_log",
    "summarize_session",
    "to_json",
    "to_readable",
    "trace_id_for",
    "traces_url",
]
