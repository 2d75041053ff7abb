"""Instruments, and recording the mapping's measurements through a ``MeterProvider``."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, Literal, NamedTuple

from opentelemetry.context import Context
from opentelemetry.metrics import MeterProvider

from . import _semconv as sc
from ._sdk import SCOPE
from ._spandata import Measurement

# Bucket boundaries the GenAI conventions specify (gen-ai-metrics.md).
_DURATION_BUCKETS = (
    0.01,
    0.02,
    0.04,
    0.08,
    0.16,
    0.32,
    0.64,
    1.28,
    2.56,
    5.12,
    10.24,
    20.48,
    40.96,
    81.92,
)
_TOKEN_BUCKETS = tuple(float(4**i) for i in range(14))  # 1, 4, 16 ... 67108864
_TURN_BUCKETS = (1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 64.0, 128.0)


class Instrument(NamedTuple):
    kind: Literal["counter", "histogram"]
    unit: str
    description: str
    buckets: tuple[float, ...] | None = None


INSTRUMENTS: dict[str, Instrument] = {
    sc.M_OPERATION_DURATION: Instrument(
        "histogram", "s", "GenAI operation duration.", _DURATION_BUCKETS
    ),
    sc.M_TIME_TO_FIRST_CHUNK: Instrument(
        "histogram",
        "s",
        "Time to receive the first chunk of a streamed response.",
        _DURATION_BUCKETS,
    ),
    sc.M_TOKEN_USAGE: Instrument(
        "histogram", "{token}", "Number of input and output tokens used.", _TOKEN_BUCKETS
    ),
    sc.M_ACTIVATIONS: Instrument(
        "counter", "{activation}", "Skills activated (instructions entered the context)."
    ),
    sc.M_ACTIVATION_FAILURES: Instrument("counter", "{failure}", "Skill activations that failed."),
    sc.M_RESOURCE_READS: Instrument("counter", "{read}", "Skill resource files read."),
    sc.M_SCRIPT_RUNS: Instrument("counter", "{run}", "Skill scripts run or refused, by outcome."),
    sc.M_SCRIPT_FAILURES: Instrument(
        "counter", "{run}", "Skill scripts that exited non-zero, timed out or were refused."
    ),
    sc.M_SCRIPT_DURATION: Instrument("histogram", "s", "Skill script run time.", _DURATION_BUCKETS),
    sc.M_POLICY_DENIALS: Instrument(
        "counter", "{denial}", "Tool calls or actions denied by policy."
    ),
    sc.M_TOOL_CALLS: Instrument("counter", "{call}", "Tool calls completed, errors included."),
    sc.M_SESSION_DURATION: Instrument(
        "histogram", "s", "Session duration, start to end.", _DURATION_BUCKETS
    ),
    sc.M_SESSION_TURNS: Instrument(
        "histogram", "{turn}", "Model turns per session.", _TURN_BUCKETS
    ),
}
"""Every instrument skillog records: name -> kind, unit, description, buckets."""


class MetricsRecorder:
    """Records measurements on instruments created once from a ``MeterProvider``."""

    def __init__(self, meter_provider: MeterProvider) -> None:
        meter = meter_provider.get_meter(SCOPE.name, SCOPE.version)
        self._instruments: dict[str, Any] = {}
        for name, spec in INSTRUMENTS.items():
            if spec.kind == "counter":
                self._instruments[name] = meter.create_counter(
                    name, spec.unit, spec.description
                ).add
            else:
                self._instruments[name] = meter.create_histogram(
                    name,
                    spec.unit,
                    spec.description,
                    explicit_bucket_boundaries_advisory=spec.buckets,
                ).record

    def record(self, measurements: Iterable[Measurement], context: Context | None = None) -> None:
        """Add each measurement to its instrument, in ``context`` (None: the current one,
        which the SDK consults for exemplars)."""
        instruments = self._instruments
        for m in measurements:
            instruments[m.instrument](m.value, m.attributes, context)
