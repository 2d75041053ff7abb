"""Text that reaches a terminal: control characters made visible, one function for all.

Everything skillog prints may carry bytes a model, a skill, a script, an MCP server or a
person typed: ``\\x1b[2K\\x1b[1A`` erases the line above, ``\\r`` overwrites the start of
a line, OSC sequences set the window title or write the clipboard, U+202E reverses what
follows. :func:`visible` shows each such character as an escape (``\\x1b``, ``\\u202e``)
instead, so what a person reads is what the log holds; the exact bytes stay one
``--json`` away, where :func:`inert_json` keeps the JSON equal to what was recorded and
still free of raw controls. Pure and fast: a string with nothing to escape is returned
as it is after one regular-expression scan.

What is escaped (docs/security.md, "Terminal output"): C0 controls (tab and newline
only where a printer shows multi-line text), DEL, C1 controls (U+0080-U+009F, among
them the one-byte CSI U+009B), every format character (Unicode category Cf: bidi
embeddings, overrides and isolates U+202A-U+202E and U+2066-U+2069, marks, zero-width
spaces and joiners, the BOM, tag characters), the line and paragraph separators
U+2028/U+2029, lone surrogates, and the blank letters that render as nothing
(U+115F, U+1160, U+3164, U+FFA0, the combining grapheme joiner U+034F).
"""

from __future__ import annotations

import logging
import re
import sys

# Category Cf as of Unicode 15.1 (tests/eventlog/test_terminal.py checks this against
# the running Python's unicodedata, so a newer Unicode cannot add one silently), plus
# the Cc, Zl, Zp and Cs categories and the invisible letters named above. Written out
# rather than computed so importing this module costs nothing.
_FORMAT = (
    "\u00ad\u0600-\u0605\u061c\u06dd\u070f\u0890\u0891\u08e2\u180e\u200b-\u200f"
    "\u202a-\u202e\u2060-\u2064\u2066-\u206f\ufeff\ufff9-\ufffb"
    "\U000110bd\U000110cd\U00013430-\U0001343f\U0001bca0-\U0001bca3"
    "\U0001d173-\U0001d17a\U000e0001\U000e0020-\U000e007f"
)
_OTHER = "\u007f-\u009f\u2028\u2029\ud800-\udfff\u115f\u1160\u3164\uffa0\u034f"
_ONE_LINE = re.compile(f"[\x00-\x1f{_OTHER}{_FORMAT}]")
_LINES = re.compile(f"[\x00-\x08\x0b-\x1f{_OTHER}{_FORMAT}]")
_JSON = re.compile(f"[{_OTHER}{_FORMAT}]")

_NAMED = {"\t": "\\t", "\n": "\\n", "\r": "\\r"}


def _escape(match: re.Match[str]) -> str:
    char = match.group()
    named = _NAMED.get(char)
    if named is not None:
        return named
    code = ord(char)
    if code < 0x100:
        return f"\\x{code:02x}"
    if code < 0x10000:
        return f"\\u{code:04x}"
    return f"\\U{code:08x}"


def visible(text: str, *, lines: bool = False) -> str:
    """``text`` with every character that could steer a terminal or disguise text shown
    as an escape (``\\x1b``, ``\\r``, ``\\u202e``). One line by default: newlines and tabs
    are escaped too, so a field cannot forge a row of its own. With ``lines=True``
    (a printer showing multi-line text) newline, tab and CR LF line ends are kept and
    each line is escaped the same way. Backslashes are kept as they are: the exact text
    is in ``--json``."""
    if lines:
        text = text.replace("\r\n", "\n")
    pattern = _LINES if lines else _ONE_LINE
    if pattern.search(text) is None:
        return text
    return pattern.sub(_escape, text)


def _json_escape(match: re.Match[str]) -> str:
    code = ord(match.group())
    if code < 0x10000:
        return f"\\u{code:04x}"
    code -= 0x10000
    return f"\\u{0xD800 + (code >> 10):04x}\\u{0xDC00 + (code & 0x3FF):04x}"


def inert_json(text: str) -> str:
    """JSON text with the characters JSON leaves raw (DEL, C1 controls, format
    characters, U+2028/U+2029) written as ``\\uXXXX`` escapes: it decodes to exactly the
    same values and puts no control character on a terminal. (C0 controls are already
    escaped by every JSON encoder; outside strings JSON holds only ASCII, so every
    match is inside a string.)"""
    if _JSON.search(text) is None:
        return text
    return _JSON.sub(_json_escape, text)


class VisibleFormatter(logging.Formatter):
    """Log records as :func:`visible` lines: a logged MCP client name, request path or
    exception message cannot steer the terminal either."""

    def format(self, record: logging.LogRecord) -> str:
        return visible(super().format(record), lines=True)


def log_to_stderr(level: int = logging.INFO) -> None:
    """The CLI's logging: ``level`` and up, the bare message, on stderr, made visible."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(VisibleFormatter("%(message)s"))
    logging.basicConfig(level=level, handlers=[handler])
