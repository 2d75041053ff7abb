"""How deep a frontmatter's YAML nests, read from the text without a YAML library.

skillog's depth rule must not depend on the parser underneath: libyaml refuses nesting
past its own limit (1000 levels in 0.2.5) while scanning, before the events skillog
walks arrive, and reports it as a syntax error; another build or version may differ.
So the text is scanned here first. The scan is a **lower bound**: it counts only
collections it is sure of (flow brackets ``[``/``{`` outside quoted scalars, comments,
plain scalars and block scalars; compact block entries ``- ``/``? `` on one line), so a
file it refuses truly nests too deep, and the depth rule applied to the parser's events
remains the exact one for whatever the scan leaves open. It stops at the first
collection past the limit, so a hostile file costs no more than its first levels.
"""

from __future__ import annotations

import re

# Runs of characters that change nothing in the scan, skipped at once.
_PLAIN_RUN = re.compile(r"[^\[\]{},:'\"#\n]+")
_BLOCK_PLAIN_RUN = re.compile(r"[^:#\n]+")
_BLANK = " \t"
_SPACES = re.compile(r" *")


def nesting_bound(text: str, limit: int) -> int:
    """Return a lower bound of the nesting depth, or the first depth past ``limit``.

    The scan stops as soon as the bound exceeds ``limit``.
    """
    n = len(text)
    i = 0
    flow = 0  # open flow collections
    deepest = 0
    pending = True  # the next line may start a node (the previous one ended with ':' or '-')
    while i < n:
        # One block-context line (or the block-context rest of a line a flow collection ended on).
        end = text.find("\n", i)
        end = n if end < 0 else end
        indent = i
        while indent < end and text[indent] == " ":
            indent += 1
        compact = 0
        start = pending or text.startswith(("- ", "? "), indent) or text[indent:end] in ("-", "?")
        j = indent
        while j < end and flow == 0:
            c = text[j]
            if c in _BLANK:
                j += 1
            elif c == "#" and (j == 0 or text[j - 1] in " \t\n"):
                j = end
            elif start and c in "-?" and (j + 1 == end or text[j + 1] in _BLANK):
                compact += 1
                deepest = max(deepest, compact)
                if deepest > limit:
                    return deepest
                j += 1
            elif start and c in "&!":  # anchor or tag before the node
                while j < end and text[j] not in _BLANK:
                    j += 1
            elif start and c in "[{":
                flow = 1
                j += 1
            elif start and c in "'\"":
                j = _skip_quoted(text, j)
                start = False
                if j > end:  # a quoted scalar over several lines: go on after it
                    end = text.find("\n", j)
                    end = n if end < 0 else end
            elif start and c in "|>":  # a block scalar: its lines are text
                j = _skip_block_scalar(text, end, _indentation(text, i))
                end = j
                start = False
            elif c == ":" and (j + 1 == end or text[j + 1] in _BLANK):
                start = True
                j += 1
            else:
                start = False
                m = _BLOCK_PLAIN_RUN.match(text, j, end)
                j = m.end() if m else j + 1
        if flow:
            j, flow, inner = _scan_flow(text, j, compact, limit)
            deepest = max(deepest, inner)
            if deepest > limit:
                return deepest
            i = j  # the block-context rest of the line the flow collection ended on
            pending = False
            continue
        pending = start
        i = end + 1
    return deepest


def _scan_flow(text: str, i: int, outer: int, limit: int) -> tuple[int, int, int]:
    """Scan from just after a flow collection's opening bracket to after its closing one.

    Returns ``(index, open flow collections, deepest bound)``.
    """
    n = len(text)
    flow = 1
    deepest = outer + flow
    start = True
    while i < n and flow:
        if deepest > limit:
            break
        c = text[i]
        if c in "[{":
            flow += 1
            deepest = max(deepest, outer + flow)
            start = True
            i += 1
        elif c in "]}":
            flow -= 1
            start = False
            i += 1
        elif c in ",:":
            start = True
            i += 1
        elif c in " \t\n":
            i += 1
        elif c == "#" and text[i - 1] in " \t\n":
            i = text.find("\n", i)
            i = n if i < 0 else i
        elif start and c in "'\"":
            i = _skip_quoted(text, i)
            start = False
        elif start and c == "?":
            i += 1
        elif start and c in "&!":  # anchor or tag before the node
            while i < n and text[i] not in " \t\n,[]{}":
                i += 1
        else:
            start = False
            m = _PLAIN_RUN.match(text, i)
            i = m.end() if m else i + 1
    return i, flow, deepest


def _skip_quoted(text: str, i: int) -> int:
    """Return the index just after the quoted scalar opening at ``i`` (or the end)."""
    quote = text[i]
    i += 1
    while True:
        j = text.find(quote, i)
        if j < 0:
            return len(text)
        if quote == "'" and text.startswith("''", j):
            i = j + 2
        elif quote == '"' and _escaped(text, j):
            i = j + 1
        else:
            return j + 1


def _escaped(text: str, j: int) -> bool:
    slashes = 0
    while text[j - 1 - slashes] == "\\":
        slashes += 1
    return slashes % 2 == 1


def _skip_block_scalar(text: str, end: int, indentation: int) -> int:
    """Return the index of the line break ending a block scalar's last line.

    Its lines are the blank ones and those indented more than the line that opened it.
    """
    n = len(text)
    while end < n:
        nxt = text.find("\n", end + 1)
        nxt = n if nxt < 0 else nxt
        if text[end + 1 : nxt].strip(" ") and _indentation(text, end + 1) <= indentation:
            return end
        end = nxt
    return end


def _indentation(text: str, i: int) -> int:
    """The indentation of the line holding ``text[i]``."""
    start = text.rfind("\n", 0, i) + 1
    m = _SPACES.match(text, start)
    return m.end() - start if m else 0
