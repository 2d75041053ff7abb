"""Skills defined in code: validated by the same rules, hashed as the file they render to.

An inline skill renders to a one-file directory (``<name>/SKILL.md``); its skill hash
is that directory's hash, so one hash definition serves inline and on-disk skills and
materializing an inline skill reproduces the hash the log recorded.
"""

from __future__ import annotations

import dataclasses
import hashlib
import re
import string
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

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

    With ``template=True`` the body is a ``string.Template`` (``$name``, ``${name}``,
    ``$$`` for a dollar sign) filled from ``params`` (defaults) and the values the
    embedding program passes at load (:meth:`bind`; ``Agent.params`` does it). The
    rendered body is what is hashed, recorded and shown; a skill with a placeholder
    left unfilled cannot be used (:meth:`to_skill` names the placeholders).

    ``enabled`` is an optional predicate over the session's recorded state (the
    runtime's ``SkillContext``): the skill is in the catalog only while it holds.
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
    template: bool = False
    params: Mapping[str, str] = field(default_factory=dict)
    enabled: Callable[[Any], bool] | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "tools", tuple(self.tools))
        object.__setattr__(self, "params", dict(self.params))
        object.__setattr__(self, "_skill", None if self.unbound() else self._build())

    def placeholders(self) -> tuple[str, ...]:
        """The template's placeholder names, in order of first use (none without a
        template); a malformed template is a :class:`SkillValidationError`."""
        if not self.template:
            return ()
        if not isinstance(self.body, str):
            raise SkillValidationError(
                [_problem(f"inline:{self.name}", "body", "the body must be text")]
            )
        t = string.Template(self.body)
        if not t.is_valid():
            raise SkillValidationError(
                [
                    _problem(
                        f"inline:{self.name}",
                        "body",
                        "the template has a '$' that starts no placeholder; write $$ for a "
                        "dollar sign, $name or ${name} for a value",
                    )
                ]
            )
        return tuple(t.get_identifiers())

    def unbound(self) -> tuple[str, ...]:
        """The placeholders no value fills yet."""
        return tuple(p for p in self.placeholders() if p not in self.params)

    def bind(self, values: Mapping[str, str]) -> InlineSkill:
        """This skill with ``values`` filling its placeholders (over ``params``)."""
        if not self.template:
            return self
        for key, value in values.items():
            if not isinstance(value, str):
                raise SkillValidationError(
                    [_problem(f"inline:{self.name}", f"params.{key}", "a value must be text")]
                )
        return dataclasses.replace(self, params={**self.params, **values})

    @property
    def rendered_body(self) -> str:
        """The body as the model reads it: the template filled, or the body as is."""
        if not self.template:
            return self.body
        return string.Template(self.body).substitute(self.params)

    def skill_md(self) -> bytes:
        """The ``SKILL.md`` this skill materializes to (deterministic bytes)."""
        if self.unbound():
            self.to_skill()  # raises, naming the placeholders
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
            return ("\n".join(lines) + self.rendered_body).encode()
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
        skill: Skill | None = self.__dict__["_skill"]
        if skill is None:
            missing = ", ".join(f"${p}" for p in self.unbound())
            raise SkillValidationError(
                [
                    _problem(
                        f"inline:{self.name}",
                        "body",
                        f"the template's placeholders {missing} have no value; pass them "
                        "with bind() or Agent(params=...)",
                    )
                ]
            )
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
