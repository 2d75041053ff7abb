"""The load receipt the model reads after ``skills.load`` (seed 002), built from the
session's view alone (pure): what is active, each skill's digest, version, signature,
properties (license, compatibility, metadata, allowed-tools), the tools it unlocks,
and, for the skills this call loaded, a listing of their files.

The listing shows what ``skills.read`` and ``skills.run_script`` can reach: hidden
files (a path segment starting with ``.``) are left out, and so are files nested more
than one level deep unless the policy's ``nested_paths`` allows reading them; what is
left out is counted, never silently dropped.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence

from ._events import SkillInfo
from ._policy import allowlist, offered
from ._state import ActiveSkill
from .skills import ManifestEntry

MAX_LISTED_FILES = 200
SKILL_FILES = frozenset({"SKILL.md", "skill.md"})
_KINDS = {"scripts": "script", "references": "reference", "assets": "asset"}


def file_kind(path: str) -> str:
    """``instructions`` (the root SKILL.md), ``script``, ``reference``, ``asset`` (by
    the first folder, as the specification lays skills out), else ``file``."""
    if path in SKILL_FILES:
        return "instructions"
    top, _, rest = path.partition("/")
    return _KINDS.get(top, "file") if rest else "file"


def file_listing(
    files: Sequence[ManifestEntry],
    sizes: Mapping[str, int],
    *,
    nested: bool,
    limit: int = MAX_LISTED_FILES,
) -> dict[str, object]:
    """``{"files": [{path, size, kind}...], "files_omitted": {...}}`` for a snapshot;
    ``sizes`` maps each file's sha256 to its size in bytes."""
    listed: list[dict[str, object]] = []
    omitted = {"hidden": 0, "nested": 0, "over_limit": 0}
    for f in files:
        if any(part.startswith(".") for part in f.path.split("/")):
            omitted["hidden"] += 1
        elif f.path.count("/") > 1 and not nested:
            omitted["nested"] += 1
        elif len(listed) >= limit:
            omitted["over_limit"] += 1
        else:
            listed.append({"path": f.path, "size": sizes[f.sha256], "kind": file_kind(f.path)})
    out: dict[str, object] = {"files": listed}
    left_out = {k: v for k, v in omitted.items() if v}
    if left_out:
        out["files_omitted"] = left_out
    return out


def receipt(
    active: Sequence[ActiveSkill],
    catalog: Mapping[str, SkillInfo],
    *,
    file_access: bool,
    nested: bool,
    list_files: Collection[str] = (),
    sizes: Mapping[str, int] | None = None,
    mcp_tools: Collection[str] = (),
) -> dict[str, object]:
    """The receipt: ``{"active_skills": [...]}`` in load order. ``list_files`` names
    the skills whose file listing is included (``sizes`` must cover their files).
    ``unlocks``: the skill's own host tools, and the MCP tools on offer
    (``mcp_tools``) its ``allowed-tools`` name."""
    items = []
    for skill in active:
        info = catalog.get(skill.name)
        props = skill.properties
        properties: dict[str, object] = {
            "name": skill.name,
            "description": props.description if props else info.description if info else "",
        }
        if props is not None:
            for key, value in (
                ("license", props.license),
                ("compatibility", props.compatibility),
                ("metadata", props.metadata or None),
            ):
                if value is not None:
                    properties[key] = value
        if skill.allowed_tools is not None:
            properties["allowed-tools"] = skill.allowed_tools
        item: dict[str, object] = {
            "name": skill.name,
            "digest": f"sha256:{skill.hash}",
            "tier": skill.tier,
            "properties": properties,
        }
        if skill.version is not None:
            item["version"] = skill.version
        if skill.signed_by is not None:
            item["signed_by"] = f"ed25519:{skill.signed_by}"
        unlocks = [{"name": t.name, "kind": "host"} for t in skill.tools]
        if skill.allowed_tools is not None and mcp_tools:  # (no list: it names no tools)
            rules = allowlist((skill,))
            unlocks += [{"name": n, "kind": "mcp"} for n in sorted(mcp_tools) if offered(rules, n)]
        if unlocks:
            item["unlocks"] = unlocks
        if file_access and info is not None and info.location:
            item["location"] = info.location
            item["root_dir"] = info.location.rsplit("/", 1)[0]
        if skill.name in list_files and sizes is not None:
            item.update(file_listing(skill.files, sizes, nested=nested))
        items.append(item)
    return {"active_skills": items}
