"""The audit timeline: who did what, when, from a session's events alone (pure)."""

from __future__ import annotations

import datetime
from collections.abc import Iterator

import msgspec

from orchestrator import (
    ApprovalRemembered,
    ApprovalRequested,
    ApprovalResolved,
    ContextCompacted,
    ModelFailed,
    ModelInterrupted,
    ModelResponded,
    PolicyDenied,
    PromptRendered,
    ResourceRead,
    ScriptExecuted,
    SessionEnded,
    SessionForked,
    SessionStarted,
    SessionSuspended,
    SkillActivated,
    SkillActivationFailed,
    SkillChanged,
    SkillDeactivated,
    SummaryAnswered,
    SummaryRequested,
    TextPart,
    ToolCall,
    ToolCalled,
    ToolCompleted,
    ToolInterrupted,
    Usage,
    UserMessage,
)
from orchestrator import Event as Body
from orchestrator.runtime import budget_cost

from ._recording import Recording, turn_at

Detail = str | int | bool | None


class TimelineEntry(msgspec.Struct, frozen=True, kw_only=True):
    """One step worth an auditor's attention. ``at`` is the recorded time (ns since
    the epoch), ``time`` the same in ISO 8601 UTC; ``what`` a one-line summary and
    ``details`` the facts behind it."""

    seq: int
    at: int
    time: str
    turn: int
    kind: str
    what: str
    details: dict[str, Detail]


def timeline(recording: Recording) -> list[TimelineEntry]:
    """The audit entries of ``recording`` in log order (events an auditor does not
    need, such as ``catalog.snapshot``, are left out)."""
    turns = turn_at(recording.bodies)
    config = next((b for b in recording.bodies if isinstance(b, SessionStarted)), None)
    out: list[TimelineEntry] = []
    # By index, not seq: a log that does not verify (a row after a gap in the seqs)
    # is still shown, with the verdict saying what is wrong with it.
    for i, (event, body) in enumerate(zip(recording.events, recording.bodies, strict=True)):
        for kind, what, details in _describe(body, config):
            out.append(
                TimelineEntry(
                    seq=event.seq,
                    at=event.recorded_at,
                    time=iso_time(event.recorded_at),
                    turn=turns[i],
                    kind=kind,
                    what=what,
                    details=details,
                )
            )
    return out


def render_timeline(entries: list[TimelineEntry]) -> Iterator[str]:
    """One text line per entry."""
    for e in entries:
        yield f"{e.time}  seq {e.seq:>4}  turn {e.turn:>3}  {e.kind:<12} {e.what}"


def iso_time(ns: int) -> str:
    t = datetime.datetime.fromtimestamp(ns // 1_000_000_000, tz=datetime.UTC)
    return t.strftime("%Y-%m-%dT%H:%M:%S") + f".{ns % 1_000_000_000 // 1_000_000:03d}Z"


def _cost(config: SessionStarted | None, usage: Usage) -> int | None:
    """The call's cost at the session's budget prices (micro-USD), or None."""
    if config is None:
        return None
    cached = (usage.cache_read_input_tokens, usage.cache_creation_input_tokens)
    return budget_cost(
        config.policy.budget, config.model, usage.input_tokens, usage.output_tokens, cached
    )


def _describe(
    body: Body, config: SessionStarted | None = None
) -> Iterator[tuple[str, str, dict[str, Detail]]]:
    match body:
        case SessionStarted():
            yield (
                "session",
                f"{body.agent} started on {body.provider}:{body.model}",
                {
                    "agent": body.agent,
                    "provider": body.provider,
                    "model": body.model,
                    "version": body.version,
                    "sandbox": body.policy.sandbox,
                },
            )
        case SessionForked():
            yield (
                "fork",
                f"forked from {body.from_session} at seq {body.at_seq}",
                {"from_session": body.from_session, "at_seq": body.at_seq, "at_hash": body.at_hash},
            )
        case UserMessage():
            yield "user", _clip(body.text), {"chars": len(body.text)}
        case SkillActivated():
            yield (
                "activation",
                f"{body.name} sha256:{body.hash[:12]} ({body.tier}, {body.source}) "
                f"by {body.trigger}, mode {body.mode}",
                {
                    "skill": body.name,
                    "hash": body.hash,
                    "tier": body.tier,
                    "source": body.source,
                    "trigger": body.trigger,
                    "mode": body.mode,
                    "files": len(body.files),
                    "call_id": body.call_id,
                },
            )
        case SkillDeactivated():
            yield (
                "deactivation",
                f"{body.name} sha256:{body.hash[:12]} ({body.reason})",
                {"skill": body.name, "hash": body.hash, "reason": body.reason},
            )
        case SkillActivationFailed():
            yield (
                "activation✗",
                f"{body.name}: {_clip(body.reason)}",
                {"skill": body.name, "reason": body.reason, "call_id": body.call_id},
            )
        case SkillChanged():
            yield (
                "skill-change",
                f"{body.name} {_short(body.old_hash)} -> {_short(body.new_hash)}",
                {"skill": body.name, "old_hash": body.old_hash, "new_hash": body.new_hash},
            )
        case PromptRendered():
            yield (
                "prompt",
                f"request sha256:{body.request_hash[:12]} ({body.message_count} messages)",
                {"request_hash": body.request_hash, "messages": body.message_count},
            )
        case ModelResponded():
            usage = body.response.usage
            calls = ", ".join(c.name for c in body.response.tool_calls) or "no tool calls"
            yield (
                "model",
                f"{body.response.stop_reason}, {usage.input_tokens} in / "
                f"{usage.output_tokens} out tokens, {body.duration_ms} ms: {calls}",
                {
                    "model": body.response.model,
                    "stop_reason": body.response.stop_reason,
                    "input_tokens": usage.input_tokens,
                    "output_tokens": usage.output_tokens,
                    "duration_ms": body.duration_ms,
                    "cache_read_tokens": usage.cache_read_input_tokens,
                    "cache_write_tokens": usage.cache_creation_input_tokens,
                    "cost_micro_usd": _cost(config, usage),
                    "response_id": body.response.id,
                    "text": _clip(_text(body.response.parts), 300),
                },
            )
        case ModelFailed():
            yield (
                "model✗",
                f"{body.kind} (attempt {body.attempt}"
                f"{', will retry' if body.will_retry else ''}): {_clip(body.message)}",
                {
                    "kind": body.kind,
                    "attempt": body.attempt,
                    "will_retry": body.will_retry,
                    "message": body.message,
                },
            )
        case ToolCalled():
            yield (
                "tool",
                f"{body.tool} {_clip(body.arguments, 80)}",
                {
                    "tool": body.tool,
                    "call_id": body.call_id,
                    "arguments": body.arguments,
                    "skills": ",".join(body.skills),
                },
            )
        case ToolCompleted() if body.is_error:
            yield (
                "tool✗",
                f"{body.tool}: {_clip(body.content)}",
                {"tool": body.tool, "call_id": body.call_id, "error_type": body.error_type},
            )
        case ToolCompleted():
            yield (
                "tool✓",
                f"{body.tool} ({body.duration_ms} ms): {_clip(body.content)}",
                {"tool": body.tool, "call_id": body.call_id, "duration_ms": body.duration_ms},
            )
        case ToolInterrupted():
            yield (
                "interrupted",
                f"{body.tool}: {_clip(body.content)}",
                {"tool": body.tool, "call_id": body.call_id},
            )
        case ResourceRead():
            yield (
                "read",
                f"{body.skill}/{body.path} ({body.size} bytes)",
                {
                    "skill": body.skill,
                    "path": body.path,
                    "size": body.size,
                    "digest": body.digest,
                    "call_id": body.call_id,
                },
            )
        case ScriptExecuted():
            outcome = (
                f"refused: {body.refused}"
                if body.refused is not None
                else "timed out"
                if body.timed_out
                else f"exit {body.exit_code}"
            )
            yield (
                "script",
                f"{body.skill}/{body.path} {' '.join(body.args)} -> {outcome} "
                f"({body.duration_ms} ms, sandbox {body.sandbox})",
                {
                    "skill": body.skill,
                    "path": body.path,
                    "args": " ".join(body.args),
                    "exit_code": body.exit_code,
                    "duration_ms": body.duration_ms,
                    "sandbox": body.sandbox,
                    "network": body.network,
                    "timed_out": body.timed_out,
                    "refused": body.refused,
                    "call_id": body.call_id,
                },
            )
        case PolicyDenied():
            yield (
                "denial",
                f"{body.tool} ({body.rule}): {_clip(body.reason)}",
                {
                    "tool": body.tool,
                    "rule": body.rule,
                    "reason": body.reason,
                    "skill": body.skill,
                    "call_id": body.call_id,
                },
            )
        case ApprovalRequested():
            yield (
                "approval?",
                f"{body.tool}: {body.action}",
                {
                    "tool": body.tool,
                    "action": body.action,
                    "skill": body.skill,
                    "tier": body.tier,
                    "call_id": body.call_id,
                },
            )
        case ApprovalResolved():
            verdict = "approved" if body.approved else "denied"
            yield (
                "approval",
                f"{verdict} by {body.decided_by}",
                {"approved": body.approved, "decided_by": body.decided_by, "call_id": body.call_id},
            )
        case ModelInterrupted():
            yield (
                "model⏸",
                f"cancelled mid-call (attempt {body.attempt}): {body.text_size} bytes of text, "
                f"{len(body.calls)} tool call(s) had arrived; the request is sent again",
                {
                    "attempt": body.attempt,
                    "text_size": body.text_size,
                    "calls": ",".join(body.calls),
                },
            )
        case SummaryRequested():
            yield (
                "summary",
                f"asked the model to summarise {body.dropped} messages",
                {"dropped": body.dropped, "request_hash": body.request_hash},
            )
        case SummaryAnswered():
            yield (
                "summary",
                f"failed: {_clip(body.error)}" if body.response is None
                else f"answered ({body.response.usage.output_tokens} tokens)",
                {"error": body.error},
            )  # fmt: skip
        case ContextCompacted():
            yield (
                "compaction",
                f"{body.step} ({body.reason}): {len(body.replaced)} results cleared, "
                f"{body.dropped} messages dropped, ~{body.tokens_before} -> "
                f"~{body.tokens_after} tokens of {body.budget}",
                {"step": body.step, "reason": body.reason, "replaced": len(body.replaced),
                 "dropped": body.dropped, "tokens_before": body.tokens_before,
                 "tokens_after": body.tokens_after, "budget": body.budget},
            )  # fmt: skip
        case SessionSuspended():
            yield (
                "suspended",
                f"awaiting approval of {len(body.call_ids)} call(s)",
                {"reason": body.reason, "call_ids": ",".join(body.call_ids)},
            )
        case ApprovalRemembered():
            what = f"every call of {body.skill}" if body.scope == "skill" else body.pattern
            yield (
                "remember",
                f"from now on: {what} (by {body.decided_by})",
                {"scope": body.scope, "skill": body.skill, "pattern": body.pattern,
                 "decided_by": body.decided_by, "call_id": body.call_id},
            )  # fmt: skip
        case SessionEnded():
            yield (
                "ended",
                f"{body.reason} after {body.turns} turns"
                + (f": {body.error}" if body.error else ""),
                {"reason": body.reason, "turns": body.turns, "error": body.error},
            )
        case _:
            pass


def _text(parts: tuple[TextPart | ToolCall, ...]) -> str:
    return " ".join(p.text for p in parts if isinstance(p, TextPart))


def _short(digest: str | None) -> str:
    return "(none)" if digest is None else f"sha256:{digest[:12]}"


def _clip(text: str, limit: int = 100) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"
