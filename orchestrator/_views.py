"""Read-only SQL views for auditors: sessions, tool calls with their outcomes, scripts,
approvals and model usage, straight from the SQLite log (docs/log-format.md, "Auditing
with SQL").

The event log knows nothing about skills, so these views live here and reach the file
through the hook the store offers its domain: a named sqlite-utils migration set
(``skillog_audit_views``), passed as ``open_sqlite_store(..., migrations=[AUDIT_VIEWS])``
and applied with the log's own migrations, in the same transaction, whenever the
runtime opens a log for writing. They read ``log_events`` (the log's own view of the
rows every reader shows, bodies as JSON text), never ``events``, so a row verify would
call a stray never appears in them. A field added by a later schema version is read
with ``json_extract`` and a default, so logs written before it still read.
"""

from __future__ import annotations

import sqlite_utils
from sqlite_utils.migrations import Migrations

#: The migration set that creates (and later versions update) the audit views.
AUDIT_VIEWS = Migrations("skillog_audit_views")

#: View name -> what it shows (docs and ``skillog log`` help name them).
VIEWS = {
    "audit_sessions": "one row per session: model, status, turns, events, times, fork parent",
    "audit_tool_calls": "every tool call with its outcome (completed, interrupted or pending)",
    "audit_scripts": "every script run: sandbox, network, exit code, timeout, refusal",
    "audit_approvals": "every approval asked for, and who decided what",
    "audit_model_usage": "every model response: turn, model, tokens, stop reason, tool calls",
}


def _j(alias: str, path: str) -> str:
    return f"json_extract({alias}.body_json, '$.{path}')"


def _outcome_of(call: str, tags: str) -> str:
    """The first later event of ``tags`` for the same call_id as ``call``."""
    return (
        f"(SELECT o.position FROM log_events o WHERE o.stream = {call}.stream "
        f"AND o.tag IN ({tags}) AND {_j('o', 'call_id')} = {_j(call, 'call_id')} "
        "ORDER BY o.seq LIMIT 1)"
    )


_SESSIONS = f"""
CREATE VIEW audit_sessions AS
WITH starts AS (
    SELECT stream, MIN(seq) AS seq FROM log_events WHERE tag = 'session.started'
    GROUP BY stream
), bounds AS (
    SELECT st.stream, st.seq AS start_seq, MAX(e.seq) AS last_seq,
        MAX(CASE WHEN e.tag = 'session.ended' THEN e.seq END) AS end_seq,
        MAX(CASE WHEN e.tag = 'prompt.rendered' THEN {_j("e", "turn")} END) AS turns,
        MIN(CASE WHEN e.tag = 'session.forked' THEN e.seq END) AS fork_seq
    FROM starts st JOIN log_events e ON e.stream = st.stream
    GROUP BY st.stream
)
SELECT b.stream AS session,
    {_j("s", "agent")} AS agent,
    {_j("s", "provider")} AS provider,
    {_j("s", "model")} AS model,
    CASE WHEN b.end_seq IS NOT NULL THEN {_j("x", "reason")}
         WHEN l.tag = 'session.suspended' THEN 'suspended'
         ELSE 'open' END AS status,
    COALESCE(b.turns, 0) AS turns,
    b.last_seq + 1 AS events,
    s.recorded_at AS started_at,
    l.recorded_at AS last_event_at,
    {_j("f", "from_session")} AS forked_from
FROM bounds b
JOIN log_events s ON s.stream = b.stream AND s.seq = b.start_seq
JOIN log_events l ON l.stream = b.stream AND l.seq = b.last_seq
LEFT JOIN log_events x ON x.stream = b.stream AND x.seq = b.end_seq
LEFT JOIN log_events f ON f.stream = b.stream AND f.seq = b.fork_seq
"""

_TOOL_CALLS = f"""
CREATE VIEW audit_tool_calls AS
SELECT c.stream AS session, c.seq,
    {_j("c", "turn")} AS turn,
    {_j("c", "call_id")} AS call_id,
    {_j("c", "tool")} AS tool,
    {_j("c", "arguments")} AS arguments,
    COALESCE({_j("c", "effect")}, 'at-most-once') AS effect,
    {_j("c", "idempotency_key")} AS idempotency_key,
    CASE o.tag WHEN 'tool.completed' THEN 'completed'
               WHEN 'tool.interrupted' THEN 'interrupted'
               ELSE 'pending' END AS outcome,
    CASE o.tag WHEN 'tool.completed' THEN COALESCE({_j("o", "is_error")}, 0)
               WHEN 'tool.interrupted' THEN 1 END AS is_error,
    CASE o.tag WHEN 'tool.interrupted' THEN 'interrupted'
               ELSE {_j("o", "error_type")} END AS error_type,
    COALESCE({_j("o", "content")}, {_j("o", "reason")}) AS content,
    {_j("o", "duration_ms")} AS duration_ms,
    COALESCE({_j("o", "reconciled")}, 0) AS reconciled,
    {_j("d", "rule")} AS denied_by_rule,
    CASE WHEN a.position IS NULL THEN NULL
         WHEN {_j("a", "approved")} THEN 'approved' ELSE 'denied' END AS approval,
    c.recorded_at AS called_at,
    o.recorded_at AS finished_at
FROM log_events c
LEFT JOIN log_events o
    ON o.position = {_outcome_of("c", "'tool.completed', 'tool.interrupted'")}
LEFT JOIN log_events d ON d.position = {_outcome_of("c", "'policy.denied'")}
LEFT JOIN log_events a ON a.position = {_outcome_of("c", "'approval.resolved'")}
WHERE c.tag = 'tool.called'
"""

_SCRIPTS = f"""
CREATE VIEW audit_scripts AS
SELECT e.stream AS session, e.seq,
    {_j("e", "call_id")} AS call_id,
    {_j("e", "skill")} AS skill,
    {_j("e", "path")} AS path,
    json_extract(e.body_json, '$.args') AS args,
    {_j("e", "sandbox")} AS sandbox,
    {_j("e", "network")} AS network,
    CASE WHEN {_j("e", "refused")} IS NOT NULL THEN 'refused'
         WHEN {_j("e", "timed_out")} THEN 'timed_out'
         WHEN {_j("e", "exit_code")} = 0 THEN 'ok'
         ELSE 'failed' END AS status,
    {_j("e", "exit_code")} AS exit_code,
    {_j("e", "refused")} AS refused,
    {_j("e", "truncated")} AS truncated,
    {_j("e", "duration_ms")} AS duration_ms,
    {_j("e", "stdout_digest")} AS stdout_digest,
    {_j("e", "stderr_digest")} AS stderr_digest,
    e.recorded_at AS finished_at
FROM log_events e WHERE e.tag = 'script.executed'
UNION ALL
SELECT s.stream, s.seq, {_j("s", "call_id")}, {_j("s", "skill")}, {_j("s", "path")},
    json_extract(s.body_json, '$.args'), {_j("s", "sandbox")}, {_j("s", "network")},
    'started', NULL, NULL, NULL, NULL, NULL, NULL, NULL
FROM log_events s WHERE s.tag = 'script.started'
    AND {_outcome_of("s", "'script.executed'")} IS NULL
"""

_APPROVALS = f"""
CREATE VIEW audit_approvals AS
SELECT r.stream AS session, r.seq,
    {_j("r", "call_id")} AS call_id,
    {_j("r", "tool")} AS tool,
    {_j("r", "action")} AS action,
    {_j("r", "skill")} AS skill,
    {_j("r", "tier")} AS tier,
    CASE WHEN d.position IS NULL THEN 'pending'
         WHEN {_j("d", "approved")} THEN 'approved' ELSE 'denied' END AS decision,
    {_j("d", "decided_by")} AS decided_by,
    {_j("d", "reason")} AS reason,
    r.recorded_at AS requested_at,
    {_j("r", "expires_at")} AS expires_at,
    d.recorded_at AS decided_at
FROM log_events r
LEFT JOIN log_events d ON d.position = {_outcome_of("r", "'approval.resolved'")}
WHERE r.tag = 'approval.requested'
"""

_MODEL_USAGE = f"""
CREATE VIEW audit_model_usage AS
SELECT m.stream AS session, m.seq,
    {_j("m", "turn")} AS turn,
    {_j("m", "response.model")} AS model,
    COALESCE({_j("m", "response.usage.input_tokens")}, 0) AS input_tokens,
    COALESCE({_j("m", "response.usage.output_tokens")}, 0) AS output_tokens,
    {_j("m", "response.stop_reason")} AS stop_reason,
    (SELECT count(*) FROM json_each(m.body_json, '$.response.parts') p
     WHERE json_extract(p.value, '$.type') = 'tool_call') AS tool_calls,
    {_j("m", "duration_ms")} AS duration_ms,
    m.recorded_at AS responded_at
FROM log_events m WHERE m.tag = 'model.responded'
"""


@AUDIT_VIEWS(name="0001_audit_views")
def _m0001(db: sqlite_utils.Database) -> None:
    for sql in (_SESSIONS, _TOOL_CALLS, _SCRIPTS, _APPROVALS, _MODEL_USAGE):
        db.execute(sql)
