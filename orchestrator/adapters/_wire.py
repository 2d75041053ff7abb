"""Reversible tool names on a provider's wire.

Both providers accept tool names made of ``[A-Za-z0-9_-]`` (at most 64 characters);
skillog's names are namespaced with dots (``skills.load``). On the wire each dot becomes
``__``; the way back goes through the table built from the request's tools, never by
string replacement, so a name that already held ``__`` cannot be misread.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from ._errors import ToolNameError

MAX_WIRE_NAME = 64
_WIRE_NAME = re.compile(r"[A-Za-z0-9_-]{1,64}")


def to_wire(name: str) -> str:
    """The wire form of a canonical tool name (dots become ``__``)."""
    return name.replace(".", "__")


class WireNames:
    """The two-way name table for one request's tool set."""

    def __init__(self, names: Iterable[str], *, provider: str) -> None:
        """Build the table; raise :class:`ToolNameError` when a name cannot go on the wire
        or two names would share one wire name."""
        self._back: dict[str, str] = {}
        for name in names:
            wire = to_wire(name)
            if not _WIRE_NAME.fullmatch(wire):
                raise ToolNameError(
                    f"{provider}: tool name {name!r} cannot be sent: once dots become '__' "
                    f"({wire!r}) it must be 1-{MAX_WIRE_NAME} characters of letters, digits, "
                    "'_' and '-'; rename the tool"
                )
            other = self._back.get(wire)
            if other is not None and other != name:
                raise ToolNameError(
                    f"{provider}: tools {other!r} and {name!r} would both be sent as "
                    f"{wire!r}; rename one of them"
                )
            self._back[wire] = name

    def from_wire(self, wire: str) -> str:
        """The canonical name for a wire name; a name the request did not offer comes back
        unchanged, so the runtime can answer the model that no such tool exists."""
        return self._back.get(wire, wire)
