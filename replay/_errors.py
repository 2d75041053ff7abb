"""Replay's errors: a log that cannot be replayed is bad input (exit 2).

A divergence is not an error: it is a finding, reported in :class:`ReplayReport` or
:class:`RedriveReport` (the CLI exits 1 for it).
"""

from __future__ import annotations

from eventlog import SkillogError


class ReplayError(SkillogError):
    """Base of replay's errors."""


class BrokenLogError(ReplayError):
    """The log cannot be replayed: a session is missing, a chain or checkpoint does not
    verify, a blob is missing or does not match its digest, an event does not decode.

    ``session`` and ``seq`` say where (``seq`` is None when the problem is not one
    event's); the message says what and what to do.
    """

    def __init__(self, session: str, seq: int | None, problem: str) -> None:
        self.session = session
        self.seq = seq
        where = f"session {session}" + ("" if seq is None else f" seq {seq}")
        super().__init__(f"{where}: {problem}")


class BlobError(BrokenLogError):
    """A blob the log names is missing from the store or does not match its sha256."""
