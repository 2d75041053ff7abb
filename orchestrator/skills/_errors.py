"""The errors of the skills domain, and ``Problem``: one finding about one skill file.

Every error subclasses :class:`eventlog.SkillogError` so the CLI turns it into a clean
one-line message; each says what happened, where (file:field) and what to do.
"""

from __future__ import annotations

from collections.abc import Sequence

import msgspec

from eventlog import SkillogError


class Problem(msgspec.Struct, frozen=True, kw_only=True):
    """One finding about a skill: ``file: field: message (rule)``.

    ``file`` is the path as the caller named it (absolute for discovered skills),
    ``field`` the frontmatter field (``name``, ``metadata.version``) or a file-level
    aspect (``file``, ``frontmatter``, ``yaml``), ``rule`` a stable identifier listed in
    ``docs/skills.md``, and ``message`` says what is wrong and how to fix it.
    """

    file: str
    field: str
    rule: str
    message: str

    def __str__(self) -> str:
        return f"{self.file}: {self.field}: {self.message} ({self.rule})"


class SkillError(SkillogError):
    """Base of the errors raised by ``orchestrator.skills``."""


class SkillValidationError(SkillError):
    """A skill is invalid; ``problems`` lists every problem found, all at once.

    ``warnings`` holds the findings that alone would not have rejected the skill.
    Exit code 1: a check ran and failed.
    """

    exit_code = 1

    def __init__(self, problems: Sequence[Problem], warnings: Sequence[Problem] = ()) -> None:
        self.problems = tuple(problems)
        self.warnings = tuple(warnings)
        lines = [str(p) for p in self.problems]
        head = f"{len(lines)} problem{'s' if len(lines) != 1 else ''}"
        super().__init__(f"invalid skill ({head}):\n  " + "\n  ".join(lines))


class SkillTreeError(SkillError):
    """A skill directory cannot be hashed or copied as a whole.

    Raised for a symlink leading out of the skill root, a special file (FIFO, socket,
    device), a tree over the size or file-count limits, or an unreadable entry.
    """


class ManifestError(SkillError):
    """A manifest entry (path, sha256) is malformed, e.g. read back from a damaged log."""


class DuplicateSkillError(SkillError):
    """Two skills that must coexist (inline and referenced) have the same name."""


class SkillNotFoundError(SkillError):
    """No skill of that name is in the catalog (or it is not visible)."""


class SkillChangedError(SkillError):
    """A skill's files changed on disk after the catalog was built; rebuild it."""


class ConfigError(SkillError):
    """The skills configuration file is unreadable or malformed."""


class SkillIndexError(SkillError):
    """The persistent skills index in the SQLite database cannot be used."""


class InstallError(SkillError):
    """Installing, updating or removing a skill failed; nothing was left half-done."""
