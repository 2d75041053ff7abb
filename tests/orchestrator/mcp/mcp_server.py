"""A real MCP server for the tests, on the SDK's low-level server API.

Run as ``python mcp_server.py KIND [--http PORT]``. Kinds:

- ``tracker``: ``find_issue`` (readOnlyHint), ``label_issue`` (idempotentHint),
  ``create_issue`` (no hints: at-most-once), ``screenshot`` (an image and a resource
  link), ``big`` (``megabytes`` of text), ``slow`` (sleeps ``seconds``), ``crash``
  (exits mid-call), ``grow`` (adds the tool ``extra`` and says the list changed),
  ``fail`` (an ``isError`` result). Every call appends a line to ``$MCP_LEDGER`` (when
  set) before it answers, so a test sees what really ran.
- ``docs``: ``search`` (readOnlyHint), ``fetch`` and ``big``; the second server of a
  session, and the one served over HTTP.
- ``odd``: tools with odd names, a colliding name, an over-long name, invalid schemas.
- ``modern``: what newer servers do (server-everything among them): says its tool
  list changed while the client connects; ``whoami`` (the client's ``clientInfo``),
  ``job`` (callable only as a task, ``seconds`` long: tasks/get, tasks/result and
  tasks/cancel; the ledger has each task created and cancelled), ``chart`` (an
  image), ``steps`` (progress notifications and log messages before it answers, ``delay_ms``
  apart);
  ``write`` (idempotentHint);
  ``ask`` (asks the client to sample ``question`` ``times`` times, answers with what
  came back, errors included), ``ask_image`` (asks to sample an image), ``roots``
  (what the client answers to ``roots/list``, and how many
  ``notifications/roots/list_changed`` it sent so far); ``form`` (asks the client to
  fill a form of the requested ``schema``, answers with what came back), ``link``
  (a URL-mode elicitation).
- ``mute``: answers nothing, ever (hangs on ``initialize``).
- ``raw``: JSON-RPC by hand, not the SDK: initializes, then lists a tool whose input
  schema is not an object (which the SDK's own server refuses to send).
- ``flood BYTES``: JSON-RPC by hand: ``echo`` answers with its ``text``; before its
  first answer it writes one line of ``BYTES`` bytes, 64 KiB at a time, and a line
  that is not UTF-8.
"""

from __future__ import annotations

import json
import os
import sys
import time
import warnings
from typing import Any

import anyio
import mcp.types as types
from mcp import MCPDeprecationWarning, MCPError
from mcp.server.lowlevel import Server
from mcp.server.stdio import stdio_server

OBJECT = {"type": "object", "properties": {}, "additionalProperties": False}


def _schema(**properties: Any) -> dict[str, Any]:
    return {"type": "object", "properties": properties, "required": list(properties)}


def _tool(name: str, schema: dict[str, Any], **hints: bool) -> types.Tool:
    annotations = types.ToolAnnotations(**hints) if hints else None
    return types.Tool(
        name=name, description=f"The {name} tool.", input_schema=schema, annotations=annotations
    )


TRACKER = [
    _tool("find_issue", _schema(number={"type": "integer"}), read_only_hint=True),
    _tool("label_issue", _schema(number={"type": "integer"}), idempotent_hint=True),
    _tool("create_issue", _schema(title={"type": "string"})),
    _tool("screenshot", OBJECT, read_only_hint=True),
    _tool("big", _schema(megabytes={"type": "integer"}), read_only_hint=True),
    _tool("slow", _schema(seconds={"type": "number"})),
    _tool("crash", OBJECT),
    _tool("grow", OBJECT),
    _tool("fail", OBJECT, read_only_hint=True),
]
DOCS = [
    _tool("search", _schema(query={"type": "string"}), read_only_hint=True),
    _tool("fetch", _schema(page={"type": "string"})),
    _tool("big", _schema(megabytes={"type": "integer"}), read_only_hint=True),
]
ODD = [
    _tool("what is.this/tool?", OBJECT, read_only_hint=True),
    _tool("what_is_this_tool_", OBJECT),  # the same name once made safe
    _tool("skills.load", OBJECT),  # the runtime's tool name: namespaced, so harmless
    _tool("x" * 80, OBJECT),
    _tool("bad_type", {"type": "object", "properties": {"a": {"type": "banana"}}}),
    _tool("fine", _schema(q={"type": "string"}), read_only_hint=True),
]
MODERN = [
    _tool("whoami", OBJECT, read_only_hint=True),
    types.Tool(
        name="job",
        description="A long job, only as a task.",
        input_schema=_schema(seconds={"type": "number"}),
        execution=types.ToolExecution(task_support="required"),
    ),
    _tool("chart", OBJECT, read_only_hint=True),
    _tool(
        "steps",
        {
            "type": "object",
            "properties": {"count": {"type": "integer"}, "delay_ms": {"type": "integer"}},
            "required": ["count"],
        },
        read_only_hint=True,
    ),
    _tool("write", _schema(text={"type": "string"}), idempotent_hint=True),
    _tool("ask", _schema(question={"type": "string"}, times={"type": "integer"})),
    _tool("ask_image", OBJECT),
    _tool("roots", OBJECT, read_only_hint=True),
    _tool("form", _schema(schema={"type": "object"})),
    _tool("link", OBJECT),
]
PNG = (
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR4nGNgYPj/HwADAgH/"
    "eL9GtQAAAABJRU5ErkJggg=="
)
"""A 1x1 PNG, base64."""


TASKS: dict[str, dict[str, Any]] = {}
"""The ``job`` tasks of this process: id -> status, deadline (monotonic), result."""


def _task(task_id: str) -> dict[str, Any]:
    if task_id not in TASKS:  # what the spec asks for an unknown task: invalid params
        raise MCPError(-32602, f"unknown task {task_id}")
    entry = TASKS[task_id]
    if entry["status"] == "working" and time.monotonic() >= entry["deadline"]:
        entry["status"] = "completed"
    stamp = "2026-01-01T00:00:00Z"
    return {
        "taskId": task_id,
        "status": entry["status"],
        "createdAt": stamp,
        "lastUpdatedAt": stamp,
        "ttl": 600_000,
        "pollInterval": 100,
    }


def _create_task(args: dict[str, Any]) -> types.CreateTaskResult:
    task_id = f"task-{os.getpid()}-{len(TASKS) + 1}"
    seconds = float(args.get("seconds", 1))
    TASKS[task_id] = {
        "status": "working",
        "deadline": time.monotonic() + seconds,
        "result": _text(f"job done after {seconds} s"),
    }
    _ledger({"task_created": task_id})
    return types.CreateTaskResult.model_validate({"task": _task(task_id)})


def _add_task_methods(server: Server[Any]) -> None:
    """tasks/get, tasks/result and tasks/cancel. The SDK's server defines the task
    types but serves no task: it checks every tools/call answer against
    ``CallToolResult``, so a ``CreateTaskResult`` is let through that check here."""
    from mcp_types import methods

    check = methods.serialize_server_result

    def serialize(method: str, version: str, data: Any, **kw: Any) -> Any:
        if method == "tools/call" and "task" in data and "content" not in data:
            return data
        return check(method, version, data, **kw)

    methods.serialize_server_result = serialize  # type: ignore[assignment]

    async def get(ctx: Any, params: types.GetTaskRequestParams) -> dict[str, Any]:
        return _task(params.task_id)

    async def result(ctx: Any, params: types.GetTaskPayloadRequestParams) -> types.CallToolResult:
        while _task(params.task_id)["status"] == "working":  # noqa: ASYNC110 (a clock)
            await anyio.sleep(0.05)
        if TASKS[params.task_id]["status"] == "cancelled":
            return types.CallToolResult(
                content=[types.TextContent(text="cancelled")], is_error=True
            )
        done: types.CallToolResult = TASKS[params.task_id]["result"]
        return done

    async def cancel(ctx: Any, params: types.CancelTaskRequestParams) -> dict[str, Any]:
        TASKS[params.task_id]["status"] = "cancelled"
        _ledger({"task_cancelled": params.task_id})
        return _task(params.task_id)

    server.add_request_handler("tasks/get", types.GetTaskRequestParams, get)
    server.add_request_handler("tasks/result", types.GetTaskPayloadRequestParams, result)
    server.add_request_handler("tasks/cancel", types.CancelTaskRequestParams, cancel)


def build(kind: str) -> Server[Any]:
    tools = {"tracker": TRACKER, "docs": DOCS, "odd": ODD, "modern": MODERN}[kind]
    state: dict[str, Any] = {"tools": list(tools), "listed": False, "roots_changed": 0}

    async def roots_changed(ctx: Any, params: Any) -> None:
        state["roots_changed"] += 1

    async def list_tools(ctx: Any, params: Any) -> types.ListToolsResult:
        if kind == "modern" and not state["listed"]:
            state["listed"] = True
            await ctx.session.send_tool_list_changed()
        return types.ListToolsResult(tools=state["tools"])

    async def call_tool(ctx: Any, params: types.CallToolRequestParams) -> Any:
        args = params.arguments or {}
        if params.name == "job":
            if params.task is None:
                raise MCPError(-32601, "job runs only as a task")
            return _create_task(args)
        meta = dict(params.meta or {})
        _ledger({"tool": params.name, "args": args, "meta": meta})
        name = params.name
        if name == "big":
            text = "y" * (int(args.get("megabytes", 1)) * 1024 * 1024)
            return _text(text)
        if name == "slow":
            await anyio.sleep(float(args.get("seconds", 1)))
            return _text("slept")
        if name == "crash":
            os._exit(3)
        if name == "grow":
            state["tools"] = [*state["tools"], _tool("extra", OBJECT, read_only_hint=True)]
            await ctx.session.send_tool_list_changed()
            return _text("grew")
        if name == "fail":
            return types.CallToolResult(
                content=[types.TextContent(text="no such issue")], is_error=True
            )
        if name == "whoami":
            info = ctx.session.client_params.client_info
            return _text(json.dumps({"name": info.name, "version": info.version}))
        if name == "chart":
            return types.CallToolResult(
                content=[
                    types.TextContent(text="the chart:"),
                    types.ImageContent(data=PNG, mime_type="image/png"),
                ]
            )
        if name == "steps":
            token = meta.get("progress_token")
            count = int(args.get("count", 3))
            for step in range(count):
                await anyio.sleep(int(args.get("delay_ms", 0)) / 1000)
                if token is not None:
                    await ctx.session.send_progress_notification(
                        token, step + 1, count, f"step {step + 1}"
                    )
                await _log(ctx, f"did step {step + 1}")
            return _text(f"{count} steps")
        if name == "ask":
            answers = []
            for _ in range(int(args.get("times", 1))):
                try:
                    answer = await _sample(
                        ctx,
                        messages=[
                            types.SamplingMessage(
                                role="user", content=types.TextContent(text=args["question"])
                            )
                        ],
                        max_tokens=50,
                        system_prompt="Answer briefly.",
                        temperature=0.5,
                    )
                    answers.append(f"{answer.model}: {answer.content.text}")
                except Exception as e:
                    answers.append(f"refused: {e}")
            return _text("\n".join(answers))
        if name == "ask_image":
            try:
                await _sample(
                    ctx,
                    messages=[
                        types.SamplingMessage(
                            role="user", content=types.ImageContent(data=PNG, mime_type="image/png")
                        )
                    ],
                    max_tokens=50,
                )
                return _text("sampled")
            except Exception as e:
                return _text(f"refused: {e}")
        if name == "form":
            try:
                got = await ctx.session.elicit_form("Who are you?", args["schema"])
                return _text(json.dumps({"action": got.action, "content": got.content}))
            except Exception as e:
                return _text(f"refused: {e}")
        if name == "link":
            got = await ctx.session.elicit_url("Sign in", "https://example.com/login", "e1")
            return _text(json.dumps({"action": got.action}))
        if name == "roots":
            listed = await ctx.session.send_request(types.ListRootsRequest(), types.ListRootsResult)
            roots = [{"uri": str(r.uri), "name": r.name} for r in listed.roots]
            return _text(json.dumps({"roots": roots, "changed": state["roots_changed"]}))
        if name == "screenshot":
            return types.CallToolResult(
                content=[
                    types.ImageContent(data="iVBORw0KGgo=", mime_type="image/png"),
                    types.ResourceLink(uri="file:///tmp/shot.png", name="shot.png"),
                ]
            )
        return _text(f"{kind}.{name}({json.dumps(args, sort_keys=True)})")

    server: Server[Any] = Server(
        kind,
        version="1.0",
        on_list_tools=list_tools,
        on_call_tool=call_tool,
    )
    server.add_notification_handler(
        "notifications/roots/list_changed", types.NotificationParams, roots_changed
    )
    if kind == "modern":
        _add_task_methods(server)
    return server


# Sampling, roots and logging are deprecated as of MCP 2026-07-28 (SEP-2577) and the SDK's
# helpers for them warn (MCPDeprecationWarning) and may go; the 2025-11-25 clients skillog
# is tested as still use them, so this server sends the typed messages itself.


async def _sample(ctx: Any, **params: Any) -> types.CreateMessageResult:
    request = types.CreateMessageRequest(params=types.CreateMessageRequestParams(**params))
    result: types.CreateMessageResult = await ctx.session.send_request(
        request, types.CreateMessageResult
    )
    return result


async def _log(ctx: Any, text: str) -> None:
    params = types.LoggingMessageNotificationParams(level="info", data=text, logger="steps")
    await ctx.session.send_notification(types.LoggingMessageNotification(params=params))


def _ledger(entry: dict[str, Any]) -> None:
    """Append what is about to run to $MCP_LEDGER, durably (a test may kill us next)."""
    path = os.environ.get("MCP_LEDGER")
    if path:
        with open(path, "a") as f:
            f.write(json.dumps(entry) + "\n")
            f.flush()
            os.fsync(f.fileno())


def _text(text: str) -> types.CallToolResult:
    return types.CallToolResult(content=[types.TextContent(text=text)])


async def _stdio(server: Server[Any]) -> None:
    from mcp.server.lowlevel import NotificationOptions

    options = server.create_initialization_options(NotificationOptions(tools_changed=True))
    async with stdio_server() as (read, write):
        await server.run(read, write, options)


def _raw() -> None:
    for line in sys.stdin:
        message = json.loads(line)
        if "id" not in message:
            continue
        if message["method"] == "initialize":
            result: dict[str, Any] = {
                "protocolVersion": message["params"]["protocolVersion"],
                "capabilities": {"tools": {}},
                "serverInfo": {"name": "raw", "version": "0"},
            }
        else:
            result = {"tools": [{"name": "t", "inputSchema": {"type": "string"}}]}
        print(json.dumps({"jsonrpc": "2.0", "id": message["id"], "result": result}), flush=True)


def _flood(size: int) -> None:
    flooded = False
    for line in sys.stdin:
        message = json.loads(line)
        if "id" not in message:
            continue
        result: dict[str, Any] = {}
        if message["method"] == "initialize":
            result = {
                "protocolVersion": message["params"]["protocolVersion"],
                "capabilities": {"tools": {}},
                "serverInfo": {"name": "flood", "version": "0"},
            }
        elif message["method"] == "tools/list":
            schema = _schema(text={"type": "string"})
            result = {"tools": [{"name": "echo", "inputSchema": schema}]}
        elif message["method"] == "tools/call":
            if not flooded:
                flooded = True
                chunk = b'{"jsonrpc": "2.0", ' + b"x" * (65536 - 19)
                for _ in range(size // len(chunk)):
                    os.write(1, chunk)
                os.write(1, b"\n\xff not UTF-8\n")
            text = message["params"]["arguments"]["text"]
            result = {"content": [{"type": "text", "text": text}]}
        answer = {"jsonrpc": "2.0", "id": message["id"], "result": result}
        os.write(1, json.dumps(answer).encode() + b"\n")


def main() -> None:
    # What the tests' filterwarnings = error does in pytest, here: a deprecated SDK helper
    # fails the server instead of warning on its stderr (and going in a later release).
    warnings.simplefilter("error", MCPDeprecationWarning)
    kind = sys.argv[1]
    if kind == "raw":
        _raw()
        return
    if kind == "flood":
        _flood(int(sys.argv[2]))
        return
    if kind == "mute":
        while sys.stdin.readline():
            pass
        time.sleep(3600)
        return
    server = build(kind)
    if "--http" in sys.argv:
        import uvicorn

        port = int(sys.argv[sys.argv.index("--http") + 1])
        app = server.streamable_http_app(host="127.0.0.1")
        uvicorn.run(app, host="127.0.0.1", port=port, log_level="warning")
    else:
        anyio.run(_stdio, server)


if __name__ == "__main__":
    main()
