"""The one error base of the project, and the event log's errors.

It lives in the lowest layer so that every package can subclass it without importing
upward. Messages say what happened, where, and what to do about it.
"""

from __future__ import annotations


class SkillogError(Exception):
    """Base of every error skillog raises on purpose.

    ``exit_code`` is what the CLI exits with when this error reaches it: 2 means the
    input (a database, a file, an argument) could not be used.
    """

    exit_code: int = 2


class EventLogError(SkillogError):
    """Base of the errors raised by ``eventlog``."""


class InvalidEventError(EventLogError):
    """An argument to an append (stream id, type tag, body, time, seq) is malformed."""


class ConcurrencyError(EventLogError):
    """An append stated a sequence number that is not the stream's current length.

    Another writer appended first. Re-read the stream (its head), recompute the events and
    append again at the new length. Nothing of the failed append was written.
    """

    def __init__(self, stream: str, expected_seq: int, actual_seq: int) -> None:
        self.stream = stream
        self.expected_seq = expected_seq
        self.actual_seq = actual_seq
        super().__init__(
            f"stream {stream!r}: append expected seq {expected_seq} but the stream has "
            f"{actual_seq} events; another writer appended first - re-read the head and retry"
        )


class BlobNotFoundError(EventLogError):
    """No blob with this sha256 digest is stored."""

    def __init__(self, digest: str) -> None:
        self.digest = digest
        super().__init__(
            f"blob {digest} is not in the store; it was never stored or the database "
            "was altered - check the digest or import the blob"
        )


class StoreError(EventLogError):
    """The database cannot be used: not SQLite, wrong format, locked, full, read-only, I/O."""


class DatabaseFormatError(StoreError):
    """The file is not a skillog database this code can open (not SQLite, newer format)."""


class DatabaseLockedError(StoreError):
    """Another process held the database's write lock longer than the busy timeout."""


class DatabaseFullError(StoreError):
    """The disk (or the database's page limit) is full; the transaction was rolled back."""


class ReadOnlyDatabaseError(StoreError):
    """The database file or its directory is not writable."""


class CodecError(EventLogError):
    """An event body cannot be encoded, decoded or registered."""


class UnknownEventTypeError(CodecError):
    """An event's type tag (or its schema version) is not known to this codec."""


class SnapshotMismatchError(EventLogError):
    """A stored snapshot covers a chain position whose hash is no longer in the log."""

    exit_code = 1


class CheckpointError(EventLogError):
    """A checkpoint or key file is unreadable, malformed, or its signature is invalid."""


class ImportFormatError(EventLogError):
    """A JSON Lines import file is truncated, garbled or its chains do not verify."""
