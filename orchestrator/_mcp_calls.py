"""Calls of MCP servers' tools, as a plan and an effect like every other tool.

An MCP tool is offered under the session's name ``mcp__<server>__<tool>`` from the
server's recorded listing (``mcp.tools_listed``); its effect class was fixed when it was
listed (annotations, or the configuration's override). Planning is pure: the same log
gives the same plan. The effect asks the server through ``Effects.call_mcp`` (live: the
SDK client; re-drive: the recording) and records what it answered as ``mcp.result``,
its content in the blob store; the model reads the outcome's text, and is shown the
images it returned (``tool.images``, ``_images``).
"""

from __future__ import annotations

import msgspec

from ._calls import CallContext, ToolError, idempotency_key
from ._effects import McpTask
from ._events import McpResult, McpTaskCreated, McpToolDef
from ._host_tools import ToolContext
from ._images import mcp_images, record_images
from ._mcp_sampling import CallRequests

MAX_ARGUMENT_BYTES = 256 * 1024

FAILURE_TYPES = {
    "timeout": "mcp_timeout",
    "disconnected": "mcp_unavailable",
    "unavailable": "mcp_unavailable",
    "protocol": "mcp_protocol_error",
    "cancelled": "mcp_cancelled",
    "task_lost": "mcp_task_lost",
}
"""``tool.completed.error_type`` of a call the server did not answer, by failure."""


def check_arguments(ctx: CallContext, limit: int = MAX_ARGUMENT_BYTES) -> dict[str, object]:
    """Refuse arguments that are too large or not a JSON object before any server sees
    them (the server validates them against its schema); returns the object."""
    raw = ctx.call.arguments or "{}"
    size = len(raw.encode("utf-8", "surrogatepass"))
    if size > limit:
        raise ToolError(
            f"arguments of {ctx.call.name} are {size} bytes; the limit is {limit}",
            error_type="invalid_arguments",
        )
    try:
        value = msgspec.json.decode(raw)
    except msgspec.DecodeError as e:
        raise ToolError(
            f"invalid arguments for {ctx.call.name}: not JSON ({e})", error_type="invalid_arguments"
        ) from None
    if not isinstance(value, dict):
        raise ToolError(
            f"invalid arguments for {ctx.call.name}: expected a JSON object, got "
            f"{type(value).__name__}",
            error_type="invalid_arguments",
        )
    return value


async def call_mcp_tool(tool: McpToolDef, ctx: CallContext) -> str:
    context = ToolContext(
        session_id=ctx.session_id,
        call_id=ctx.call.id,
        active_skills=ctx.view.active_names,
        idempotency_key=idempotency_key(ctx.session_id, ctx.call.id),
    )
    policy = ctx.view.config.policy
    outcome = await ctx.effects.call_mcp(
        tool.server,
        tool.mcp_name,
        ctx.call.arguments or "{}",
        context,
        stored_cap=policy.script_limits.stored_output_bytes,
        model_cap=policy.output_cap_bytes,
        requests=CallRequests(ctx, tool.server),
        task=_task(tool, ctx) if tool.task else None,
    )
    ctx.rec.add(
        McpResult(
            call_id=ctx.call.id,
            server=tool.server,
            tool=tool.mcp_name,
            is_error=outcome.is_error,
            digest=ctx.rec.blob(outcome.stored),
            size=outcome.size,
            truncated=outcome.truncated,
            duration_ms=outcome.duration_ms,
            failure=outcome.failure,
            notes=ctx.rec.blob(outcome.notes) if outcome.notes else None,
        )
    )
    if outcome.failure is None and not outcome.truncated:
        record_images(ctx, mcp_images(outcome.stored))
    if outcome.failure is not None:
        raise ToolError(outcome.content, error_type=FAILURE_TYPES.get(outcome.failure, "mcp_error"))
    if outcome.is_error:
        raise ToolError(outcome.content, error_type="mcp_error")
    return outcome.content


def _task(tool: McpToolDef, ctx: CallContext) -> McpTask:
    """The call of a task-only tool: the task the log names for it (a resumed call),
    else a new one, whose id is committed as soon as the server gives it."""

    async def created(task_id: str, ttl_ms: int | None) -> None:
        event = McpTaskCreated(
            call_id=ctx.call.id,
            server=tool.server,
            tool=tool.mcp_name,
            task_id=task_id,
            ttl_ms=ttl_ms,
        )
        await ctx.commit([event])

    recorded = ctx.recorded.task
    return McpTask(
        task_id=recorded.task_id if recorded else None, created=created, effect=tool.effect
    )
