"""The errors ``otel`` raises on purpose; all are :class:`eventlog.SkillogError`."""

from __future__ import annotations

from eventlog import SkillogError


class OtelError(SkillogError):
    """Base of the telemetry package's errors (exit code 2: the input is unusable)."""


class BrokenChainError(OtelError):
    """A session's hash chain does not verify; nothing of the export was sent.

    Telemetry derived from a tampered log would look authoritative, so the export
    refuses. Run ``skillog log verify`` to see the fault, restore the database from a
    backup, or export the other sessions by name.
    """


class SessionNotEndedError(OtelError):
    """A session named for export has no ``session.ended`` event yet.

    Its root span cannot be closed; export it once it ends (``--follow`` does so).
    """


class ExportFailedError(OtelError):
    """The exporter did not accept a batch after the bounded retries.

    Sessions exported before the failure are recorded in the export state, so running
    the same command again resumes with the first session that was not accepted.
    """
