"""The validation rules of the Agent Skills specification, as pure functions.

Mirrors the reference validator (skills-ref): NFKC-normalized names of at most 64
lowercase letters, digits and hyphens (Unicode lowercase letters accepted), no leading,
trailing or doubled hyphen, equal to the directory name; a description of 1-1024
characters; a compatibility of 1-500; metadata a mapping of strings to strings;
allowed-tools and license strings; no other fields. Every problem is collected, not
just the first.

Lenient mode follows the client guide: what it calls cosmetic (name/directory
mismatch, over-long name, and the other name-format rules, unknown fields, over-long
texts, a list for allowed-tools) becomes a warning and the skill loads; a missing
description or unreadable YAML still rejects it. Names that could not be used safely
as a directory name (path separators, control characters) are rejected in both modes.
"""

from __future__ import annotations

import re
import unicodedata

from ._errors import Problem
from ._model import SkillProperties
from ._triggers import TriggerError, parse_triggers

MAX_NAME = 64
MAX_DESCRIPTION = 1024
MAX_COMPATIBILITY = 500
ALLOWED_FIELDS = ("name", "description", "license", "compatibility", "metadata", "allowed-tools")
_OPTIONAL = frozenset(ALLOWED_FIELDS) - {"name", "description"}

# Rules that lenient mode turns into warnings (the client guide: "warn, load anyway").
LENIENT_RULES = frozenset(
    {
        "unknown-field",
        "name-max-length",
        "name-lowercase",
        "name-hyphen-edge",
        "name-consecutive-hyphens",
        "name-characters",
        "name-matches-dir",
        "description-max-length",
        "compatibility-empty",
        "compatibility-max-length",
        "compatibility-type",
        "license-type",
        "metadata-type",
        "metadata-value-type",
        "allowed-tools-type",
        "yaml-lenient-fix",
    }
)


# Rules that only ever warn, in both modes (seed 004 K6).
WARNING_RULES = frozenset({"description-xml-tags", "metadata-trigger"})
_XML_TAG = re.compile(r"</?[A-Za-z][\w:.-]*(?:\s[^<>]*)?/?>")


def normalize_name(name: str) -> str:
    """The canonical form of a skill's ``name`` field: stripped, NFKC-normalized."""
    return unicodedata.normalize("NFKC", name.strip())


def is_safe_dir_name(name: str) -> bool:
    """Whether ``name`` can be used as one directory name on any platform."""
    return (
        bool(name)
        and name not in (".", "..")
        and not any(c in '/\\:*?"<>|' or unicodedata.category(c)[0] == "C" for c in name)
    )


def name_problems(raw: object, dir_name: str | None) -> list[tuple[str, str]]:
    """``(rule, message)`` for every way ``raw`` breaks the name rules.

    The directory name is NFKC-normalized but never stripped, as in skills-ref: a
    directory ``my-skill `` (trailing space) is not the skill ``my-skill``.
    """
    if raw is None:
        return [("name-empty", "the name is empty; give the skill a name like 'pdf-tools'")]
    if not isinstance(raw, str):
        return [("name-type", "the name must be text, not a list or mapping")]
    if not raw.strip():
        return [("name-empty", "the name is empty; give the skill a name like 'pdf-tools'")]
    name = normalize_name(raw)
    out: list[tuple[str, str]] = []
    if len(name) > MAX_NAME:
        out.append(
            (
                "name-max-length",
                f"the name is {len(name)} characters long; the limit is {MAX_NAME}",
            )
        )
    if name != name.lower():
        out.append(("name-lowercase", f"the name '{name}' must be lowercase: '{name.lower()}'"))
    if name.startswith("-") or name.endswith("-"):
        out.append(("name-hyphen-edge", f"the name '{name}' must not start or end with '-'"))
    if "--" in name:
        out.append(("name-consecutive-hyphens", f"the name '{name}' must not contain '--'"))
    bad = sorted({c for c in name if not (c.isalnum() or c == "-")})
    if bad:
        shown = " ".join(repr(c) for c in bad[:8])
        out.append(
            (
                "name-unsafe" if not is_safe_dir_name(name) else "name-characters",
                f"the name '{name}' contains {shown}; only letters, digits and '-' are allowed",
            )
        )
    if dir_name is not None and unicodedata.normalize("NFKC", dir_name) != name:
        out.append(
            (
                "name-matches-dir",
                f"the name '{name}' differs from its directory {dir_name!r}; "
                "rename one so they match",
            )
        )
    return out


def _text_problems(field: str, raw: object, limit: int, *, required: bool) -> list[tuple[str, str]]:
    if raw is None:
        return [(f"{field}-empty", f"the {field} is empty; it is required")]
    if not isinstance(raw, str):
        return [(f"{field}-type", f"the {field} must be text, not a list or mapping")]
    text = raw.strip()
    if not text:
        verb = "is required" if required else "must not be empty when given"
        return [(f"{field}-empty", f"the {field} is empty; it {verb}")]
    if len(text) > limit:
        return [
            (
                f"{field}-max-length",
                f"the {field} is {len(text)} characters long; the limit is {limit} - shorten it",
            )
        ]
    return []


def validate_fields(
    data: dict[str, object], *, file: str, dir_name: str | None, strict: bool
) -> tuple[SkillProperties | None, list[Problem], list[Problem]]:
    """Check a parsed frontmatter; return ``(properties, errors, warnings)``.

    ``properties`` is ``None`` exactly when ``errors`` is non-empty. In lenient mode a
    field that fails a warned rule is dropped (or coerced, for an allowed-tools list).
    A YAML null (``None``: ``license:``, ``license: null``, ``~``) means "no value": an
    optional field or metadata entry given so is absent, in both modes; a required
    field given so is empty.
    """
    data = {k: v for k, v in data.items() if v is not None or k not in _OPTIONAL}
    found: list[tuple[str, str, str]] = []  # (field, rule, message)
    for key in data:
        if key not in ALLOWED_FIELDS:
            found.append(
                (
                    key,
                    "unknown-field",
                    f"'{key}' is not a frontmatter field; allowed: {', '.join(ALLOWED_FIELDS)} "
                    "(put custom keys under metadata)",
                )
            )
    for field, present_rule in (("name", "name-required"), ("description", "description-required")):
        if field not in data:
            found.append((field, present_rule, f"the required field '{field}' is missing"))
    if "name" in data:
        found += [("name", r, m) for r, m in name_problems(data["name"], dir_name)]
    if "description" in data:
        found += [
            ("description", r, m)
            for r, m in _text_problems(
                "description", data["description"], MAX_DESCRIPTION, required=True
            )
        ]
    description = data.get("description")
    if isinstance(description, str) and (tag := _XML_TAG.search(description)):
        found.append(
            (
                "description",
                "description-xml-tags",
                f"the description holds {tag.group(0)[:40]!r}, which reads as an XML tag; "
                "the catalog escapes it, but write it without angle brackets",
            )
        )
    if "compatibility" in data:
        found += [
            ("compatibility", r, m)
            for r, m in _text_problems(
                "compatibility", data["compatibility"], MAX_COMPATIBILITY, required=False
            )
        ]
    license_ = data.get("license")
    if license_ is not None and not isinstance(license_, str):
        found.append(("license", "license-type", "the license must be text (a name or a file)"))
    metadata, meta_found = _metadata(data.get("metadata", {}))
    found += meta_found
    try:
        parse_triggers(metadata)
    except TriggerError as e:
        found.append(("metadata", "metadata-trigger", f"{e}; the skill's triggers never fire"))
    tools = data.get("allowed-tools")
    if tools is not None and not isinstance(tools, str):
        hint = (
            f"write it as one space-separated string: 'allowed-tools: {' '.join(tools)}'"
            if isinstance(tools, list) and all(isinstance(t, str) for t in tools)
            else "write it as one space-separated string of tool patterns"
        )
        found.append(("allowed-tools", "allowed-tools-type", f"allowed-tools must be text; {hint}"))

    errors: list[Problem] = []
    warnings: list[Problem] = []
    for field, rule, message in found:
        p = Problem(file=file, field=field, rule=rule, message=message)
        warn = rule in WARNING_RULES or (not strict and rule in LENIENT_RULES)
        (warnings if warn else errors).append(p)
    if errors:
        return None, errors, warnings
    rules = {rule for _, rule, _ in found}
    assert isinstance(data["name"], str) and isinstance(data["description"], str)
    compat = data.get("compatibility")
    return (
        SkillProperties(
            name=normalize_name(data["name"]),
            description=data["description"].strip(),
            license=license_ if isinstance(license_, str) else None,
            compatibility=(
                compat.strip()
                if isinstance(compat, str) and "compatibility-empty" not in rules
                else None
            ),
            metadata=metadata,
            allowed_tools=(
                tools
                if isinstance(tools, str)
                else " ".join(t for t in tools if isinstance(t, str))
                if isinstance(tools, list)
                else None
            ),
        ),
        errors,
        warnings,
    )


def _metadata(raw: object) -> tuple[dict[str, str], list[tuple[str, str, str]]]:
    if not isinstance(raw, dict):
        return {}, [
            (
                "metadata",
                "metadata-type",
                "metadata must be a mapping of keys to text values (metadata:\\n  key: value)",
            )
        ]
    good: dict[str, str] = {}
    found: list[tuple[str, str, str]] = []
    for key, value in raw.items():
        if value is None:
            continue
        if isinstance(value, str):
            good[key] = value
        else:
            found.append(
                (
                    f"metadata.{key}",
                    "metadata-value-type",
                    "metadata values must be text, not a list or mapping; "
                    "join the items into one string",
                )
            )
    return good, found
