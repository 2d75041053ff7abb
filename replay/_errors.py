"""Replay's errors: a log that cannot be replayed is bad input (exit 2).

A divergence is not an error: it is a finding, reported in :class:`ReplayReport` or
:class:`RedriveReport` (the CLI exits 1 for it).
"""

from __future__ import annotations

from eventlog import SkillogError, VerifyReport


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


class UnverifiedLogError(BrokenLogError):
    """The verdict on the session does not hold: ``report`` lists every fault."""

    def __init__(self, session: str, report: VerifyReport) -> None:
        self.report = report
        fault = report.fault
        assert fault is not None
        others = [f"{f.kind} {f.rule}" if f.rule else f.kind for f in report.faults[1:]]
        more = len(others) + report.unlisted
        kind = f"{fault.kind} {fault.rule}" if fault.rule else fault.kind
        why = (
            "the runtime cannot have written this sequence of events (forged, or written "
            "around skillog)"
            if fault.kind == "grammar"
            else "it was altered or damaged after it was written"
        )
        super().__init__(
            fault.stream or session,
            fault.seq,
            f"the log does not verify: {kind}: {fault.detail}"
            + (
                f" (and {more} more faults"
                + (f": {', '.join(dict.fromkeys(others))}" if others else "")
                + "; `skillog log verify` lists them)"
                if more
                else ""
            )
            + f"; {why} - replay proves nothing from it",
        )
