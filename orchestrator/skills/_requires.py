"""``metadata.requires``: the commands a skill needs on PATH to be available (seed 003)."""

from __future__ import annotations

import re
import shutil
from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor
from concurrent.futures import TimeoutError as FuturesTimeout

_COMMAND = re.compile(r"[A-Za-z0-9._+-]+")


def required_commands(metadata: dict[str, str]) -> list[str]:
    """The space-separated command names of ``metadata["requires"]``, in order."""
    return metadata.get("requires", "").split()


class CommandChecker:
    """Checks commands on ``PATH`` once per name, each lookup bounded by a timeout.

    A lookup is a PATH search (``shutil.which``); it runs on a worker thread so a hung
    network filesystem on PATH costs at most ``timeout_s`` and never blocks the caller.
    """

    def __init__(self, *, path: str | None = None, timeout_s: float = 5.0) -> None:
        self._path = path
        self._timeout = timeout_s
        self._cache: dict[str, bool | None] = {}

    def missing(self, commands: Iterable[str]) -> str | None:
        """``None`` if every command is found, else the reason the skill is unavailable."""
        bad = [c for c in commands if not _COMMAND.fullmatch(c)]
        if bad:
            return f"metadata.requires names {' '.join(bad)!r}; give bare command names"
        missing: list[str] = []
        unknown: list[str] = []
        for c in commands:
            found = self._lookup(c)
            if found is None:
                unknown.append(c)
            elif not found:
                missing.append(c)
        if missing:
            return f"missing commands: {', '.join(missing)}"
        if unknown:
            return f"could not check commands within {self._timeout:g}s: {', '.join(unknown)}"
        return None

    def _lookup(self, command: str) -> bool | None:
        if command not in self._cache:
            pool = ThreadPoolExecutor(max_workers=1)
            future = pool.submit(shutil.which, command, path=self._path)
            try:
                self._cache[command] = future.result(timeout=self._timeout) is not None
            except FuturesTimeout:
                self._cache[command] = None
            finally:
                pool.shutdown(wait=False)
        return self._cache[command]
