"""Task-augmented calls (MCP 2025-11-25 tasks) of tools a server runs only as tasks.

One call walks these steps::

    create  tools/call with ``task`` params; the server answers with a task, not a result
    record  the task id, committed (``mcp.task_created``) before anything else is asked
    poll    tasks/get, every ``pollInterval``, until the task ends or needs input
    result  tasks/result: the call's result (the server holds it until the task ends)
    cancel  tasks/cancel when the caller is cancelled (the session stops) while waiting

A process that resumes the session finds the task id in the log and starts at *poll*:
one call never creates two tasks. Each request has the call timeout; the whole wait
is bounded by the task's time to live, when the server gives one.

The SDK (``mcp``) defines the task types but makes none of these requests itself:
tasks/get, tasks/result and tasks/cancel go through ``ClientSession.send_request``;
the create is sent raw (:func:`_create`) because ``send_request`` checks a tools/call
answer against ``CallToolResult``, which a task is not.
"""

from __future__ import annotations

import contextlib
import math
from typing import Any

import trio

from .._effects import McpTask

POLL_MS = (50, 5000, 1000)
"""The least and most time between two tasks/get, and the default when the server
suggests none (ms)."""

CANCEL_WAIT_S = 2.0
"""How long a cancelled call waits for the server to take its tasks/cancel."""


class TaskCancelledError(Exception):
    """The task ended as cancelled (by the server, or by this or an earlier process)."""


class TaskLostError(Exception):
    """The server answered the first ``tasks/get`` of a task an earlier process created
    with an error: it no longer knows the task (a stdio server started anew keeps no
    task it did not store)."""


async def call_as_task(
    session: Any,
    tool: str,
    arguments: dict[str, Any],
    meta: dict[str, Any],
    task: McpTask,
    request_timeout_s: float,
) -> Any:
    """The ``CallToolResult`` of ``tool`` run as a task: the one ``task`` names, else a
    new one whose id ``task.created`` commits first. Raises ``trio.TooSlowError`` for a
    request that gets no answer in time, :class:`TaskCancelledError` for a cancelled
    task, :class:`TaskLostError` for a task the log names that the server no longer
    knows, the SDK's errors for the rest."""
    from mcp import types

    task_id = task.task_id
    resumed = task_id is not None
    ttl_ms: int | None = None
    if task_id is None:
        with trio.fail_after(request_timeout_s):
            raw = await _create(session, tool, arguments, meta)
        if "task" not in raw:  # the server ran it at once: a plain result
            return types.CallToolResult.model_validate(raw, by_name=False)
        created = types.CreateTaskResult.model_validate(raw, by_name=False).task
        task_id, ttl_ms = created.task_id, created.ttl
        await task.created(task_id, ttl_ms)
    try:
        with trio.fail_after(ttl_ms / 1000 if ttl_ms else math.inf):
            await _wait(session, task_id, request_timeout_s, resumed)
            with trio.fail_after(request_timeout_s):
                return await session.send_request(
                    types.GetTaskPayloadRequest(
                        params=types.GetTaskPayloadRequestParams(task_id=task_id)
                    ),
                    types.CallToolResult,
                )
    except trio.Cancelled:
        with trio.CancelScope(shield=True), trio.move_on_after(CANCEL_WAIT_S):
            await _cancel(session, task_id)
        raise


async def _wait(session: Any, task_id: str, request_timeout_s: float, resumed: bool) -> None:
    """Poll until the task is done (completed, failed) or waits for input (which only
    tasks/result delivers); raise if it was cancelled, or (``resumed``: an earlier
    process created it) if the server's first answer is an error."""
    from mcp import MCPError, types
    from mcp_types import CONNECTION_CLOSED

    low, high, default = POLL_MS
    while True:
        try:
            with trio.fail_after(request_timeout_s):
                status = await session.send_request(
                    types.GetTaskRequest(params=types.GetTaskRequestParams(task_id=task_id)),
                    types.GetTaskResult,
                )
        except MCPError as e:
            if not resumed or e.code == CONNECTION_CLOSED:
                raise
            raise TaskLostError(
                f"no longer knows task {task_id} (tasks/get answered {e.code}: {e}); an "
                "earlier process of this session created it and the server has lost it "
                "since (a stdio server is started anew when the session resumes, and "
                "keeps its tasks only if it stores them)"
            ) from e
        resumed = False
        if status.status == "cancelled":
            raise TaskCancelledError(f"task {task_id} was cancelled" + _said(status.status_message))
        if status.status != "working":
            return
        interval = status.poll_interval if status.poll_interval is not None else default
        await trio.sleep(min(max(interval, low), high) / 1000)


async def _cancel(session: Any, task_id: str) -> None:
    from mcp import types

    # The server may be gone or the task over: either way, nothing more to do.
    with contextlib.suppress(Exception):
        await session.send_request(
            types.CancelTaskRequest(params=types.CancelTaskRequestParams(task_id=task_id)),
            types.CancelTaskResult,
        )


async def _create(session: Any, tool: str, arguments: dict[str, Any], meta: Any) -> dict[str, Any]:
    """Send the task-augmented tools/call and return the answer unchecked (a task or,
    from a server that ignores ``task``, a result), as ``send_request`` sends it."""
    from mcp import types
    from mcp.shared.inbound import MCP_NAME_HEADER, encode_header_value

    request = types.CallToolRequest(
        params=types.CallToolRequestParams(
            name=tool, arguments=arguments, task=types.TaskMetadata(), _meta=meta
        )
    )
    data = request.model_dump(by_alias=True, mode="json", exclude_none=True)
    opts: dict[str, Any] = {}
    session._stamp(data, opts)
    opts.setdefault("headers", {}).setdefault(MCP_NAME_HEADER, encode_header_value(tool))
    raw: dict[str, Any] = await session._dispatcher.send_raw_request(
        "tools/call", data["params"], opts
    )
    return raw


def _said(message: str | None) -> str:
    return f": {message}" if message else ""
