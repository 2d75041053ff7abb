"""Toolsets from skill folders (seed 003 PL1): tools backed by a skill's own scripts.

A skill declares them in ``tools.yaml`` at its root (not in the frontmatter: the Agent
Skills specification rejects unknown top-level fields, and ``metadata`` values are
strings)::

    tools:
      - name: stats
        description: Column statistics of a CSV file in the skill's workdir.
        script: scripts/stats.py
        input_schema:
          type: object
          properties: {path: {type: string}}
          required: [path]
          additionalProperties: false

While the skill is active the model is offered ``<skill>__<name>`` with that schema; a
call is validated against the schema and runs ``script`` through the same sandboxed,
approved, recorded path as ``skills.run_script``, with the arguments as one argv
element of canonical JSON. The file is read from the skill's pinned snapshot, so the
tools are what the log recorded (``skill.activated.tools``).
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping

import jsonschema
import jsonschema.exceptions
import jsonschema.validators
import msgspec
import yaml

from ._errors import SkillError
from ._tree import read_file, walk_tree

TOOLS_FILE = "tools.yaml"
MAX_TOOLS = 32
MAX_TOOLS_FILE_BYTES = 64 * 1024
MAX_PROBLEM_CHARS = 300
_NAME = re.compile(r"[a-z0-9][a-z0-9_]{0,31}")
# Names the runtime gives other tools: MCP servers' tools are ``mcp__<server>__<tool>``,
# so a skill named ``mcp`` would offer tools that read as a server's.
RESERVED_PREFIXES = ("mcp__",)


class ToolsetError(SkillError):
    """A skill's ``tools.yaml`` that cannot be used: says which tool and what to fix."""


class ScriptTool(msgspec.Struct, frozen=True, kw_only=True):
    """One declared tool: the name offered (``<skill>__<name>``), its description, its
    input schema as canonical JSON text, and the script (a file of the skill) it runs."""

    name: str
    description: str
    input_schema: str
    script: str


class _Decl(msgspec.Struct, forbid_unknown_fields=True):
    name: str
    description: str
    script: str
    input_schema: dict[str, object] = msgspec.field(
        default_factory=lambda: {"type": "object", "additionalProperties": False}
    )


class _File(msgspec.Struct, forbid_unknown_fields=True):
    tools: list[_Decl]


def parse_toolset(skill: str, files: Mapping[str, bytes]) -> tuple[ScriptTool, ...]:
    """The tools skill ``skill`` declares in its ``tools.yaml``, none without one;
    ``files`` are the skill's files by relative path (a tool's script must be one)."""
    data = files.get(TOOLS_FILE)
    if data is None:
        return ()
    where = f"{skill}/{TOOLS_FILE}"
    if len(data) > MAX_TOOLS_FILE_BYTES:
        raise ToolsetError(f"{where} is {len(data)} bytes; the limit is {MAX_TOOLS_FILE_BYTES}")
    try:
        raw = yaml.safe_load(data.decode("utf-8"))
        declared = msgspec.convert(raw, _File)
    except (UnicodeDecodeError, yaml.YAMLError) as e:
        raise ToolsetError(f"{where} is not UTF-8 YAML: {e}") from None
    except msgspec.ValidationError as e:
        raise ToolsetError(
            f"{where}: {e}; write tools: [{{name, description, script, input_schema}}]"
        ) from None
    if len(declared.tools) > MAX_TOOLS:
        raise ToolsetError(f"{where} declares {len(declared.tools)} tools; at most {MAX_TOOLS}")
    out: list[ScriptTool] = []
    seen: set[str] = set()
    for i, d in enumerate(declared.tools):
        at = f"{where}: tools[{i}]"
        if not _NAME.fullmatch(d.name):
            raise ToolsetError(f"{at}: name {d.name!r} must be 1-32 lowercase letters, digits or _")
        if d.name in seen:
            raise ToolsetError(f"{at}: the name {d.name!r} is declared twice; rename one")
        seen.add(d.name)
        full = f"{skill}__{d.name}"
        if full.startswith(RESERVED_PREFIXES):
            raise ToolsetError(
                f"{at}: the tool would be offered as {full!r}, a name of the MCP servers' "
                "tools (mcp__<server>__<tool>); rename the skill"
            )
        if not 1 <= len(d.description) <= 1024:
            raise ToolsetError(f"{at}: the description must be 1 to 1024 characters")
        parts = d.script.replace("\\", "/").split("/")
        if d.script.startswith(("/", "\\")) or ".." in parts or ":" in parts[0]:
            raise ToolsetError(
                f"{at}: script {d.script!r} leaves the skill's folder; give a path inside "
                "it, relative to the skill root (scripts/run.py)"
            )
        if d.script not in files:
            raise ToolsetError(f"{at}: script {d.script!r} is not a file of the skill")
        schema = d.input_schema
        if schema.get("type") != "object":
            raise ToolsetError(f'{at}: input_schema must be a JSON Schema with type "object"')
        try:
            jsonschema.validators.validator_for(schema).check_schema(schema)
        except jsonschema.exceptions.SchemaError as e:
            raise ToolsetError(
                f"{at}: input_schema is not a valid JSON Schema: {e.message}"
            ) from None
        try:
            text = msgspec.json.encode(schema, order="sorted").decode()
        except (TypeError, msgspec.EncodeError) as e:
            raise ToolsetError(f"{at}: input_schema cannot be JSON: {e}") from None
        out.append(
            ScriptTool(
                name=f"{skill}__{d.name}",
                description=d.description,
                input_schema=text,
                script=d.script,
            )
        )
    return tuple(out)


def read_toolset(skill: str, root: str) -> tuple[ScriptTool, ...]:
    """The tools the skill ``skill`` in the directory ``root`` declares, read from disk
    (``skills validate``, the catalog before activation); :class:`ToolsetError` says
    what is wrong. The runtime reads the pinned snapshot instead (:func:`parse_toolset`)."""
    if not os.path.lexists(os.path.join(root, TOOLS_FILE)):
        return ()  # most skills: no walk
    files, _problems = walk_tree(root)  # the skill's own loading reports tree problems
    by_rel = {f.rel: f for f in files}
    tools = by_rel.get(TOOLS_FILE)
    if tools is None:
        return ()
    if tools.size > MAX_TOOLS_FILE_BYTES:
        raise ToolsetError(
            f"{skill}/{TOOLS_FILE} is {tools.size} bytes; the limit is {MAX_TOOLS_FILE_BYTES}"
        )
    try:
        data = read_file(tools.path)
    except OSError as e:
        raise ToolsetError(f"{skill}/{TOOLS_FILE} cannot be read: {e.strerror or e}") from None
    return parse_toolset(skill, {**dict.fromkeys(by_rel, b""), TOOLS_FILE: data})


def argument_problem(schema: str, value: object) -> str | None:
    """Why ``value`` does not fit ``schema`` (canonical JSON text): the first error with
    where it is (``$.rows[2]``), or None."""
    loaded = msgspec.json.decode(schema)
    validator = jsonschema.validators.validator_for(loaded)(loaded)
    error = jsonschema.exceptions.best_match(validator.iter_errors(value))
    if error is None:
        return None
    path = "$" + "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in error.absolute_path)
    message = error.message  # quotes the offending value: never the whole of a huge one
    if len(message) > MAX_PROBLEM_CHARS:
        message = message[: MAX_PROBLEM_CHARS // 2] + " … " + message[-MAX_PROBLEM_CHARS // 2 :]
    return f"{message} - at `{path[:MAX_PROBLEM_CHARS]}`"
