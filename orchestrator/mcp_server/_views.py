"""What an MCP client of ``skillog mcp serve`` is shown: tools, the catalog and skill
files as resources. Pure functions of the session's folded state (and this code's
version, recorded in ``session.started``), so nothing here needs recording: the log
position of every call fixes what the client could see before it.
"""

from __future__ import annotations

import base64
import hashlib
import json
import mimetypes
from urllib.parse import quote, unquote

import mcp.types as types

from .._model import encode_canonical
from .._prompt import available_skills, tool_specs
from .._state import SessionState

CATALOG_URI = "skillog://catalog"
SKILL_SCHEME = "skill://"

INSTRUCTIONS = """\
This server gives you Agent Skills: packaged instructions, reference files and \
scripts for specific tasks, listed in the description of the skills.load tool (and \
as the resource skillog://catalog).

- Before you follow a skill's instructions or use its files or scripts, load it with \
skills.load. Its result carries the skill's instructions: follow them.
- Read a loaded skill's files (references/, assets/) with skills.read (or as the \
skill:// resources listed while it is loaded) and run its scripts (scripts/) with \
skills.run_script, using paths relative to the skill's root. Scripts run sandboxed.
- When the instructions of loaded skills conflict, the skill loaded later wins.
- A tool error explains what went wrong; adjust and continue.
Every call and its result is recorded in skillog's audit log."""

LOAD_DESCRIPTION = (
    "Load skills: the result carries their instructions, which you then follow. "
    "mode 'replace' (default) replaces the loaded set; 'add' adds to it. At most {cap} "
    "skills can be loaded at once. The skills:\n\n{catalog}"
)


def tools(state: SessionState) -> list[types.Tool]:
    """The tools the session offers now (the composer's, filtered by the loaded skills'
    ``allowed-tools``), the catalog in the description of ``skills.load``."""
    assert state.config is not None
    out = []
    for spec in tool_specs(state):
        description = spec.description
        if spec.name == "skills.load":
            catalog = available_skills(
                tuple(state.catalog.values()), state.config.file_access, compact=False
            )
            description = LOAD_DESCRIPTION.format(
                cap=state.config.max_active_skills, catalog=catalog
            )
        out.append(
            types.Tool(
                name=spec.name,
                description=description,
                input_schema=spec.input_schema,
                annotations=types.ToolAnnotations(read_only_hint=True)
                if spec.name == "skills.read"
                else None,
            )
        )
    return out


def catalog_json(state: SessionState) -> str:
    """The catalog as recorded (``catalog.snapshot``): name, description, hash, tier."""
    return encode_canonical(
        {
            "skills": [
                {
                    "name": s.name,
                    "description": s.description,
                    "hash": f"sha256:{s.hash}",
                    "tier": s.tier,
                    "loaded": state.active_skill(s.name) is not None,
                }
                for s in state.catalog.values()
            ]
        }
    ).decode()


SKILL_TEMPLATE = types.ResourceTemplate(
    uri_template=SKILL_SCHEME + "{skill}/{path}",
    name="skill-file",
    title="A file of a loaded skill",
    description=(
        "A file of a skill loaded in this session (skills.load), as it was pinned when "
        "loaded: skill://NAME/PATH, e.g. skill://pdf/references/forms.md."
    ),
)
"""The one resource template (``resources/templates/list``)."""


def resources(state: SessionState) -> list[types.Resource]:
    """The catalog, and every file of every loaded skill as it was pinned when loaded
    (``skill://NAME/PATH``), each with its sha256 and its skill's hash."""
    out = [
        types.Resource(
            uri=CATALOG_URI,
            name="catalog",
            title="skillog skills catalog",
            description="The skills this session can load, with their hashes (JSON).",
            mime_type="application/json",
        )
    ]
    for skill in state.active:
        for entry in skill.files:
            out.append(
                types.Resource(
                    uri=skill_uri(skill.name, entry.path),
                    name=f"{skill.name}/{entry.path}",
                    description=f"{entry.path} of skill {skill.name}, sha256:{entry.sha256}",
                    mime_type=mimetypes.guess_type(entry.path)[0] or "application/octet-stream",
                    _meta={"sha256": entry.sha256, "skill_hash": f"sha256:{skill.hash}"},
                )
            )
    return out


def file_contents(
    state: SessionState, uri: str, skill: str, path: str, content: str
) -> types.TextResourceContents | types.BlobResourceContents:
    """A skill file read by ``skills.read`` (``content``, its result) as resource
    contents: binary files, which ``skills.read`` returns base64-wrapped, as a blob
    (when the bytes are the pinned file's, checked by hash)."""
    active = state.active_skill(skill)
    entry = active.file(path) if active is not None else None
    mime = mimetypes.guess_type(path)[0]
    if entry is None:
        return types.TextResourceContents(uri=uri, mime_type=mime or "text/plain", text=content)
    meta = {"sha256": entry.sha256}
    wrapped = _base64_wrapped(content)
    if (
        wrapped is not None
        and hashlib.sha256(base64.b64decode(wrapped)).hexdigest() == entry.sha256
    ):
        return types.BlobResourceContents(
            uri=uri, mime_type=mime or "application/octet-stream", blob=wrapped, _meta=meta
        )
    return types.TextResourceContents(
        uri=uri, mime_type=mime or "text/plain", text=content, _meta=meta
    )


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _base64_wrapped(content: str) -> str | None:
    if not content.startswith("{"):
        return None
    try:
        value = json.loads(content)
    except ValueError:
        return None
    if isinstance(value, dict) and value.get("encoding") == "base64":
        data = value.get("data")
        return data if isinstance(data, str) else None
    return None


def skill_uri(skill: str, path: str) -> str:
    return f"{SKILL_SCHEME}{quote(skill, safe='')}/{quote(path, safe='/')}"


def parse_skill_uri(uri: str) -> tuple[str, str] | None:
    """``(skill, path)`` of a ``skill://NAME/PATH`` URI, else None. The path is not
    checked here: it goes to ``skills.read``, whose one gate refuses what escapes."""
    if not uri.startswith(SKILL_SCHEME):
        return None
    skill, _, path = uri[len(SKILL_SCHEME) :].partition("/")
    return unquote(skill), unquote(path)
