"""Split a ``SKILL.md`` into frontmatter and body, and read the frontmatter's YAML.

Pure functions over text. Lines end with LF, CRLF or a lone CR (classic Mac OS), as
in YAML itself. The YAML is read from libyaml's event stream (the C parser when
available) into plain ``str``/``list``/``dict`` values: every scalar stays the text the
author wrote (``version: 1.10`` is ``"1.10"``, not ``1.1``), as the reference
validator's strictyaml does, except YAML's null (an empty plain value, ``~``, ``null``,
``Null``, ``NULL``), which is ``None``: the author wrote "no value". Reading events
rather than constructing objects is also what makes hostile YAML harmless: aliases
(billion-laughs bombs, merge keys) and tags (``!!python/object``) are refused, nesting
is bounded, duplicate keys are reported. The nesting bound is also checked on the text
before the parser runs (``_nesting``), so the rule holds whatever libyaml's own limits are.
"""

from __future__ import annotations

import re
from collections.abc import Iterator

import yaml

from ._nesting import nesting_bound

try:  # libyaml's C parser is ~3x faster; the pure-Python one yields the same events.
    from yaml import CSafeLoader as _Loader
except ImportError:  # pragma: no cover - depends on how PyYAML was built
    from yaml import SafeLoader as _Loader  # type: ignore[assignment]

MAX_DEPTH = 16
"""Deepest nesting of YAML collections accepted in a frontmatter."""

_BREAK = re.compile(r"\r\n?|\n")
# A line of its own that is exactly ``---`` (trailing blanks allowed), with its line break.
_CLOSING = re.compile(r"(?<![^\r\n])---[ \t]*(?:\r\n?|\n|\Z)")
_NULLS = frozenset({"", "~", "null", "Null", "NULL"})
_PLAIN_TAGS = frozenset(
    {None, "!", "tag:yaml.org,2002:str", "tag:yaml.org,2002:map", "tag:yaml.org,2002:seq"}
)
# A top-level ``key: value`` line with a plain value; used only by the lenient fallback,
# which quotes such values when they hold ``: `` (invalid YAML that other clients'
# parsers accept, per the client guide).
_COLON_LINE = re.compile(r"^([A-Za-z0-9_-]+):[ \t]+([^'\"|>\[{&*!%@`#\s].*?)[ \t]*$")


class Finding(Exception):
    """Internal: one problem found in the text, before it is tied to a file."""

    def __init__(self, rule: str, field: str, message: str) -> None:
        super().__init__(message)
        self.rule = rule
        self.field = field
        self.message = message


def split_frontmatter(text: str) -> tuple[str, str]:
    """Return ``(yaml_text, body)``; the body is everything after the closing line.

    The frontmatter opens with a first line of exactly ``---`` and closes at the next
    line that is exactly ``---`` (trailing blanks allowed). Lines may end with LF, CRLF
    or a lone CR; ``yaml_text`` comes back with LF line ends, the body exactly as
    written. A ``---`` inside a value cannot close it: YAML forbids a document marker at
    column 0 inside a scalar, and ``a --- b`` on one line is not a line of its own. A
    UTF-8 BOM is ignored.
    """
    if text.startswith("\ufeff"):
        text = text[1:]
    newline = _BREAK.search(text)
    first = text[: newline.start()] if newline else text
    if first.rstrip(" \t") != "---":
        raise Finding(
            "frontmatter-missing",
            "frontmatter",
            "the file must start with a line '---' opening the YAML frontmatter "
            "(name, description), closed by another '---' line",
        )
    start = newline.end() if newline else len(text)
    match = _CLOSING.search(text, start) if newline else None
    if match is None:
        raise Finding(
            "frontmatter-unclosed",
            "frontmatter",
            "the YAML frontmatter is never closed: add a line '---' after the last field",
        )
    return _BREAK.sub("\n", text[start : match.start()]), text[match.end() :]


def load_frontmatter(yaml_text: str, *, first_line: int = 2) -> dict[str, object]:
    """Read the frontmatter YAML into a dict of ``str``/``list``/``dict`` values.

    ``first_line`` is the file line the YAML starts on, so syntax errors point at the
    right line of ``SKILL.md``. Raises :class:`Finding` for invalid or refused YAML.
    """
    if nesting_bound(yaml_text, MAX_DEPTH) > MAX_DEPTH:
        raise _too_deep()
    loader = _Loader(yaml_text)
    events = _events(loader)
    try:
        next(events)  # StreamStartEvent
        ev = next(events)
        if isinstance(ev, yaml.StreamEndEvent):
            return {}
        root = _node(events, next(events), 1)
        next(events)  # DocumentEndEvent
        if not isinstance(next(events), yaml.StreamEndEvent):
            raise Finding(
                "yaml-multiple-documents",
                "frontmatter",
                "the frontmatter holds more than one YAML document; keep one mapping",
            )
    except yaml.MarkedYAMLError as e:
        mark = e.problem_mark or e.context_mark
        where = f"line {first_line + mark.line}, column {mark.column + 1}: " if mark else ""
        raise Finding(
            "yaml-syntax",
            "frontmatter",
            f"invalid YAML at {where}{e.problem or e.context}; if a value contains ': ' "
            "or starts with a special character, put it in quotes",
        ) from None
    except yaml.YAMLError as e:
        raise Finding("yaml-syntax", "frontmatter", f"invalid YAML: {e}") from None
    finally:
        loader.dispose()
    if not isinstance(root, dict):
        raise Finding(
            "frontmatter-not-mapping",
            "frontmatter",
            "the frontmatter must be a YAML mapping of fields (name: ..., description: ...)",
        )
    return root


def quote_colon_values(yaml_text: str) -> tuple[str, list[str]]:
    """Quote top-level plain values that contain ``': '``; return the text and the keys.

    The client guide's fallback for frontmatter written for lax parsers, e.g.
    ``description: Use when: the user asks`` becomes ``description: 'Use when: ...'``.
    A value continued on more indented lines is quoted whole, from its first line to
    its last; a single-quoted scalar folds its lines exactly as the plain one would.
    """
    fixed: list[str] = []
    lines = yaml_text.split("\n")
    i = 0
    while i < len(lines):
        m = _COLON_LINE.match(lines[i])
        if m is None:
            i += 1
            continue
        last = i  # the value's last line; continuations are indented, blank lines may sit between
        j = i + 1
        while j < len(lines) and (not lines[j].strip(" \t") or lines[j][0] in " \t"):
            if lines[j].lstrip(" \t").startswith("#"):
                break  # a comment ends a plain scalar
            if lines[j].strip(" \t"):  # YAML's blanks; U+00A0 is text
                last = j
            j += 1
        value = [m.group(2)] + [line.rstrip(" \t") for line in lines[i + 1 : last + 1]]
        if any(": " in v or v.endswith(":") for v in value):
            quoted = [v.replace("'", "''") for v in value]
            quoted[0] = f"{m.group(1)}: '{quoted[0]}"
            quoted[-1] += "'"
            lines[i : last + 1] = quoted
            fixed.append(m.group(1))
        i = last + 1
    return "\n".join(lines), fixed


def _events(loader: _Loader) -> Iterator[yaml.Event]:
    while loader.check_event():
        ev = loader.get_event()
        if ev is not None:
            yield ev


def _node(events: Iterator[yaml.Event], ev: yaml.Event, depth: int, key: bool = False) -> object:
    if isinstance(ev, yaml.AliasEvent):
        raise Finding(
            "yaml-alias",
            "frontmatter",
            f"YAML aliases (*{ev.anchor}) are not allowed in a frontmatter; write the value out",
        )
    if isinstance(ev, yaml.NodeEvent) and getattr(ev, "tag", None) not in _PLAIN_TAGS:
        raise Finding(
            "yaml-tag",
            "frontmatter",
            f"YAML tags ({getattr(ev, 'tag', '')}) are not allowed; remove the tag",
        )
    if isinstance(ev, yaml.ScalarEvent):
        if not key and ev.tag is None and not ev.style and ev.value in _NULLS:
            return None
        try:
            ev.value.encode()
        except UnicodeEncodeError:
            raise Finding(
                "yaml-surrogate",
                "frontmatter",
                "a value holds an escaped lone surrogate (like \\ud800); it is not valid text",
            ) from None
        return ev.value
    if depth > MAX_DEPTH:
        raise _too_deep()
    if isinstance(ev, yaml.SequenceStartEvent):
        items: list[object] = []
        while not isinstance(ev := next(events), yaml.SequenceEndEvent):
            items.append(_node(events, ev, depth + 1))
        return items
    mapping: dict[str, object] = {}
    while not isinstance(ev := next(events), yaml.MappingEndEvent):
        name = _node(events, ev, depth + 1, key=True)
        if not isinstance(name, str):
            raise Finding(
                "yaml-complex-key",
                "frontmatter",
                "a mapping key is a list or mapping; keys must be plain text",
            )
        if name in mapping:
            raise Finding(
                "yaml-duplicate-key",
                name,
                f"the key '{name}' appears twice in the same mapping; keep one",
            )
        mapping[name] = _node(events, next(events), depth + 1)
    return mapping


def _too_deep() -> Finding:
    return Finding(
        "yaml-depth",
        "frontmatter",
        f"the frontmatter nests deeper than {MAX_DEPTH} levels; flatten it",
    )
