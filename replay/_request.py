"""Canonical request bytes on both sides of a replay, and the diff between them.

The re-rendered side runs the current composer; the recorded side concatenates the
blobs ``prompt.rendered`` names. Both keep a running sha256 over the history lines, so
checking a turn costs the bytes of its new messages and its tail, and proving every
turn of a session costs time linear in the bytes of all the requests it re-renders.
"""

from __future__ import annotations

import difflib
import hashlib
import json
from collections.abc import Iterator, Sequence
from typing import Any

from orchestrator import Message, ModelRequest
from orchestrator.runtime import History
from orchestrator.runtime import composer as _prompt


class RenderedRequests:
    """Hashes successive requests of one session as the composer renders them."""

    def __init__(self) -> None:
        self._messages: Sequence[Message] = ()
        self._hash = hashlib.sha256()
        self._history_bytes = 0
        self.total_bytes = 0
        """The bytes of every request rendered so far (each counted whole)."""

    def digest(self, request: ModelRequest) -> str:
        """sha256 of ``request_bytes(request)``, reusing the lines of a shared history."""
        messages = request.messages
        known = len(self._messages)
        # A view of the same history only grew (no cost); otherwise tuple equality
        # compares identical items by identity first: one C-level pass, not a
        # re-encoding.
        grew = (
            messages.startswith(self._messages)
            if isinstance(messages, History)
            else tuple(messages[:known]) == tuple(self._messages)
        )
        if len(messages) < known or not grew:
            self._hash, self._history_bytes, known = hashlib.sha256(), 0, 0
        for message in messages[known:]:
            # Looked up on the module each time: the composer under test is the one in
            # force now (a patched or reloaded one included), never a stale import.
            line = _prompt.message_line(message)
            self._hash.update(line)
            self._history_bytes += len(line)
        self._messages = messages
        tail = _prompt.tail_line(request)
        self.total_bytes += self._history_bytes + len(tail)
        h = self._hash.copy()
        h.update(tail)
        return h.hexdigest()


class RecordedRequests:
    """The recorded requests of one session, from the blobs ``prompt.rendered`` names:
    every message line once, in order, and every distinct tail once (by digest).

    ``lines`` only grows. A request's history is ``lines[start:start + count]``: a
    compaction rewrote the history (docs/context.md), so the prompt after it names
    the messages from the first rewritten one as new; the lines kept before it are
    appended again, and ``start`` moves to the first of them. ``starts`` holds each
    request's ``start``, in order."""

    def __init__(self) -> None:
        self.lines: list[bytes] = []
        self.tails: dict[str, bytes] = {}
        self.start = 0
        self.starts: list[int] = []
        self._hash = hashlib.sha256()

    @property
    def count(self) -> int:
        """The messages of the current history."""
        return len(self.lines) - self.start

    def extend(self, lines: list[bytes], *, keep: int | None = None) -> None:
        """Add a request's new message lines; ``keep`` is how many of the history's
        lines it keeps (all when None)."""
        if keep is not None and keep < self.count:
            kept = self.lines[self.start : self.start + max(0, keep)]
            self.start = len(self.lines)
            self._hash = hashlib.sha256()
            for line in kept:
                self._hash.update(line)
            self.lines.extend(kept)
        for line in lines:
            self._hash.update(line)
        self.lines.extend(lines)
        self.starts.append(self.start)

    def digest(self, tail: bytes) -> str:
        h = self._hash.copy()
        h.update(tail)
        return h.hexdigest()

    def request_bytes(self, tail: bytes) -> bytes:
        return b"".join(self.lines[self.start :]) + tail


MISMATCH = ("recorded (blob store)", "re-rendered (current code)")
"""The labels of a replay mismatch: what the log holds, what the code renders now."""
STEP = ("the previous request", "this request")
"""The labels of a request's diff against the one before it (audit report, trace)."""


def request_diff(
    recorded: bytes, rerendered: bytes, *, context: int = 3, labels: tuple[str, str] = MISMATCH
) -> str:
    """A unified diff of two canonical requests, each JSON line pretty-printed (strings
    with line breaks shown as indented blocks) under a ``# message N`` / ``# tail``
    header; each hunk header names the part of the request it is in (as git names the
    function), so a reader sees at once which message or the tail changed. When the
    two differ only in how the same JSON values are written, the raw lines are diffed.
    ``labels`` name the two sides: a replay mismatch by default, :data:`STEP` for a
    request against the previous one."""
    before, after = readable(recorded), readable(rerendered)
    if before == after:
        # Same values, different bytes (an escape, a key order): show the raw lines.
        before = recorded.decode("utf-8", "replace").splitlines()
        after = rerendered.decode("utf-8", "replace").splitlines()
    section: list[str] = []
    current = ""
    for line in before:
        current = line if line.startswith("# ") else current
        section.append(current)
    out: list[str] = []
    for line in difflib.unified_diff(
        before,
        after,
        fromfile=labels[0],
        tofile=labels[1],
        n=context,
        lineterm="",
    ):
        if line.startswith("@@ "):
            start = int(line.split()[1][1:].split(",")[0])
            if 0 < start <= len(section) and section[start - 1]:
                line = f"{line} {section[start - 1]}"
        out.append(line)
    return "\n".join(out)


def readable(request: bytes) -> list[str]:
    """The lines of a canonical request, pretty-printed for people."""
    lines = request.split(b"\n")
    if lines and lines[-1] == b"":
        lines.pop()
    out: list[str] = []
    for i, raw in enumerate(lines):
        last = i == len(lines) - 1
        try:
            value = json.loads(raw)
        except ValueError:
            out.append(f"# line {i + 1} (not JSON)")
            out.append(raw.decode("utf-8", "replace"))
            continue
        role = value.get("role") if isinstance(value, dict) else None
        out.append("# tail" if last else f"# message {i + 1} ({role})")
        out.extend(_pretty(value, "", ""))
    return out


def _pretty(value: Any, prefix: str, pad: str) -> Iterator[str]:
    if isinstance(value, dict) and value:
        yield prefix + "{"
        for key, item in value.items():
            yield from _pretty(item, f"{pad}  {json.dumps(key)}: ", pad + "  ")
        yield pad + "}"
    elif isinstance(value, list) and value:
        yield prefix + "["
        for item in value:
            yield from _pretty(item, pad + "  ", pad + "  ")
        yield pad + "]"
    elif isinstance(value, str) and "\n" in value:
        yield prefix + "|"
        for line in value.split("\n"):
            yield f"{pad}  {line}"
    else:
        yield prefix + json.dumps(value, ensure_ascii=False)
