"""A one-line progress counter for long commands, on stderr and only on a terminal.

Piped output, ``--json`` and tests see nothing: the counter draws only when stderr is a
terminal and the caller did not turn it off, at most ten times a second, and erases
itself when the work is done.
"""

from __future__ import annotations

import sys
import time


class Progress:
    """Counts work done (``progress(n)`` adds ``n``) and shows ``what: done[ pct%]``."""

    def __init__(self, what: str, total: int = 0, *, enabled: bool = True) -> None:
        self.what, self.total, self.done = what, total, 0
        self.enabled = enabled and sys.stderr.isatty()
        self._last = 0.0

    def __call__(self, n: int) -> None:
        self.done += n
        now = time.monotonic()
        if self.enabled and now - self._last > 0.1:
            self._last = now
            pct = f" {100 * self.done // self.total:3d}%" if self.total else ""
            print(f"\r{self.what}: {self.done:,}{pct}", end="", file=sys.stderr, flush=True)

    def close(self) -> None:
        """Erase the line (the command's own output follows)."""
        if self.enabled:
            print("\r\x1b[K", end="", file=sys.stderr, flush=True)
