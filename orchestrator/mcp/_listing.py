"""An MCP server's tool list as the session records and offers it. Pure.

Each tool the server lists becomes an :class:`~orchestrator._events.McpToolDef` named
``mcp__<server>__<tool>`` (the convention Claude Code uses), with its JSON Schema as
canonical text and an effect class from its annotations (``readOnlyHint`` → pure,
``idempotentHint`` → idempotent, otherwise at-most-once) unless the configuration
overrides it. A tool the session cannot offer faithfully is left out and named in
``rejected`` with the reason: a name model providers refuse (over 64 characters once
prefixed) or that two tools would share, a schema that is not a valid JSON Schema of
an object. A tool that can only be called as a task (``execution.taskSupport:
"required"``, MCP 2025-11-25) is offered and called task-augmented (``mcp/_tasks.py``).
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable, Mapping
from typing import Any, Literal

import jsonschema
import jsonschema.exceptions
import jsonschema.validators

from .._events import EffectClass, McpToolDef, McpToolsListed
from .._model import encode_canonical
from .._policy import MCP_PREFIX
from ..skills import McpServerConfig

MAX_NAME = 64
"""Model providers' limit on a tool name (Anthropic and OpenAI alike)."""

_UNSAFE = re.compile(r"[^A-Za-z0-9_-]")


def session_name(server: str, tool: str) -> str:
    """``mcp__<server>__<tool>``, every character providers refuse in a tool name
    replaced by ``_``."""
    return f"{MCP_PREFIX}{server}__{_UNSAFE.sub('_', tool)}"


def effect_of(
    tool: str, annotations: Mapping[str, Any], overrides: Mapping[str, str]
) -> EffectClass:
    """The tool's effect class: the configuration's override (by tool name, then
    ``"*"``), else its annotations."""
    override = overrides.get(tool, overrides.get("*"))
    if override == "pure" or (override is None and annotations.get("readOnlyHint") is True):
        return "pure"
    if override == "idempotent" or (override is None and annotations.get("idempotentHint") is True):
        return "idempotent"
    return "at-most-once"


def tools_listed(
    server: McpServerConfig,
    tools: Iterable[Mapping[str, Any]],
    *,
    reason: Literal["connected", "list_changed"],
    server_info: str,
    taken: frozenset[str] = frozenset(),
) -> McpToolsListed:
    """The ``mcp.tools_listed`` event for the tools (as the wire has them, camelCase)
    a server listed. ``taken``: the session's other tool names, which an MCP tool may
    not shadow."""
    offered: list[McpToolDef] = []
    rejected: list[tuple[str, str]] = []
    names = set(taken)
    for raw in tools:
        mcp_name = str(raw.get("name", ""))
        problem = _problem(server.name, raw, names)
        if problem is not None:
            rejected.append((mcp_name, problem))
            continue
        name = session_name(server.name, mcp_name)
        names.add(name)
        annotations = raw.get("annotations") or {}
        offered.append(
            McpToolDef(
                name=name,
                description=str(raw.get("description") or raw.get("title") or mcp_name),
                input_schema=encode_canonical(raw["inputSchema"]).decode(),
                effect=effect_of(mcp_name, annotations, server.effects),
                server=server.name,
                mcp_name=mcp_name,
                annotations=encode_canonical(annotations).decode() if annotations else "",
                task=_task_only(raw),
            )
        )
    listed = tuple(offered)
    return McpToolsListed(
        server=server.name,
        transport=server.transport,
        reason=reason,
        tools=listed,
        hash=hashlib.sha256(encode_canonical(listed)).hexdigest(),
        rejected=tuple(rejected),
        server_info=server_info,
    )


def _task_only(raw: Mapping[str, Any]) -> bool:
    execution = raw.get("execution")
    return isinstance(execution, Mapping) and execution.get("taskSupport") == "required"


def _problem(server: str, raw: Mapping[str, Any], names: set[str]) -> str | None:
    mcp_name = raw.get("name")
    if not isinstance(mcp_name, str) or not mcp_name:
        return "the tool has no name"
    name = session_name(server, mcp_name)
    if len(name) > MAX_NAME:
        return f"{name!r} is {len(name)} characters; model providers accept at most {MAX_NAME}"
    if name in names:
        return f"{name!r} is already the name of another tool of this session"
    schema = raw.get("inputSchema")
    if not isinstance(schema, dict) or schema.get("type") != "object":
        return 'the input schema is not a JSON Schema object ({"type": "object", ...})'
    try:
        jsonschema.validators.validator_for(schema).check_schema(schema)
    except jsonschema.exceptions.SchemaError as e:
        where = "/".join(map(str, e.absolute_path)) or "the top"
        return f"the input schema is not a valid JSON Schema: {e.message} (at {where})"
    return None
