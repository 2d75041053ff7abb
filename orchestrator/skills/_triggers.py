"""Trigger-based activation (seed 003 PL2): a skill activates itself when the user's
message or a file the agent reads matches what it declares.

Declared in ``metadata`` (strings, as the specification wants), so they come with the
catalog entry and are recorded in ``catalog.snapshot``: replay sees what fired::

    metadata:
      trigger-keywords: "csv spreadsheet pivot-table"   # whole words, any case
      trigger-pattern: "\\bgreet\\s+\\w+"                # one regular expression
      trigger-files: "*.csv *.tsv data/*.parquet"      # globs on paths read

Matching is a pure function of the text (no clock, no randomness), so a re-driven
session fires the same triggers. A pattern is at most 200 characters, may not repeat a
group that itself repeats (the shape of catastrophic backtracking), and is tried on the
first 20,000 characters of a message.
"""

from __future__ import annotations

import fnmatch
import re

import msgspec

from ._errors import SkillError

MAX_PATTERN = 200
MAX_TEXT = 20_000
_NESTED = re.compile(r"\((?:[^()\\]|\\.)*[*+}](?:[^()\\]|\\.)*\)\s*[*+{]")


class TriggerError(SkillError):
    """A trigger declaration that cannot be used: says which key and why."""


class Triggers(msgspec.Struct, frozen=True, kw_only=True):
    """What activates a skill: ``keywords`` (lowercase whole words of the user's
    message), ``pattern`` (a regular expression searched in it), ``files`` (globs
    matched against the paths the agent reads)."""

    keywords: tuple[str, ...] = ()
    pattern: str | None = None
    files: tuple[str, ...] = ()


def parse_triggers(metadata: dict[str, str]) -> Triggers | None:
    """The triggers ``metadata`` declares, None when it declares none."""
    keywords = tuple(dict.fromkeys(w.lower() for w in metadata.get("trigger-keywords", "").split()))
    files = tuple(dict.fromkeys(metadata.get("trigger-files", "").split()))
    pattern = metadata.get("trigger-pattern") or None
    if pattern is not None:
        if len(pattern) > MAX_PATTERN:
            raise TriggerError(
                f"metadata.trigger-pattern is {len(pattern)} characters; at most {MAX_PATTERN}"
            )
        if _NESTED.search(pattern):
            raise TriggerError(
                "metadata.trigger-pattern repeats a group that repeats (catastrophic "
                "backtracking); use trigger-keywords or a simpler pattern"
            )
        try:
            re.compile(pattern)
        except re.error as e:
            raise TriggerError(
                f"metadata.trigger-pattern is not a regular expression: {e}"
            ) from None
    if not (keywords or files or pattern):
        return None
    return Triggers(keywords=keywords, pattern=pattern, files=files)


_WORD = re.compile(r"[\w-]+")


def message_trigger(triggers: Triggers, text: str) -> str | None:
    """The trigger ``text`` (a user's message) fires, as recorded (``keyword:csv``,
    ``pattern:...``), or None."""
    text = text[:MAX_TEXT]
    if triggers.keywords:
        words = {w.lower() for w in _WORD.findall(text)}
        for keyword in triggers.keywords:
            if keyword in words:
                return f"keyword:{keyword}"
    if triggers.pattern is not None and re.search(triggers.pattern, text):
        return f"pattern:{triggers.pattern}"
    return None


def file_trigger(triggers: Triggers, path: str) -> str | None:
    """The trigger reading ``path`` fires (``file:*.csv``), or None. A glob without
    ``/`` matches the file name, one with ``/`` the end of the path."""
    name = path.rsplit("/", 1)[-1]
    for glob in triggers.files:
        target = name if "/" not in glob else path
        if fnmatch.fnmatchcase(target, glob) or (
            "/" in glob and fnmatch.fnmatchcase(path, f"*/{glob}")
        ):
            return f"file:{glob}"
    return None
