"""The names of the log's streams: sessions, the fleet's leases, the indexing runs,
the installs, the log's maintenance.

A plain vocabulary with no imports, so the pure checker (``_grammar``), the exporter
and the read models can tell streams apart without importing the loop they describe.
"""

from __future__ import annotations

LEASE_PREFIX = "lease/"
"""Every lease stream is ``lease/<session>``: who drives the session (``_fleet``)."""

QUEUED = "queued"
"""The outcome of the lease stream's first event, written by ``_fleet.queue_session``."""

INDEX_STREAM = "skills-index"
"""The stream of ``catalog.indexed`` events; sessions are the other streams."""

INSTALL_STREAM = "skills-installed"
"""The stream of ``skills.installed`` events: every install, update and remove."""


MAINTENANCE_STREAM = "log/maintenance"
"""The log's own maintenance (``log.archived``, written by ``eventlog``'s archive):
the same name as ``eventlog._tombstone.MAINTENANCE_STREAM``, kept here as plain text
like the others so this module imports nothing."""


WEBHOOK_PREFIX = "webhook/"
"""Every ``webhook/<delivery>`` stream records one notification's attempts (the
service's ``_notify``): about the log, in it, but in no session."""


FORMS_PREFIX = "forms/"
"""Every ``forms/<session>`` stream holds the human answers to the session's MCP forms
(``mcp.form_answered``), written by ``skillog approvals answer``, the API or the
console while the session's driver holds its lease and waits (``_mcp_elicit``)."""


def forms_stream(session_id: str) -> str:
    """The stream of the answers to ``session_id``'s MCP forms."""
    return f"{FORMS_PREFIX}{session_id}"


def webhook_stream(delivery: str) -> str:
    """The stream of the notification ``delivery`` (the notified event's hash)."""
    return f"{WEBHOOK_PREFIX}{delivery}"


def lease_stream(session_id: str) -> str:
    """The lease stream of ``session_id``."""
    return f"{LEASE_PREFIX}{session_id}"


LOG_STREAMS = frozenset({INDEX_STREAM, INSTALL_STREAM, MAINTENANCE_STREAM})
"""The streams of the log's own records, neither sessions nor leases."""


def is_session_stream(stream: str) -> bool:
    """Sessions are every stream but the fleet's leases, the indexing runs, the installs,
    the log's maintenance, the webhook deliveries and the answers to forms."""
    return stream not in LOG_STREAMS and not stream.startswith(
        (LEASE_PREFIX, WEBHOOK_PREFIX, FORMS_PREFIX)
    )
