"""Skills defined in code: validated by the same rules, hashed as the file they render to.

An inline skill renders to a one-file directory (``<name>/SKILL.md``); its skill hash
is that directory's hash, so one hash definition serves inline and on-disk skills and
materializing an inline skill reproduces the hash the log recorded.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping
from dataclasses import dataclass, field

from ._errors import Problem, SkillValidationError
from ._hash import make_manifest
from ._model import ManifestEntry, Skill, SkillManifest, Tier
from ._parse import parse_skill_md

# What PyYAML's reader accepts unescaped inside a double-quoted scalar, minus '"' and '\'.
_UNSAFE = re.compile(r"[^\x20\x21\x23-\x5b\x5d-\x7e\xa0-\ud7ff\ue000-\ufffd\U00010000-\U0010ffff]")
_ESCAPES = {'"': '\\"', "\\": "\\\\", "\n": "\\n", "\t": "\\t", "\r": "\\r"}


def yaml_quote(text: str) -> str:
    """``text`` as a YAML double-quoted scalar that any YAML parser reads back exactly."""

    def escape(m: re.Match[str]) -> str:
        c = m.group()
        if c in _ESCAPES:
            return _ESCAPES[c]
        code = ord(c)
        return (
            f"\\x{code:02x}"
            if code < 0x100
            else f"\\u{code:04x}"
            if code < 0x10000
            else f"\\U{code:08x}"
        )

    return '"' + _UNSAFE.sub(escape, text) + '"'


@dataclass(frozen=True, eq=False)
class InlineSkill:
    """A skill defined in code (seed 004), optionally carrying its own tools.

    ``tools`` are opaque objects the runtime defines; they exist only while the skill
    is loaded and never enter the hash or the log. Construction validates the skill
    by the strict rules (its directory name is its name) and raises
    :class:`SkillValidationError` naming ``inline:<name>``.
    """

    name: str
    description: str
    body: str
    tools: tuple[object, ...] = ()
    license: str | None = None
    compatibility: str | None = None
    metadata: Mapping[str, str] = field(default_factory=dict)
    allowed_tools: str | None = None
    tier: Tier = Tier.BUILTIN

    def __post_init__(self) -> None:
        object.__setattr__(self, "tools", tuple(self.tools))
        object.__setattr__(self, "_skill", self._build())

    def skill_md(self) -> bytes:
        """The ``SKILL.md`` this skill materializes to (deterministic bytes)."""
        lines = [
            "---",
            f"name: {yaml_quote(self.name)}",
            f"description: {yaml_quote(self.description)}",
        ]
        for key, value in (
            ("license", self.license),
            ("compatibility", self.compatibility),
            ("allowed-tools", self.allowed_tools),
        ):
            if value is not None:
                lines.append(f"{key}: {yaml_quote(value)}")
        if self.metadata:
            lines.append("metadata:")
            lines += [
                f"  {yaml_quote(k)}: {yaml_quote(v)}" for k, v in sorted(self.metadata.items())
            ]
        lines += ["---", ""]
        try:
            return ("\n".join(lines) + self.body).encode()
        except UnicodeEncodeError:
            raise SkillValidationError(
                [
                    _problem(
                        f"inline:{self.name}", "file", "holds a lone surrogate; it cannot be UTF-8"
                    )
                ]
            ) from None

    def manifest(self) -> SkillManifest:
        """The one-entry manifest of the rendered directory."""
        digest = hashlib.sha256(self.skill_md()).hexdigest()
        return make_manifest([ManifestEntry(path="SKILL.md", executable=False, sha256=digest)])

    def to_skill(self) -> Skill:
        """The :class:`Skill` (``source="inline"``, no root, no location)."""
        skill: Skill = self.__dict__["_skill"]
        return skill

    def _build(self) -> Skill:
        origin = f"inline:{self.name}"
        for label, value in (
            ("name", self.name),
            ("description", self.description),
            ("body", self.body),
        ):
            if not isinstance(value, str):
                raise SkillValidationError([_problem(origin, label, f"the {label} must be text")])
        parsed = parse_skill_md(self.skill_md(), path=origin, dir_name=self.name, strict=True)
        # Strict parsing leaves no warnings, so the Skill is as it always was.
        return parsed.skill(hash=self.manifest().hash, tier=self.tier, source="inline")


def _problem(origin: str, field_: str, message: str) -> Problem:
    return Problem(file=origin, field=field_, rule="inline-type", message=message)
