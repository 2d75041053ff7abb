"""The value types of the skills domain: tiers, properties, skills, manifests.

All are frozen ``msgspec.Struct``s without floats so the runtime can embed them in
hashed log events and get the same bytes on every machine.
"""

from __future__ import annotations

import enum

import msgspec

from ._errors import Problem


class Tier(enum.StrEnum):
    """Trust tier of a skill source; policy (scripts, network, approvals) keys on it."""

    BUILTIN = "builtin"
    ORG = "org"
    USER = "user"
    THIRD_PARTY = "third-party"


class SkillProperties(msgspec.Struct, frozen=True, kw_only=True):
    """The frontmatter of a valid ``SKILL.md``, normalized.

    ``name`` is NFKC-normalized and stripped, ``description`` stripped; the other fields
    are exactly as written. ``allowed_tools`` is the raw space-separated string.
    """

    name: str
    description: str
    license: str | None = None
    compatibility: str | None = None
    metadata: dict[str, str] = msgspec.field(default_factory=dict)
    allowed_tools: str | None = None


class Skill(msgspec.Struct, frozen=True, kw_only=True):
    """A validated skill: its properties, its ``SKILL.md`` body and its skill hash.

    ``body`` is the markdown after the closing ``---`` line, exactly as on disk.
    ``hash`` is the lowercase hex skill hash (``docs/skill-hash.md``). ``source`` is a
    stable label without absolute paths (``project:.claude/skills``,
    ``user:~/.agents/skills``, ``builtin``, ``inline``); ``root`` and ``location`` are the
    absolute skill directory and ``SKILL.md`` path, or ``None`` for inline skills.
    ``warnings`` holds what lenient loading let pass. A skill made from the persistent
    index (:meth:`Catalog.indexed`) has an empty ``body``: loading it reads the body.
    """

    name: str
    description: str
    body: str
    properties: SkillProperties
    hash: str
    tier: Tier
    source: str
    root: str | None = None
    location: str | None = None
    warnings: tuple[Problem, ...] = ()
    headings: tuple[str, ...] = ()  # the body's markdown headings, for search


class ManifestEntry(msgspec.Struct, frozen=True, kw_only=True):
    """One file of a skill: relative POSIX path, executable bit, sha256 of its bytes."""

    path: str
    executable: bool
    sha256: str


class SkillManifest(msgspec.Struct, frozen=True, kw_only=True):
    """Every file of a skill, sorted by path bytes, and the skill hash over them.

    With the blobs the entries name, a manifest is the whole skill: replay rebuilds
    the ``SKILL.md`` body and every resource from it without a filesystem.
    """

    entries: tuple[ManifestEntry, ...]
    hash: str
