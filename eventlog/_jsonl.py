"""JSON Lines export and import of streams, byte-exact.

One line per event, keys sorted, no whitespace::

    {"blobs": {DIGEST: BASE64, ...}, "body": BODY, "hash": H, "prev_hash": P,
     "recorded_at": NS, "seq": N, "stream": S, "type": T}

``body`` is the stored body bytes written verbatim when they are one JSON value without
line breaks or surrounding whitespace (the codec always produces such bodies);
otherwise the line has ``body_b64`` (standard base64) instead. ``blobs`` (omitted when
empty) carries each blob whose digest appears as a JSON string in the body, the first
time the export needs it. Import re-reads the body bytes exactly, so
import -> export reproduces the file byte for byte.

An export starts with the line ``{"skillog_export":2}`` and ends with
``{"end":{"events":N}}``, so a file cut at a line boundary is known to be cut: a file
that starts with the header must end with the end line and hold exactly N events.
Exports written before these lines existed (no header) still import; the report says
their completeness cannot be checked.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from typing import BinaryIO

import msgspec
import trio

from ._checkpoint import Checkpoint
from ._errors import BlobNotFoundError, ImportFormatError
from ._hashchain import GENESIS_HASH, MAX_NAME_CHARS, blob_digest, check_name, event_hash, is_digest
from ._types import Event, EventStore, NewEvent

_DIGEST_IN_BODY = re.compile(rb'"([0-9a-f]{64})"')


def named_digests(body: bytes) -> set[str]:
    """Every digest ``body`` (canonical JSON) could name: each JSON string that is 64
    lowercase hex characters. A superset of the blobs an event references, which is what
    an export must carry and what blob collection must keep."""
    return {m.group(1).decode() for m in _DIGEST_IN_BODY.finditer(body)}


class Line(msgspec.Struct, kw_only=True, omit_defaults=True, forbid_unknown_fields=True):
    """One exported event (see the module docstring)."""

    stream: str
    seq: int
    type: str
    recorded_at: int
    prev_hash: str
    hash: str
    body: msgspec.Raw | msgspec.UnsetType = msgspec.UNSET
    body_b64: bytes | msgspec.UnsetType = msgspec.UNSET
    blobs: dict[str, bytes] | msgspec.UnsetType = msgspec.UNSET


class ImportReport(msgspec.Struct, frozen=True, kw_only=True):
    """What an import committed; ``complete`` is False for an export without the
    header and end lines (written before they existed), which could have been cut."""

    events: int
    streams: list[str]
    blobs: int
    complete: bool = True
    checkpoint: Checkpoint | None = None
    """The signed checkpoint of an archive's end line (``eventlog._archive``)."""


class _End(msgspec.Struct, forbid_unknown_fields=True, omit_defaults=True):
    events: int
    checkpoint: Checkpoint | None = None  # an archive's (eventlog/_archive.py)


class _EndLine(msgspec.Struct, forbid_unknown_fields=True):
    end: _End


HEADER = b'{"skillog_export":2}\n'
_END_DECODER = msgspec.json.Decoder(_EndLine)


_ENCODER = msgspec.json.Encoder(order="sorted")
_DECODER = msgspec.json.Decoder(Line)


def _embeddable(body: bytes) -> bool:
    if not body or b"\n" in body or b"\r" in body or body != body.strip():
        return False
    try:
        msgspec.json.decode(body)
    except msgspec.DecodeError:
        return False
    return True


def encode_line(event: Event, blobs: dict[str, bytes]) -> bytes:
    """The export line of ``event`` (with its newline)."""
    embed = _embeddable(event.body)
    line = Line(
        stream=event.stream,
        seq=event.seq,
        type=event.type,
        recorded_at=event.recorded_at,
        prev_hash=event.prev_hash,
        hash=event.hash,
        body=msgspec.Raw(event.body) if embed else msgspec.UNSET,
        body_b64=msgspec.UNSET if embed else event.body,
        blobs=blobs or msgspec.UNSET,
    )
    return _ENCODER.encode(line) + b"\n"


async def line_with_blobs(store: EventStore, event: Event, sent: set[str]) -> bytes:
    """The export line of ``event`` carrying each blob its body names that is stored and
    not in ``sent`` yet (then added to it)."""
    needed: dict[str, bytes] = {}
    for m in _DIGEST_IN_BODY.finditer(event.body):
        digest = m.group(1).decode()
        if digest in sent or digest in needed:
            continue
        try:
            needed[digest] = await store.get_blob(digest)
        except BlobNotFoundError:
            continue  # a digest of something else (a skill, a request)
    sent.update(needed)
    return encode_line(event, needed)


async def export_jsonl(
    store: EventStore,
    out: BinaryIO,
    *,
    streams: Sequence[str] | None = None,
    progress: Callable[[int], None] | None = None,
) -> int:
    """Write events as JSON Lines to ``out``; returns the number of events written.

    Without ``streams``: every event in position order. With: those streams, one after
    the other in the order given.
    """
    sent: set[str] = set()
    count = reported = 0
    chunk: list[bytes] = [HEADER]
    sources = [store.read(s) for s in streams] if streams is not None else [store.read_all()]
    for source in sources:
        async for event in source:
            chunk.append(await line_with_blobs(store, event, sent))
            count += 1
            if len(chunk) >= 1024:
                await trio.to_thread.run_sync(out.writelines, chunk)
                if progress:
                    progress(count - reported)  # events, not lines (the header is one)
                reported, chunk = count, []
    chunk.append(_ENCODER.encode(_EndLine(end=_End(events=count))) + b"\n")
    await trio.to_thread.run_sync(out.writelines, chunk)
    if progress:
        progress(count - reported)
    return count


class ImportChecker:
    """Parses and checks import lines, one at a time, against the target's heads (pure).

    ``head_of(stream)`` gives the target's (length, head hash) for a stream not seen yet
    in the file. Every stream must continue exactly from that head and every event must
    hash correctly, so an imported stream always verifies.
    """

    def __init__(self, source: str, head_of: Callable[[str], tuple[int, str]]) -> None:
        self._source = source
        self._head_of = head_of
        self.heads: dict[str, tuple[int, str]] = {}
        self.blobs: dict[str, bytes] = {}
        self.events = 0
        self._header: bool | None = None  # None until the first non-blank line
        self.checkpoint: Checkpoint | None = None
        self._ended = False

    def fail(self, lineno: int, message: str) -> ImportFormatError:
        return ImportFormatError(
            f"{self._source}:{lineno}: {message}; nothing was imported - fix or re-export the file"
        )

    def check(self, lineno: int, raw: bytes, position: int = 0) -> Event | None:
        """The event of this line at ``position``, checked; None for a blank line."""
        if not raw.strip():
            return None
        if not raw.endswith(b"\n"):
            raise self.fail(lineno, "the last line is not terminated: the file was cut (truncated)")
        if self._ended:
            raise self.fail(lineno, "a line after the end line (two files joined?)")
        if self._header is None:
            self._header = raw == HEADER
            if self._header:
                return None
        if raw.startswith(b'{"end":'):
            self._end(lineno, raw)
            return None
        try:
            line = _DECODER.decode(raw)
        except msgspec.MsgspecError as e:
            raise self.fail(lineno, f"not an event line: {e}") from e
        if isinstance(line.body, msgspec.Raw) == isinstance(line.body_b64, bytes):
            raise self.fail(lineno, "needs exactly one of body and body_b64")
        body = bytes(line.body) if isinstance(line.body, msgspec.Raw) else line.body_b64
        assert isinstance(body, bytes)
        try:
            check_name("stream", line.stream)
            check_name("type", line.type)
        except Exception as e:
            raise self.fail(lineno, str(e)) from e
        if not 0 <= line.seq < 2**63 or not 0 <= line.recorded_at < 2**63:
            raise self.fail(lineno, "seq and recorded_at must be in 0..2**63-1")
        for digest, data in (line.blobs or {}).items():  # UNSET is falsy
            if not is_digest(digest) or blob_digest(data) != digest:
                raise self.fail(lineno, f"blob {digest[:70]} does not match its content")
            self.blobs[digest] = data
        head = self.heads.get(line.stream)
        if head is None:
            head = self._head_of(line.stream)
        length, prev = head
        where = f"stream {line.stream[:MAX_NAME_CHARS]!r} seq {line.seq}"
        if line.seq != length or line.prev_hash != prev:
            raise self.fail(
                lineno,
                f"{where} does not continue the chain (expected seq {length} after hash "
                f"{prev[:16]}...); a stream can only be imported onto its own head",
            )
        h = event_hash(prev, line.type, line.stream, line.seq, line.recorded_at, body)
        if h != line.hash:
            raise self.fail(lineno, f"{where}: hash does not match the content (altered line)")
        self.heads[line.stream] = (length + 1, h)
        self.events += 1
        return Event(
            stream=line.stream,
            seq=line.seq,
            position=position,
            type=line.type,
            recorded_at=line.recorded_at,
            body=body,
            prev_hash=prev,
            hash=h,
        )

    def _end(self, lineno: int, raw: bytes) -> None:
        try:
            end = _END_DECODER.decode(raw).end
        except msgspec.MsgspecError as e:
            raise self.fail(lineno, f"not an end line: {e}") from e
        count, self.checkpoint = end.events, end.checkpoint
        if not self._header:
            raise self.fail(lineno, "an end line in a file without the export header line")
        if count != self.events:
            raise self.fail(
                lineno, f"the end line says {count} events but the file holds {self.events}"
            )
        self._ended = True

    def finish(self, lines: int) -> bool:
        """After the last line: whether the file is known complete; raises if cut."""
        if self._header and not self._ended:
            raise self.fail(
                lines,
                f"the file is cut (truncated): it ends after {self.events} events without its "
                "end line",
            )
        return bool(self._header)


def import_lines(
    f: BinaryIO,
    source: str,
    *,
    head_of: Callable[[str], tuple[int, str]],
    first_position: int,
    insert: Callable[[list[Event]], None],
    progress: Callable[[int], None] | None = None,
) -> tuple[ImportReport, dict[str, bytes], int]:
    """Check every line of ``f`` and ``insert`` its events in chunks, numbered from
    ``first_position``, inside the caller's (a writer's) transaction: all or nothing.

    Returns the report, the blobs to store, and the next free position.
    """
    checker = ImportChecker(source, head_of)
    position = first_position
    rows: list[Event] = []
    count = lineno = 0
    for lineno, raw in enumerate(f, 1):
        e = checker.check(lineno, raw, position)
        if e is None:
            continue
        rows.append(e)
        position += 1
        if len(rows) >= 4096:
            insert(rows)
            count += len(rows)
            rows = []
            if progress:
                progress(4096)
    complete = checker.finish(lineno)
    insert(rows)
    count += len(rows)
    if progress:
        progress(len(rows))
    report = ImportReport(
        events=count,
        streams=sorted(checker.heads),
        blobs=len(checker.blobs),
        complete=complete,
        checkpoint=checker.checkpoint,
    )
    return report, checker.blobs, position


async def import_jsonl(
    store: EventStore,
    path: str,
    *,
    progress: Callable[[int], None] | None = None,
) -> ImportReport:
    """Import the JSON Lines file at ``path`` into ``store``; all or nothing.

    Every event is checked (format, hash, and that each stream continues from the
    store's head) before anything is committed. On a store with ``import_lines`` (SQLite,
    PostgreSQL) the whole file is one transaction (other appends wait meanwhile). On
    other stores the file is checked
    in memory first and then appended run by run; a concurrent append there can still
    make a later run fail with :class:`ConcurrencyError` after earlier runs committed.
    """

    def opener() -> BinaryIO:
        try:
            return open(path, "rb")
        except OSError as e:
            raise ImportFormatError(f"{path}: cannot read: {e.strerror}") from e

    f = await trio.to_thread.run_sync(opener)
    try:
        native = getattr(store, "import_lines", None)
        if native is not None:
            report: ImportReport = await native(f, path, progress)
            return report
        heads = {s.stream: (s.length, s.head_hash) for s in await store.streams()}
        checker = ImportChecker(path, lambda s: heads.get(s, (0, GENESIS_HASH)))

        def parse() -> tuple[list[Event], bool]:
            lines = f.readlines()
            events = [e for n, raw in enumerate(lines, 1) if (e := checker.check(n, raw))]
            return events, checker.finish(len(lines))

        events, complete = await trio.to_thread.run_sync(parse)
    finally:
        await trio.to_thread.run_sync(f.close)
    for digest, data in checker.blobs.items():
        if await store.put_blob(data) != digest:  # pragma: no cover - checked above
            raise ImportFormatError(f"{path}: blob {digest} changed while importing")
    i = 0
    while i < len(events):
        j = i
        while j < len(events) and events[j].stream == events[i].stream:
            j += 1
        run = events[i:j]
        new = [NewEvent(type=e.type, body=e.body, recorded_at=e.recorded_at) for e in run]
        await store.append(run[0].stream, new, expected_seq=run[0].seq)
        if progress:
            progress(len(run))
        i = j
    return ImportReport(
        events=len(events),
        streams=sorted(checker.heads),
        blobs=len(checker.blobs),
        complete=complete,
        checkpoint=checker.checkpoint,
    )
