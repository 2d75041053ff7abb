"""Parse and validate one ``SKILL.md``, and load one skill directory.

``parse_skill_md`` is pure (text in, properties out); ``load_skill`` is the I/O edge
that walks the directory, reads each file once, hashes it and parses ``SKILL.md``.
Whatever the bytes, both raise only :class:`SkillValidationError`, carrying every
problem found.
"""

from __future__ import annotations

import os

import msgspec

from ._errors import Problem, SkillValidationError
from ._frontmatter import Finding, load_frontmatter, quote_colon_values, split_frontmatter
from ._hash import SKILL_MD_NAMES, hash_files
from ._model import Skill, SkillProperties, Tier
from ._search import headings
from ._tree import TreeFile, walk_tree
from ._validate import validate_fields

MAX_SKILL_MD_BYTES = 1024 * 1024
"""Largest ``SKILL.md`` parsed (the spec recommends under 500 lines; real ones reach 74 KB)."""


class ParsedSkillMd(msgspec.Struct, frozen=True, kw_only=True):
    """A valid ``SKILL.md``: its properties, its body exactly as written, warnings."""

    properties: SkillProperties
    body: str
    warnings: tuple[Problem, ...] = ()

    def skill(
        self,
        *,
        hash: str,
        tier: Tier,
        source: str,
        root: str | None = None,
        location: str | None = None,
    ) -> Skill:
        """The :class:`Skill` this file makes, with the hash of the files around it."""
        p = self.properties
        return Skill(
            name=p.name,
            description=p.description,
            body=self.body,
            properties=p,
            hash=hash,
            tier=tier,
            source=source,
            root=root,
            location=location,
            warnings=self.warnings,
            headings=headings(self.body),
        )


def parse_skill_md(
    data: str | bytes, *, path: str, dir_name: str | None, strict: bool = True
) -> ParsedSkillMd:
    """Parse and validate a ``SKILL.md``'s text or bytes.

    ``path`` names the file in problems; ``dir_name`` is the skill directory's name the
    ``name`` field must equal (``None`` skips that rule). Strict mode (the default)
    applies every rule of the specification and the reference validator; lenient mode
    follows the client guide and returns the cosmetic findings as ``warnings``.
    Raises :class:`SkillValidationError` with all problems.
    """

    def problem(rule: str, field: str, message: str) -> SkillValidationError:
        return SkillValidationError([Problem(file=path, field=field, rule=rule, message=message)])

    size = len(data)
    if size > MAX_SKILL_MD_BYTES:
        raise problem(
            "skill-md-too-large",
            "file",
            f"is {size} bytes; the limit is {MAX_SKILL_MD_BYTES} - move details into references/",
        )
    if isinstance(data, bytes):
        if b"\0" in data:
            raise problem("skill-md-binary", "file", "contains NUL bytes: it is not a text file")
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError as e:
            raise problem(
                "skill-md-utf8",
                "file",
                f"is not valid UTF-8 (byte {e.start}); save it as UTF-8",
            ) from None
    else:
        text = data
    warnings: list[Problem] = []
    try:
        yaml_text, body = split_frontmatter(text)
        try:
            fields = load_frontmatter(yaml_text)
        except Finding as first:
            fixed, keys = quote_colon_values(yaml_text) if first.rule == "yaml-syntax" else ("", [])
            if strict or not keys:
                raise
            fields = load_frontmatter(fixed)
            warnings.append(
                Problem(
                    file=path,
                    field=", ".join(keys),
                    rule="yaml-lenient-fix",
                    message=f"{first.message}; loaded after quoting the value",
                )
            )
    except Finding as f:
        raise problem(f.rule, f.field, f.message) from None
    props, errors, more = validate_fields(fields, file=path, dir_name=dir_name, strict=strict)
    warnings += more
    if props is None:
        raise SkillValidationError(errors, warnings)
    return ParsedSkillMd(properties=props, body=body, warnings=tuple(warnings))


def load_skill(
    directory: str | os.PathLike[str], *, tier: Tier, source: str, strict: bool = True
) -> Skill:
    """Load, validate and hash the skill in ``directory``.

    Raises :class:`SkillValidationError` with every problem: of the tree (escaping
    symlinks, special files, unreadable files), of ``SKILL.md`` and of its fields.
    """
    root = os.path.abspath(directory)
    problem = dir_problem(root)
    if problem is not None:
        raise SkillValidationError([problem])
    files, problems = walk_tree(root)
    return skill_from_tree(root, files, problems, tier=tier, source=source, strict=strict)


def skill_from_tree(
    root: str,
    files: list[TreeFile],
    problems: list[Problem],
    *,
    tier: Tier,
    source: str,
    strict: bool = True,
) -> Skill:
    """Finish :func:`load_skill` from an already walked tree (the indexer walks first)."""
    manifest, kept, more = hash_files(root, files, keep=SKILL_MD_NAMES, keep_max=MAX_SKILL_MD_BYTES)
    problems = problems + more
    rel = next((n for n in SKILL_MD_NAMES if any(f.rel == n for f in files)), None)
    location = os.path.join(root, rel or "SKILL.md")
    parsed: ParsedSkillMd | None = None
    said = {p.file for p in problems}  # a SKILL.md the walk refused or could not read
    if rel is None:
        if not said & {os.path.join(root, n) for n in SKILL_MD_NAMES}:
            what = "is a directory, not a file" if os.path.isdir(location) else "is missing"
            problems.append(
                Problem(
                    file=location,
                    field="file",
                    rule="skill-md-missing",
                    message=f"{what}; a skill needs a SKILL.md with name and description",
                )
            )
    elif rel not in kept:
        if location not in said:
            size = next(f.size for f in files if f.rel == rel)
            problems.append(
                Problem(
                    file=location,
                    field="file",
                    rule="skill-md-too-large",
                    message=f"is {size} bytes; the limit is {MAX_SKILL_MD_BYTES} - "
                    "move details into references/",
                )
            )
    else:
        try:
            parsed = parse_skill_md(
                kept[rel], path=location, dir_name=os.path.basename(root), strict=strict
            )
        except SkillValidationError as e:
            raise SkillValidationError(problems + list(e.problems), e.warnings) from None
    if problems or parsed is None:
        raise SkillValidationError(problems)
    return parsed.skill(hash=manifest.hash, tier=tier, source=source, root=root, location=location)


def dir_problem(path: str) -> Problem | None:
    """Why ``path`` cannot be a skill directory (missing, dangling, a file), or ``None``."""
    if os.path.isdir(path):
        return None
    if not os.path.lexists(path):
        rule, what = "skill-dir-missing", "does not exist; give the path of the skill's folder"
    elif not os.path.exists(path):
        rule, what = "skill-dir-missing", "is a symlink to nothing; give the skill's folder"
    else:
        rule, what = "skill-dir", "is not a directory; give the skill's folder (or its SKILL.md)"
    return Problem(file=path, field="file", rule=rule, message=what)
