"""The hash of one link of a stream's chain, and the checks on what goes into it.

The byte layout is a public format (docs/log-format.md) chosen so an auditor can rebuild
it with one ``sqlite3`` expression and ``sha256sum``::

    prev_hash "\\n" type "\\n" stream "\\n" seq "\\n" recorded_at "\\n" body

``prev_hash`` is 64 lowercase hex characters, ``seq`` and ``recorded_at`` are decimal
ASCII without sign or leading zeros, ``type`` and ``stream`` are UTF-8 text free of
control characters (so they cannot contain the separator) and ``body`` comes last, as
stored, so no length prefix is needed: the layout is unambiguous.
"""

from __future__ import annotations

import functools
import hashlib
import re
from collections.abc import Sequence

from ._errors import InvalidEventError
from ._types import Event, NewEvent

#: ``prev_hash`` of every stream's first event (seq 0).
GENESIS_HASH = "0" * 64

MAX_NAME_CHARS = 256
# SQLite integers are signed 64-bit.
MAX_INT = 2**63 - 1
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")
_NAME = re.compile(rf"[^\x00-\x1f\x7f]{{1,{MAX_NAME_CHARS}}}")
_HEX64 = re.compile(r"[0-9a-f]{64}")


def link_preimage(
    prev_hash: str, type: str, stream: str, seq: int, recorded_at: int, body: bytes
) -> bytes:
    """The exact bytes whose sha256 is an event's hash (see the module docstring)."""
    return b"%s\n%s\n%s\n%d\n%d\n%s" % (
        prev_hash.encode(),
        type.encode(),
        stream.encode(),
        seq,
        recorded_at,
        body,
    )


def event_hash(
    prev_hash: str, type: str, stream: str, seq: int, recorded_at: int, body: bytes
) -> str:
    """Lowercase hex sha256 of :func:`link_preimage`."""
    return hashlib.sha256(
        link_preimage(prev_hash, type, stream, seq, recorded_at, body)
    ).hexdigest()


def blob_digest(data: bytes) -> str:
    """The content address of a blob: lowercase hex sha256 of its bytes."""
    return hashlib.sha256(data).hexdigest()


def is_digest(value: object) -> bool:
    """True for a lowercase hex sha256 string (64 characters)."""
    return isinstance(value, str) and _HEX64.fullmatch(value) is not None


def check_name(what: str, value: object) -> str:
    """Validate a stream id or type tag: non-empty text without control characters."""
    if not isinstance(value, str):
        raise InvalidEventError(f"{what} must be a string, got {type(value).__name__}")
    if not value or len(value) > MAX_NAME_CHARS:
        raise InvalidEventError(
            f"{what} {value[:40]!r} must be 1..{MAX_NAME_CHARS} characters long"
        )
    if _CONTROL.search(value):
        raise InvalidEventError(
            f"{what} {value!r} contains a control character (newline, tab, NUL...); "
            "use printable text"
        )
    try:
        value.encode()
    except UnicodeEncodeError as e:
        raise InvalidEventError(f"{what} {value!r} is not valid Unicode text") from e
    return value


def check_int(what: str, value: object) -> int:
    """Validate a non-negative 64-bit integer (seq, recorded_at)."""
    if type(value) is not int or not 0 <= value <= MAX_INT:
        raise InvalidEventError(f"{what} must be an integer in 0..2**63-1, got {value!r}")
    return value


def _is_name(value: object) -> bool:
    """:func:`check_name`'s rule as a predicate, without building a message."""
    return type(value) is str and _is_name_text(value)


@functools.lru_cache(maxsize=4096)
def _is_name_text(value: str) -> bool:
    """(Remembered: appends name their stream and their few event types again and
    again; a regex per name was 2.5% of ``skillog mcp serve``'s trio thread.)"""
    if _NAME.fullmatch(value) is None:
        return False
    if value.isascii():
        return True
    try:
        value.encode()
    except UnicodeEncodeError:
        return False
    return True


def in_log(stream: object, seq: object) -> bool:
    """The rule that makes a stored row part of the log (docs/log-format.md).

    A row belongs to the log when its ``seq`` is an integer >= 0 and its ``stream`` is
    a valid stream id (text of 1..256 characters without control characters). Every
    reader shows exactly these rows and verify checks each stream's rows as one chain
    (seq 0, 1, 2... linked by hash); any other row is reported by verify as a stray and
    shown by no reader. Stores state the same rule in their query language.
    """
    return type(seq) is int and 0 <= seq <= MAX_INT and _is_name(stream)


def _all_valid(stream: str, events: Sequence[NewEvent], expected_seq: object) -> bool:
    """True when :func:`check_new_events` would accept, checked without messages.

    The common case of a bulk append (10,000 events of a few types) then costs a few
    type checks per event instead of two f-strings and a regex; anything unusual (a
    subclass, another sequence type, a bad value) falls back to the full checks.
    """
    if type(expected_seq) is not int or not 0 <= expected_seq <= MAX_INT:
        return False
    if not _is_name(stream) or (type(events) is not tuple and type(events) is not list):
        return False
    types: set[str] = set()
    for ev in events:
        if type(ev) is not NewEvent:
            return False
        t, r = ev.type, ev.recorded_at
        if type(ev.body) is not bytes or type(r) is not int or not 0 <= r <= MAX_INT:
            return False
        if type(t) is not str:
            return False
        if t not in types:
            if not _is_name(t):
                return False
            types.add(t)
    return bool(events)


def check_new_events(stream: str, events: Sequence[NewEvent], expected_seq: object) -> None:
    """Validate the arguments of an append before anything is queued or written."""
    if _all_valid(stream, events, expected_seq):
        return
    check_name("stream id", stream)
    check_int(f"stream {stream!r}: expected_seq", expected_seq)
    if isinstance(events, (str, bytes)) or not hasattr(events, "__len__"):
        raise InvalidEventError(f"stream {stream!r}: events must be a sequence of NewEvent")
    if len(events) == 0:
        raise InvalidEventError(f"stream {stream!r}: an append needs at least one event")
    for i, ev in enumerate(events):
        where = f"stream {stream!r}: events[{i}]"
        if not isinstance(ev, NewEvent):
            raise InvalidEventError(f"{where} must be a NewEvent, got {type(ev).__name__}")
        check_name(f"{where}.type", ev.type)
        if not isinstance(ev.body, bytes):
            raise InvalidEventError(f"{where}.body must be bytes, got {type(ev.body).__name__}")
        check_int(f"{where}.recorded_at", ev.recorded_at)


def check_blobs(blobs: Sequence[bytes]) -> None:
    """Validate the blobs argument of an append."""
    if isinstance(blobs, (str, bytes)):
        raise InvalidEventError("blobs must be a sequence of bytes, not a single value")
    for i, b in enumerate(blobs):
        if not isinstance(b, bytes):
            raise InvalidEventError(f"blobs[{i}] must be bytes, got {type(b).__name__}")


def build_events(
    stream: str,
    prev_hash: str,
    first_seq: int,
    first_position: int,
    new_events: Sequence[NewEvent],
) -> list[Event]:
    """Chain ``new_events`` onto a stream whose last hash is ``prev_hash`` (pure)."""
    out: list[Event] = []
    seq, position = first_seq, first_position
    sb = stream.encode()
    sha = hashlib.sha256
    for ev in new_events:
        digest = sha(
            b"%s\n%s\n%s\n%d\n%d\n%s"
            % (prev_hash.encode(), ev.type.encode(), sb, seq, ev.recorded_at, ev.body)
        ).hexdigest()
        out.append(
            Event(
                stream=stream,
                seq=seq,
                position=position,
                type=ev.type,
                recorded_at=ev.recorded_at,
                body=ev.body,
                prev_hash=prev_hash,
                hash=digest,
            )
        )
        prev_hash = digest
        seq += 1
        position += 1
    return out
