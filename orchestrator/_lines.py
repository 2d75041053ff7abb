"""The line wire of MCP's stdio transport, for both ends: one JSON-RPC message per line.

``skillog mcp serve`` reads its client's lines (orchestrator/mcp_server/_stdio.py) and
skillog as a client reads a server's (orchestrator/mcp/_stdio.py); both split the bytes
they read with :class:`LineSplitter`, which holds at most ``limit`` bytes of a line:
a peer that writes one endless line costs a bounded buffer, not all of memory.
"""

from __future__ import annotations

from types import TracebackType
from typing import Self, cast

MAX_LINE = 16 << 20
"""The longest message line either end reads (16 MiB): past it the line is dropped as
it comes, instead of held whole in memory, and handed on as the error a line that does
not parse is (a request in it goes unanswered, an answer in it is never seen)."""


class LineSplitter:
    """Bytes, as read, into the lines they end. Only new bytes are scanned and a line
    in many pieces is joined once (linear time for a long line); a line longer than
    ``limit`` bytes (its ``\\n`` not counted) is dropped as it arrives and reported
    once, as ``None`` in its place."""

    __slots__ = ("_dropping", "_pieces", "_size", "limit")

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self._pieces: list[bytes] = []  # the line begun, not ended yet
        self._size = 0  # their length: never over the limit
        self._dropping = False  # inside a line over the limit: skip to its end

    @property
    def buffered(self) -> int:
        """How many bytes of the unended line are held (at most ``limit``)."""
        return self._size

    def feed(self, data: bytes) -> list[bytes | None]:
        """The lines ``data`` ends, in order; ``None`` for a line over the limit (at the
        chunk where it passes the limit, or where it ends if that is the same one)."""
        limit = self.limit
        ended = data.split(b"\n")
        rest = ended.pop()
        # The pieces, with None put in place of a line over the limit (no copy).
        lines = cast("list[bytes | None]", ended)
        if ended:
            if self._dropping:
                self._dropping = False  # its end: reported already
                del ended[0]
            elif self._pieces:
                size = self._size + len(ended[0])
                lines[0] = None if size > limit else b"".join([*self._pieces, ended[0]])
                self._pieces, self._size = [], 0
            if len(data) > limit:  # else no piece of it can be over the limit
                lines = [piece if piece is None or len(piece) <= limit else None for piece in lines]
        if rest and not self._dropping:
            size = self._size + len(rest)
            if size > limit:
                self._pieces, self._size, self._dropping = [], 0, True
                lines.append(None)
            else:
                self._pieces.append(rest)
                self._size = size
        return lines

    def end(self) -> bytes | None:
        """At the end of the wire: the last line, when it has no ``\\n`` (None when
        there is none, or it was over the limit and reported already)."""
        last = b"".join(self._pieces) if self._pieces else None
        self._pieces, self._size, self._dropping = [], 0, False
        return last


class Stream:
    """What the SDK's stream protocols ask of both ends beyond sending or receiving:
    ``aclose`` and use as an async context manager (which closes it)."""

    async def aclose(self) -> None:
        raise NotImplementedError

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self, kind: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.aclose()
