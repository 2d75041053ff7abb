"""The prompt composer: a pure function from session state to the model request.

Per turn the model gets top-level instructions (base rules, ``<available_skills>``,
``<active_skills>`` with each loaded SKILL.md body in load order, later wins), the
append-only message history, and the tool definitions. Nothing here reads a clock,
the environment or the filesystem: the same state gives the same bytes anywhere.

Canonical bytes of a request (what ``request_hash`` hashes, see docs/events.md): one
line per message (canonical JSON + ``\\n``) in history order, then one tail line with
``max_tokens``, ``model``, ``system`` and ``tools``. History first means a running hash
over the messages makes each turn's hash O(new bytes), however long the session.
"""

from __future__ import annotations

import functools
import hashlib
from collections.abc import Mapping, Sequence
from typing import Any
from xml.sax.saxutils import escape, quoteattr

import msgspec

from ._context import shown_instructions
from ._events import SkillInfo, ToolDef
from ._model import History, Message, ModelRequest, ToolImage, ToolSpec, encode_canonical
from ._policy import allowlist, offered
from ._state import ActiveSkill, SessionState

BASE_RULES = """\
You can use Agent Skills: packaged instructions, reference files and scripts for \
specific tasks, listed in <available_skills>.

Rules:
- Before you follow a skill's instructions or use its files or scripts, load it with \
the skills.load tool. Its instructions then appear in <active_skills>.
- Only skills listed in <available_skills> exist. Load only what the task needs; \
unload skills you no longer need with skills.unload.
- When the instructions of active skills conflict, the skill loaded later takes \
precedence.
- Read a loaded skill's files (references/, assets/) with skills.read and run its \
scripts (scripts/) with skills.run_script, using paths relative to the skill's root.
- A tool error explains what went wrong; adjust and continue."""

RESULTS_RULES = BASE_RULES.replace(
    "Its instructions then appear in <active_skills>.",
    "Its instructions then appear in the tool's result (or in <active_skills>); follow "
    "them while the skill is loaded, and no longer once it is unloaded.",
)

SEARCH_RULE = """
- Find skills for a task with skills.search (ranked by relevance; it also shows their \
descriptions); skills.list returns the whole catalog as data."""

COMPACT_DESCRIPTION_CHARS = 120


class Tail(msgspec.Struct, frozen=True, kw_only=True):
    """The last line of a canonical request: everything but the history."""

    max_tokens: int
    model: str
    system: str
    tools: tuple[ToolSpec, ...]


def compose(
    state: SessionState,
    bodies: Mapping[str, str],
    prefix: tuple[str, tuple[ToolSpec, ...]] | None = None,
) -> ModelRequest:
    """The request for the next model call. ``bodies`` maps the body digest of each
    active skill to its SKILL.md body (content-addressed, so looking one up is pure).
    ``prefix``: its system prompt and tools, when the caller kept them
    (:func:`prefix_key`)."""
    config = state.config
    if config is None:
        raise ValueError("cannot compose before session.started")
    if prefix is None:
        prefix = (system_prompt(state, bodies), tool_specs(state))
    system, tools = prefix
    return ModelRequest(
        model=config.model,
        system=system,
        messages=History(state.messages),
        tools=tools,
        max_tokens=config.max_tokens,
        cache_key=f"skillog-{state.session_id}",
    )


def prefix_key(state: SessionState) -> int | None:
    """What the system prompt and the tools of ``state`` are made of, as a number that
    moves on when it changes (``SessionState.prompt_inputs``); None when the history is
    part of it too (instructions mode ``results``): keep nothing then."""
    assert state.config is not None
    return None if state.config.instructions_mode == "results" else state.prompt_inputs


def system_prompt(state: SessionState, bodies: Mapping[str, str]) -> str:
    """Base rules, the catalog and the active skills' instructions."""
    assert state.config is not None
    if not state.catalog and not state.active:
        return ""
    mode = state.config.catalog_mode
    results = state.config.instructions_mode == "results"
    rules = RESULTS_RULES if results else BASE_RULES
    sections = [rules + SEARCH_RULE if mode else rules]
    if state.catalog:
        skills = tuple(state.catalog.values())
        if not mode:
            mode = "compact" if len(skills) > state.config.compact_catalog_over else "full"
        sections.append(catalog_block(skills, state.config.file_access, mode))
    active = skills_in_block(state, bodies)
    if active:
        sections.append(active_skills(active, bodies))
    return "\n\n".join(sections)


def skills_in_block(state: SessionState, bodies: Mapping[str, str]) -> Sequence[ActiveSkill]:
    """The active skills whose instructions the ``<active_skills>`` block shows: all of
    them, but in instructions mode ``results`` those an uncleared ``skills.load``
    result shows (there they stay, and the prefix does not change)."""
    assert state.config is not None
    if state.config.instructions_mode != "results" or not state.active:
        return state.active
    shown = shown_instructions(state.messages)
    return [s for s in state.active if (s.name, bodies[s.body_digest]) not in shown]


def catalog_block(skills: tuple[SkillInfo, ...], file_access: bool, mode: str) -> str:
    """``<available_skills>`` in catalog ``mode`` (``full``, ``compact``, ``names``,
    ``search``)."""
    if mode == "search":
        return (
            f'<available_skills count="{len(skills)}">'
            "Find the skills you need with skills.search.</available_skills>"
        )
    if mode == "names":
        return names_block(skills)
    return available_skills(skills, file_access, compact=mode == "compact")


@functools.lru_cache(maxsize=32)
def names_block(skills: tuple[SkillInfo, ...]) -> str:
    """Names only (seed 001's summary): the model searches for what they do."""
    lines = ["<available_skills>"]
    lines += [f"  <skill name={quoteattr(s.name)}/>" for s in skills]
    lines.append("</available_skills>")
    return "\n".join(lines)


@functools.lru_cache(maxsize=32)
def available_skills(skills: tuple[SkillInfo, ...], file_access: bool, *, compact: bool) -> str:
    """The ``<available_skills>`` block (tier 1 of progressive disclosure), escaped.

    ``compact`` renders one line per skill with a shortened description (the skill's
    own ``metadata.summary`` when it has one), for catalogs too large to list in full.
    A skill's declared version and the tools loading it unlocks are shown when it has
    them (so catalogs recorded before they existed
    render as they always did)."""
    lines = ["<available_skills>"]
    for skill in skills:
        if compact:
            desc = _shorten(skill.summary or skill.description, COMPACT_DESCRIPTION_CHARS)
            attrs = f"name={quoteattr(skill.name)}"
            if skill.version is not None:
                attrs += f" version={quoteattr(skill.version)}"
            if skill.tools:
                attrs += f" tools={quoteattr(' '.join(skill.tools))}"
            lines.append(f"  <skill {attrs}>{escape(desc)}</skill>")
            continue
        lines.append("  <skill>")
        lines.append(f"    <name>{escape(skill.name)}</name>")
        lines.append(f"    <description>{escape(skill.description)}</description>")
        if skill.version is not None:
            lines.append(f"    <version>{escape(skill.version)}</version>")
        if skill.tools:
            lines.append(f"    <tools>{escape(', '.join(skill.tools))}</tools>")
        if file_access and skill.location is not None:
            lines.append(f"    <location>{escape(skill.location)}</location>")
        lines.append("  </skill>")
    lines.append("</available_skills>")
    return "\n".join(lines)


def active_skills(active: Sequence[ActiveSkill], bodies: Mapping[str, str]) -> str:
    """The ``<active_skills>`` block: each body verbatim, in load order.

    Bodies are markdown meant for the model, so they are not XML-escaped (that would
    mangle code samples); only a closing tag that would end the block early is
    defused."""
    return _active_block(tuple((s.name, s.hash[:12], bodies[s.body_digest]) for s in active))


@functools.lru_cache(maxsize=32)
def _active_block(skills: tuple[tuple[str, str, str], ...]) -> str:
    """(Remembered: the same skills are active turn after turn.)"""
    lines = ["<active_skills>"]
    for name, short_hash, body in skills:
        lines.append(f"<skill name={quoteattr(name)} hash={quoteattr(short_hash)}>")
        lines.append(_defuse(body).strip("\n"))
        lines.append("</skill>")
    lines.append("</active_skills>")
    return "\n".join(lines)


def tool_specs(state: SessionState) -> tuple[ToolSpec, ...]:
    """Runtime skill tools (when there are skills), host tools, MCP servers' tools, the
    tools of active inline skills; filtered by the active skills' ``allowed-tools``."""
    assert state.config is not None
    specs: list[ToolSpec] = []
    if state.catalog or state.active:
        # An active skill a rescan removed from the catalog stays readable (pinned).
        pinned = tuple(n for n in state.active_names if n not in state.catalog)
        mode = state.config.catalog_mode
        # Listing the names as enums would put the catalog back into every request.
        unlisted = mode in ("names", "search")
        names = () if unlisted else tuple(state.catalog)
        specs.extend(skill_tool_specs(names, state.config.max_active_skills, pinned, unlisted))
        if mode:
            specs.extend(SEARCH_TOOL_SPECS)
    specs.extend(_spec(t) for t in state.config.host_tools)
    specs.extend(_spec(t) for t in state.mcp_tools.values())
    for skill in state.active:
        specs.extend(_spec(t) for t in skill.tools)
    rules = allowlist(state.active)
    return tuple(s for s in specs if offered(rules, s.name))


@functools.lru_cache(maxsize=32)
def skill_tool_specs(
    names: tuple[str, ...], cap: int, pinned: tuple[str, ...] = (), unlisted: bool = False
) -> tuple[ToolSpec, ...]:
    """The four runtime tools with JSON Schemas; skill names are an enum of the catalog
    (for reads and scripts, also of the ``pinned`` active skills no longer in it)."""
    load_enum: dict[str, Any] = {"type": "string", "enum": list(names)}
    name_enum: dict[str, Any] = {"type": "string", "enum": [*names, *pinned]}
    if unlisted:  # catalog mode names or search: any name, checked when called
        load_enum = name_enum = {"type": "string"}
    return (
        ToolSpec(
            name="skills.load",
            description=(
                "Load skills so their instructions appear in <active_skills>. mode 'replace' "
                "(default) replaces the loaded set; 'add' adds to it. "
                f"At most {cap} skills can be active at once."
            ),
            input_schema={
                "type": "object",
                "properties": {
                    "names": {"type": "array", "items": load_enum, "minItems": 1},
                    "mode": {"type": "string", "enum": ["replace", "add"], "default": "replace"},
                },
                "required": ["names"],
                "additionalProperties": False,
            },
        ),
        ToolSpec(
            name="skills.unload",
            description="Unload the named skills, or all of them with all=true.",
            input_schema={
                "type": "object",
                "properties": {
                    "names": {"type": "array", "items": {"type": "string"}},
                    "all": {"type": "boolean"},
                },
                "additionalProperties": False,
            },
        ),
        ToolSpec(
            name="skills.read",
            description=(
                "Read a file of a loaded skill (e.g. references/guide.md), relative to the "
                "skill's root. skill defaults to the most recently loaded one. Binary files "
                "come back base64-encoded."
            ),
            input_schema={
                "type": "object",
                "properties": {"skill": name_enum, "path": {"type": "string"}},
                "required": ["path"],
                "additionalProperties": False,
            },
        ),
        ToolSpec(
            name="skills.run_script",
            description=(
                "Run a script from a loaded skill's scripts/ directory with arguments; returns "
                "exit_code, stdout and stderr. skill defaults to the most recently loaded one."
            ),
            input_schema={
                "type": "object",
                "properties": {
                    "skill": name_enum,
                    "path": {"type": "string"},
                    "args": {"type": "array", "items": {"type": "string"}},
                    "env": {"type": "object", "additionalProperties": {"type": "string"}},
                    "workdir": {"type": "string"},
                },
                "required": ["path"],
                "additionalProperties": False,
            },
        ),
    )


SEARCH_TOOL_SPECS = (
    ToolSpec(
        name="skills.search",
        description=(
            "Search the available skills by what they do: ranked full-text search over "
            "their names, descriptions, tags and headings. Returns the best matches with "
            "their descriptions; load one with skills.load."
        ),
        input_schema={
            "type": "object",
            "properties": {
                "query": {"type": "string", "minLength": 1},
                "limit": {"type": "integer", "minimum": 1, "maximum": 20, "default": 5},
            },
            "required": ["query"],
            "additionalProperties": False,
        },
    ),
    ToolSpec(
        name="skills.list",
        description="The available skills as JSON data: name, description, version, tier.",
        input_schema={"type": "object", "properties": {}, "additionalProperties": False},
    ),
)


def message_line(message: Message) -> bytes:
    """One history line of the canonical request. An image is named by its digest:
    the bytes an adapter was handed (``ToolImage.data``) are not part of it."""
    if any(isinstance(p, ToolImage) and p.data for p in message.parts):
        message = Message(
            role=message.role,
            parts=tuple(
                msgspec.structs.replace(p, data=b"") if isinstance(p, ToolImage) else p
                for p in message.parts
            ),
        )
    return encode_canonical(message) + b"\n"


def tail_line(request: ModelRequest) -> bytes:
    """The final line of the canonical request."""
    tail = Tail(
        max_tokens=request.max_tokens,
        model=request.model,
        system=request.system,
        tools=request.tools,
    )
    return encode_canonical(tail) + b"\n"


def request_bytes(request: ModelRequest) -> bytes:
    """The canonical bytes of a whole request (what ``request_hash`` hashes)."""
    return b"".join(message_line(m) for m in request.messages) + tail_line(request)


def request_hash(request: ModelRequest) -> str:
    return hashlib.sha256(request_bytes(request)).hexdigest()


@functools.lru_cache(maxsize=1024)
def _spec(tool: ToolDef) -> ToolSpec:
    # Only what the model is offered: an MCP tool's server-side fields stay in the log.
    schema: dict[str, Any] = msgspec.json.decode(tool.input_schema)
    return ToolSpec(name=tool.name, description=tool.description, input_schema=schema)


def _shorten(text: str, limit: int) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1].rstrip() + "…"


def _defuse(body: str) -> str:
    return body.replace("</skill>", "&lt;/skill>").replace(
        "</active_skills>", "&lt;/active_skills>"
    )
