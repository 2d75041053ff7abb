"""A human-readable transcript of a session, rendered from its events alone."""

from __future__ import annotations

import textwrap
from collections.abc import Iterator

from ._events import (
    ApprovalRemembered,
    ApprovalRequested,
    ApprovalResolved,
    ContextCompacted,
    Event,
    McpTaskCreated,
    ModelFailed,
    ModelResponded,
    PolicyDenied,
    ResourceRead,
    ScriptExecuted,
    ScriptStarted,
    SessionEnded,
    SessionStarted,
    SessionSuspended,
    SkillActivated,
    SkillActivationFailed,
    SkillChanged,
    SkillDeactivated,
    SummaryAnswered,
    SummaryRequested,
    ToolCompleted,
    ToolInterrupted,
    UserMessage,
)

WIDTH = 96


def transcript(bodies: list[Event]) -> Iterator[str]:
    """One or more lines per event worth showing a person, in log order."""
    for body in bodies:
        yield from _lines(body)


def _lines(body: Event) -> Iterator[str]:
    match body:
        case SessionStarted():
            yield _row("session", f"{body.agent} on {body.provider}:{body.model}")
        case UserMessage():
            yield from _block("user", body.text)
        case ModelResponded():
            if body.response.text:
                yield from _block("assistant", body.response.text)
            for call in body.response.tool_calls:
                yield _row("assistant", f"→ {call.name} {call.arguments}")
        case ModelFailed():
            retry = ", retrying" if body.will_retry else ""
            yield _row("model", f"✗ {body.kind}: {body.message} (attempt {body.attempt}{retry})")
        case SkillActivated():
            yield _row(
                "skill",
                f"✓ {body.name}{f' {body.version}' if body.version else ''} activated by "
                f"{body.trigger} (sha256:{body.hash[:12]}, {body.tier}, {len(body.files)} files"
                f"{', signed' if body.signed_by else ''})",
            )
        case SkillDeactivated():
            yield _row("skill", f"○ {body.name} deactivated ({body.reason})")
        case SkillActivationFailed():
            yield _row("skill", f"✗ {body.name} failed to load: {body.reason}")
        case SkillChanged():
            if body.cause is None:
                yield _row("skill", f"~ {body.name} changed on disk")
            else:
                yield _row("catalog", f"~ {body.name}: {body.reason} ({body.cause})")
        case ResourceRead():
            yield _row("read", f"{body.skill}/{body.path} ({body.size} bytes)")
        case ScriptExecuted():
            outcome = (
                f"refused: {body.refused}"
                if body.refused
                else "timed out"
                if body.timed_out
                else f"exit {body.exit_code}"
            )
            args = " ".join(body.args)
            yield _row(
                "script",
                f"{body.skill}/{body.path} {args} → {outcome} in {body.duration_ms} ms "
                f"(sandbox: {body.sandbox})",
            )
        case PolicyDenied():
            yield from _whole("policy", f"✗ {body.tool} denied ({body.rule}): {body.reason}")
        case ApprovalRequested():
            yield _row("approval", f"? {body.action}")
        case ApprovalResolved():
            verdict = "approved" if body.approved else "denied"
            reason = f": {body.reason}" if body.reason else ""
            yield _row("approval", f"{verdict} by {body.decided_by}{reason}")
        case ApprovalRemembered():
            what = f"every call of {body.skill}" if body.scope == "skill" else body.pattern
            yield _row("approval", f"remembered for this session: {what}")
        case ScriptStarted():
            yield _row("script", f"{body.skill}/{body.path} {' '.join(body.args)} started".strip())
        case McpTaskCreated():
            yield _row("mcp", f"{body.server}/{body.tool} runs as task {body.task_id}")
        case ToolInterrupted():
            yield _row("tool", f"✗ {body.tool}: interrupted by a restart (not run again)")
        case ContextCompacted():
            what = (
                f"dropped {body.dropped} messages"
                if body.step == "drop_turns"
                else f"summarised {body.dropped} messages"
                if body.step == "summarise"
                else f"{len(body.replaced)} {body.step.replace('_', ' ')} cleared"
            )
            yield _row(
                "context",
                f"compacted ({body.reason}): {what}, ~{body.tokens_before} → "
                f"~{body.tokens_after} tokens (budget {body.budget})",
            )
        case SummaryRequested():
            yield _row("context", f"asked the model to summarise {body.dropped} messages")
        case SummaryAnswered():
            yield _row(
                "context",
                "summary failed: " + body.error
                if body.response is None
                else f"summary answered ({body.response.usage.output_tokens} tokens)",
            )
        case SessionSuspended():
            yield _row(
                "suspended",
                f"waiting for approval of {', '.join(body.call_ids)}: `skillog approvals`",
            )
        case ToolCompleted() if body.is_error:
            yield from _whole("tool", f"✗ {body.tool}: {body.content.strip()}")
        case ToolCompleted():
            first = body.content.strip().splitlines()[0] if body.content.strip() else ""
            yield _row("tool", f"✓ {body.tool}: {first}")
        case SessionEnded():
            error = f": {body.error}" if body.error else ""
            yield from _whole("ended", f"{body.reason} after {body.turns} turns{error}")
        case _:
            return


def _row(label: str, text: str) -> str:
    line = f"{label:<10} {text}"
    return line if len(line) <= WIDTH else line[: WIDTH - 1] + "…"


def _whole(label: str, text: str) -> Iterator[str]:
    """Rows that say all of ``text`` (errors are never cut), wrapped at the width."""
    lines = [
        part
        for line in (text.splitlines() or [""])
        for part in textwrap.wrap(line, WIDTH - 11, break_on_hyphens=False) or [""]
    ]
    yield f"{label:<10} {lines[0]}"
    for line in lines[1:]:
        yield f"{'':<10} {line}"


def _block(label: str, text: str) -> Iterator[str]:
    lines = text.strip().splitlines() or [""]
    yield _row(label, lines[0])
    for line in lines[1:]:
        yield _row("", line)
