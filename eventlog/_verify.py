"""Verification of every chain, and of the log against signed checkpoints."""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Collection, Iterable, Sequence
from typing import Any, Protocol

import msgspec

from ._catalog import CatalogRow, Projection, differences, fold_into, fold_store
from ._checkpoint import Checkpoint, check_chain
from ._errors import BlobNotFoundError
from ._hashchain import GENESIS_HASH, MAX_NAME_CHARS, _is_name, is_digest
from ._tombstone import (
    ARCHIVED_TYPE,
    MAINTENANCE_STREAM,
    Tombstone,
    listed_tombstones,
)
from ._types import Event, EventStore, closing

#: Fault kinds, in the words the CLI prints.
KINDS = {
    "modified": "the event's content changed in place (its hash no longer matches)",
    "unlinked": "prev_hash is not the previous event's hash (an event inserted or removed)",
    "moved": "hash and link both wrong: the event was reordered, inserted or renumbered",
    "missing": "a seq is missing (an event was deleted)",
    "duplicate": "a second row at a seq already in the chain (the table's key was removed)",
    "stray": "a row outside every chain (no reader shows it): written around skillog",
    "malformed": "a column has the wrong type or form",
    "truncated": "the stream is shorter than a signed checkpoint says",
    "stream_missing": "a stream in a signed checkpoint is not in the log",
    "rewritten": "the event at a signed head has a different hash (chain rewritten)",
    "checkpoint": "the checkpoint file itself does not verify",
    "blob_modified": "a blob's bytes no longer hash to its digest (changed in place)",
    "blob_missing": "an event references a blob that is missing from the log (deleted)",
    "blob_malformed": "a blob's digest is not 64 lowercase hex characters or its data not a BLOB",
    "grammar": "a sequence of events the writing program cannot produce (``rule`` says which)",
    "catalog": "the catalog (an index of the log) differs from what the log folds to",
    "tombstone": "an archived stream's tombstone disagrees with the log's log.archived events",
}


class Fault(msgspec.Struct, frozen=True, kw_only=True):
    """A problem: where (stream, seq; position for a stray row) and what (``kind``, see
    KINDS)."""

    kind: str
    stream: str | None
    seq: int | None
    detail: str
    blob: str | None = None  # the digest column of a faulty blob, as stored
    position: int | None = None
    rule: str | None = None  # for a ``grammar`` fault: the rule the event breaks

    def __str__(self) -> str:
        if self.blob is not None:
            where = f"blob {self.blob}"
        else:
            where = "checkpoint" if self.stream is None else f"stream {self.stream!r}"
        if self.seq is not None:
            where += f" seq {self.seq}"
        if self.position is not None:
            where += f" position {self.position}"
        kind = self.kind if self.rule is None else f"{self.kind} {self.rule}"
        return f"{where}: {kind}: {self.detail}"


#: Faults listed in a report at most; the rest are only counted (``unlisted``).
MAX_LISTED = 1000


class VerifyReport(msgspec.Struct, frozen=True, kw_only=True):
    """What :func:`verify` checked; ``fault`` is the first problem, or None if intact.

    ``faults`` lists every problem found: the first fault of each broken chain (a chain
    is not checked past its first fault), with a grammar the first violation of each
    stream, each row outside the log, the first bad blob; beyond :data:`MAX_LISTED`
    they are counted in ``unlisted``.
    """

    streams: int
    events: int
    checkpoints: int
    fault: Fault | None
    blobs: int = 0
    faults: tuple[Fault, ...] = ()
    unlisted: int = 0
    tofu_key: str | None = None  # the key trusted on first use, not chosen by the caller

    @property
    def ok(self) -> bool:
        return self.fault is None


Row = tuple[Any, ...]  # (seq, type, recorded_at, body, prev_hash, hash) as stored


class Violation(Protocol):
    """What a grammar reports: the event (``seq``) and the ``rule`` it breaks."""

    @property
    def seq(self) -> int: ...
    @property
    def rule(self) -> str: ...
    @property
    def detail(self) -> str: ...


class StreamGrammar(Protocol):
    """A domain's rules over one stream's events, fed the rows in seq order, batch by
    batch, once the chain check has accepted them; returns the first violation."""

    def feed(self, rows: Sequence[Row]) -> Violation | None: ...


Grammar = Callable[[str], StreamGrammar | None]
"""The hook through which the program that writes a log has verify check what only it
knows: which sequences of events it can produce. Called with each stream id; None
leaves that stream unchecked. The log itself stays generic (it knows no event types);
skillog's runtime plugs in its session grammar (``orchestrator.session_grammar``)."""

BlobReader = Callable[[bytes], Iterable[str]]
References = Callable[[str], BlobReader | None]
"""The hook through which the writing program says which blobs its events reference:
called once per event type (as stored), it returns a function that lists the digests
a body of that type names, or None for a type that names none. Verify then checks
that every referenced blob is stored and hashes to its digest (a deleted blob is a
``blob_missing`` fault). A body the function cannot read is skipped (the grammar
reports it). skillog's runtime plugs in ``orchestrator.blob_references``."""

_UNSEEN = object()


def _malformed(row: Row) -> str | None:
    seq, type_, recorded_at, body, prev_hash, hash_ = row
    if type(seq) is not int or type(recorded_at) is not int:
        return "seq and recorded_at must be integers"
    if not isinstance(body, bytes) or not isinstance(type_, str):
        return "body must be a BLOB and type TEXT"
    if not (is_digest(hash_) and is_digest(prev_hash)):
        return "hash and prev_hash must be 64 lowercase hex characters"
    return None


class CatalogFold:
    """The catalog folded stream by stream from the rows verify checks, so a whole-log
    verify reads the log once. A projection folds each stream's events into fields of
    their own (eventlog/_catalog.py, :class:`Projection`), so this equals the fold in
    commit order when every chain is whole; ``complete`` turns False when one is not
    (its rows after the fault were not read), and the check folds the log again."""

    def __init__(self, projection: Projection) -> None:
        self.projection = projection
        self.rows: dict[str, CatalogRow | None] = {}
        self.complete = True

    def feed(self, stream: str, rows: Sequence[Row]) -> None:
        key = self.projection.key(stream)
        if key is None:
            return
        events = [
            Event(stream=stream, seq=r[0], position=0, type=r[1], recorded_at=r[2], body=r[3],
                  prev_hash=r[4], hash=r[5])
            for r in rows
        ]  # fmt: skip
        self.rows[key] = self.projection.apply(self.rows.get(key), key, events)

    def folded(self) -> dict[str, CatalogRow]:
        return {k: v for k, v in self.rows.items() if v is not None}


class ChainCheck:
    """Checks one stream's rows in seq order, batch by batch (pure, no I/O).

    ``signed`` maps seqs to the hashes a checkpoint signed for them. After the last
    batch, :meth:`finish` reports a stream shorter than a signed head. With a
    ``grammar``, the rows the chain accepted are fed to it too; its first violation is
    ``violation`` (a chain fault stops the chain check, a violation does not). With
    ``references``, the digests the accepted rows reference are collected in
    ``referenced`` (digest -> the first seq naming it). With a ``catalog``, the accepted
    rows are folded into it too (the whole-log verify's catalog check, in the same pass).
    """

    def __init__(
        self,
        stream: str,
        signed: dict[int, str] | None = None,
        grammar: StreamGrammar | None = None,
        references: References | None = None,
        catalog: CatalogFold | None = None,
    ) -> None:
        self.stream = stream
        self.catalog = catalog
        self.signed = signed or {}
        self.grammar = grammar
        self.references = references
        self.referenced: dict[str, int] = {}
        self._readers: dict[str, Any] = {}
        self.count = 0
        self.fault: Fault | None = None
        self.violation: Fault | None = None
        self._prev = GENESIS_HASH
        self._sb = stream.encode()

    def feed(self, rows: list[Row]) -> Fault | None:
        """Check ``rows`` (continuing the previous batch); the first chain fault, if any."""
        start = expected = self.count
        prev, sb, signed = self._prev, self._sb, self.signed
        sha = hashlib.sha256
        for row in rows:
            seq, type_, recorded_at, body, prev_hash, hash_ = row
            try:
                h = sha(
                    b"%s\n%s\n%s\n%d\n%d\n%s"
                    % (prev_hash.encode(), type_.encode(), sb, seq, recorded_at, body)
                ).hexdigest()
            except (TypeError, AttributeError):
                h = ""
            if h != hash_ or prev_hash != prev or seq != expected:
                self.count = expected
                self.fault = self._classify(row, h, prev, expected)
                self._accepted(rows[: expected - start])
                return self.fault
            if signed and seq in signed and signed[seq] != h:
                self.count = expected
                detail = f"checkpoint signed {signed[seq]}, the log has {h}"
                self.fault = Fault(kind="rewritten", stream=self.stream, seq=seq, detail=detail)
                self._accepted(rows[: expected - start])
                return self.fault
            prev = h
            expected += 1
        self.count, self._prev = expected, prev
        self._accepted(rows)
        return None

    def _accepted(self, rows: Sequence[Row]) -> None:
        self._check_grammar(rows)
        if self.references is not None and rows:
            self._collect(rows)
        if self.catalog is not None and rows:
            self.catalog.feed(self.stream, rows)

    def _collect(self, rows: Sequence[Row]) -> None:
        references, readers, referenced = self.references, self._readers, self.referenced
        assert references is not None
        for row in rows:
            read = readers.get(row[1], _UNSEEN)
            if read is _UNSEEN:
                read = readers[row[1]] = references(row[1])
            if read is None:
                continue
            try:
                for digest in read(row[3]):
                    referenced.setdefault(digest, row[0])
            except (msgspec.MsgspecError, TypeError, ValueError):
                continue  # not this check's finding: the grammar names a malformed body

    def _check_grammar(self, rows: Sequence[Row]) -> None:
        if self.grammar is None or self.violation is not None or not rows:
            return
        found = self.grammar.feed(rows)
        if found is not None:
            self.violation = Fault(
                kind="grammar",
                stream=self.stream,
                seq=found.seq,
                rule=found.rule,
                detail=found.detail,
            )

    def _classify(self, row: Row, h: str, prev: str, expected: int) -> Fault:
        bad = _malformed(row)
        if bad:
            return Fault(kind="malformed", stream=self.stream, seq=expected, detail=bad)
        seq, prev_hash, hash_ = row[0], row[4], row[5]
        if seq < expected:
            detail = f"seq {seq} again after seq {expected - 1}"
            return Fault(kind="duplicate", stream=self.stream, seq=seq, detail=detail)
        if seq != expected:
            detail = f"expected seq {expected}, the next stored is {seq}"
            return Fault(kind="missing", stream=self.stream, seq=expected, detail=detail)
        kind = "modified" if prev_hash == prev else "unlinked" if h == hash_ else "moved"
        return Fault(kind=kind, stream=self.stream, seq=seq, detail=KINDS[kind])

    def finish(self) -> Fault | None:
        """After the last row: a stream shorter than a signed head is truncated."""
        if self.fault is None and self.signed and max(self.signed) >= self.count:
            detail = (
                f"a checkpoint signed seq {max(self.signed)}, the log ends before seq {self.count}"
            )
            self.fault = Fault(kind="truncated", stream=self.stream, seq=self.count, detail=detail)
        return self.fault


async def verify_stream(
    store: EventStore,
    stream: str,
    *,
    signed: dict[int, str] | None = None,
    progress: Callable[[int], None] | None = None,
    grammar: Grammar | None = None,
) -> tuple[int, Fault | None]:
    """Check one chain from seq 0, hashing the stored bytes, and with a ``grammar``
    the sequence of its events; (events checked, the chain's fault, else the grammar's).

    ``signed`` maps seqs to the hashes a checkpoint signed for them. A store with a
    ``check_chains(checks, progress)`` method (SQLite, PostgreSQL) runs the check next
    to its rows in a worker thread; others are read event by event.
    """
    check = await _check_stream(store, stream, signed, progress, grammar)
    return check.count, check.fault or check.violation


async def _check_stream(
    store: EventStore,
    stream: str,
    signed: dict[int, str] | None,
    progress: Callable[[int], None] | None,
    grammar: Grammar | None,
) -> ChainCheck:
    rules = grammar(stream) if grammar is not None else None
    (check,) = await _check_streams(store, [ChainCheck(stream, signed, rules)], progress)
    return check


#: Streams checked per call to a store's ``check_chains`` (one worker thread hop).
CHAINS_PER_CALL = 256


async def _check_streams(
    store: EventStore, checks: Sequence[ChainCheck], progress: Callable[[int], None] | None
) -> Sequence[ChainCheck]:
    """Run ``checks`` (each stream's rows fed in seq order), then ``finish`` each. A
    store with ``check_chains(checks, progress)`` (SQLite, PostgreSQL) runs them next
    to its rows in a worker thread; others are read event by event."""
    native = getattr(store, "check_chains", None)
    if native is not None:
        await native(checks, progress)
        for check in checks:
            check.finish()
        return checks
    for check in checks:
        await _read_into(store, check, progress)
        check.finish()
    return checks


async def _read_into(
    store: EventStore, check: ChainCheck, progress: Callable[[int], None] | None
) -> None:
    batch: list[Row] = []
    async with closing(store.read(check.stream)) as events:
        async for e in events:
            batch.append((e.seq, e.type, e.recorded_at, e.body, e.prev_hash, e.hash))
            if len(batch) == 1024:
                if check.feed(batch):
                    return
                if progress is not None:
                    progress(len(batch))
                batch = []
    check.feed(batch)
    if progress is not None:
        progress(len(batch))


def blob_fault(digest: object, data: object) -> Fault | None:
    """The fault of one stored blob: its bytes must hash to its digest (pure)."""
    where = digest if isinstance(digest, str) else repr(digest)
    if not is_digest(digest) or not isinstance(data, bytes):
        kind = "blob_malformed"
        detail = f"digest {where!r} with {type(data).__name__} data: {KINDS[kind]}"
        return Fault(kind=kind, stream=None, seq=None, detail=detail, blob=where)
    actual = hashlib.sha256(data).hexdigest()
    if actual != digest:
        detail = f"its {len(data)} bytes hash to {actual}: {KINDS['blob_modified']}"
        return Fault(kind="blob_modified", stream=None, seq=None, detail=detail, blob=where)
    return None


async def verify_blobs(
    store: EventStore, referenced: dict[str, tuple[str, int]] | None = None
) -> tuple[int, list[Fault]]:
    """Rehash every stored blob and, with ``referenced`` (digest -> the stream and seq
    of the first event naming it; consumed: struck off as stored blobs are read), find
    the referenced ones that are not stored; (blobs checked, the first bad blob's fault,
    then a fault per missing blob)."""
    count = 0
    faults: list[Fault] = []
    unseen = referenced if referenced is not None else {}
    async with closing(store.read_blobs()) as blobs:
        async for digest, data in blobs:
            where = unseen.pop(digest, None) if isinstance(digest, str) else None
            if faults:
                continue
            fault = blob_fault(digest, data)
            if fault is None:
                count += 1
            elif where is None:
                faults.append(fault)
            else:  # name the first event that references it
                faults.append(msgspec.structs.replace(fault, stream=where[0], seq=where[1]))
    faults += [missing_blob(digest, stream, seq) for digest, (stream, seq) in unseen.items()]
    return count, faults


async def verify_referenced(
    store: EventStore, referenced: dict[str, tuple[str, int]]
) -> tuple[int, list[Fault]]:
    """Fetch and rehash the ``referenced`` blobs only (the scope of some streams):
    (blobs intact, a fault per missing or altered one)."""
    count = 0
    faults: list[Fault] = []
    for digest, (stream, seq) in referenced.items():
        try:
            data = await store.get_blob(digest)
        except BlobNotFoundError:
            faults.append(missing_blob(digest, stream, seq))
            continue
        fault = blob_fault(digest, data)
        if fault is None:
            count += 1
        else:
            faults.append(msgspec.structs.replace(fault, stream=stream, seq=seq))
    return count, faults


def missing_blob(digest: str, stream: str, seq: int) -> Fault:
    """The fault of a referenced blob that is not stored (pure)."""
    detail = f"stream {stream!r} references it at that seq: {KINDS['blob_missing']}"
    return Fault(kind="blob_missing", stream=stream, seq=seq, detail=detail, blob=digest)


def stray_fault(position: int, stream: object, seq: object) -> Fault:
    """The fault of a stored row that is not part of the log (pure)."""
    why = []
    if not (type(seq) is int and seq >= 0):
        why.append(f"seq {seq!r} is not an integer >= 0")
    if not _is_name(stream):
        why.append(
            f"stream {stream!r} is not a stream id (text of 1..{MAX_NAME_CHARS} characters "
            "without control characters)"
        )
    return Fault(
        kind="stray",
        stream=stream if isinstance(stream, str) else repr(stream),
        seq=seq if type(seq) is int else None,
        position=position,
        detail=f"{'; '.join(why)}: {KINDS['stray']}",
    )


async def verify_strays(
    store: EventStore, checked: int, stream: str | None = None
) -> tuple[list[Fault], int]:
    """A fault for every row outside the log (of ``stream``; the first
    :data:`MAX_LISTED`, and how many more). Rows are counted first: when every row was
    ``checked`` in a chain there is no stray, and the table is not scanned."""
    listed: list[Fault] = []
    more = 0
    if await store.row_count(stream) == checked:
        return listed, more
    async with closing(store.read_strays(stream)) as strays:
        async for position, name, seq in strays:
            if len(listed) < MAX_LISTED:
                listed.append(stray_fault(position, name, seq))
            else:
                more += 1
    return listed, more


async def catalog_kept(store: EventStore, projection: Projection) -> bool:
    """Whether ``store``'s catalog claims to be current for ``projection`` (built by
    its version and kept since; else there is nothing to check: no reader trusts it,
    and the next read-write open rebuilds it)."""
    built = getattr(store, "catalog_built", None)
    return built is not None and bool(await built(projection.version))


async def verify_catalog(
    store: EventStore, projection: Projection, fold: CatalogFold | None = None
) -> list[Fault]:
    """A ``catalog`` fault for each row that differs from the fold (only for a store
    whose catalog claims to be current: a log without one has nothing to check). With
    a complete ``fold`` (made by verify's chain pass), the log is not read again.

    The fold and the table are read at different moments, so with a writer appending
    meanwhile a row can differ only because one read saw appends the other did not. A
    differing row is therefore read again with its streams in one snapshot
    (:func:`settle`): only a difference that holds there is a finding."""
    if not await catalog_kept(store, projection):
        return []
    stored = await store.read_catalog()  # type: ignore[attr-defined]
    if fold is not None and fold.complete:
        folded = fold.folded()
    else:
        folded = await fold_store(store, projection)
    faults: list[Fault] = []
    for key, difference in differences(stored, folded):
        held = await settle(store, projection, key, difference)
        if held is not None:
            faults.append(
                Fault(kind="catalog", stream=None, seq=None, detail=f"{held}: "
                      f"{KINDS['catalog']}; `skillog log reindex` rebuilds it from the log")
            )  # fmt: skip
    return faults


async def settle(
    store: EventStore, projection: Projection, key: str, difference: str
) -> str | None:
    """Whether the row ``key`` still differs from the fold of its streams when both are
    read in one snapshot (the store's ``catalog_snapshot``); how, or None (they agree:
    the first reads straddled a writer's commit). A store or projection that cannot
    say which streams a row gathers keeps ``difference`` as it was found."""
    snapshot = getattr(store, "catalog_snapshot", None)
    streams_of = getattr(projection, "streams", None)
    if snapshot is None or streams_of is None:
        return difference
    row, events = await snapshot(key, streams_of(key))
    rows: dict[str, CatalogRow | None] = {}
    fold_into(projection, rows, lambda k: None, events)
    folded = {k: v for k, v in rows.items() if v is not None}
    found = differences([] if row is None else [row], folded)
    return found[0][1] if found else None


async def _tombstones(store: EventStore, streams: Collection[str] | None) -> dict[str, Tombstone]:
    read = getattr(store, "tombstones", None)
    if read is None:
        return {}
    found: list[Tombstone] = await read(streams)
    return {t.stream: t for t in found}


def archived_against_signed(stone: Tombstone, signed: dict[int, str]) -> list[Fault]:
    """A signed head of an archived stream holds when the tombstone continues it: the
    same hash at the same seq, or a longer stream (its archive's own signed checkpoint
    covers the events past the tombstone's head: ``replay --archive`` checks them)."""
    last = stone.length - 1
    for seq, h in sorted(signed.items()):
        if seq > last:
            detail = f"signed up to seq {seq} but archived with {stone.length} events (tombstone)"
            return [Fault(kind="truncated", stream=stone.stream, seq=seq, detail=detail)]
        if seq == last and h != stone.head_hash:
            detail = f"signed hash {h[:16]}..., the tombstone says {stone.head_hash[:16]}..."
            return [Fault(kind="rewritten", stream=stone.stream, seq=seq, detail=detail)]
    return []


async def verify_tombstones(
    store: EventStore, stones: dict[str, Tombstone], present: Collection[str]
) -> list[Fault]:
    """The tombstones must be exactly the ones the ``log.archived`` events recorded
    (each names its list by blob digest), and no archived stream may have events."""
    recorded: dict[str, Tombstone] = {}
    faults: list[Fault] = []

    def fault(stream: str | None, seq: int | None, detail: str) -> None:
        faults.append(Fault(kind="tombstone", stream=stream, seq=seq, detail=detail))

    async with closing(store.read(MAINTENANCE_STREAM)) as events:
        async for e in events:
            if e.type != ARCHIVED_TYPE:
                continue
            try:
                listed = await listed_tombstones(store, e)
            except (msgspec.MsgspecError, BlobNotFoundError) as problem:
                fault(e.stream, e.seq, f"its tombstone list cannot be read: {problem}")
                continue
            recorded.update((t.stream, t) for t in listed)
    for name in sorted(set(stones) | set(recorded)):
        have, want = stones.get(name), recorded.get(name)
        if have != want:
            what = "no tombstone" if have is None else f"tombstone {have}"
            fault(name, None, f"{what}, but the log.archived events record {want}")
        elif name in present:
            fault(name, None, "archived (it has a tombstone) but its events are in the log")
    return faults


async def verify(
    store: EventStore,
    *,
    streams: Collection[str] | None = None,
    checkpoints: list[Checkpoint] | None = None,
    keys: Collection[str] = (),
    tofu: bool = False,
    progress: Callable[[int], None] | None = None,
    grammar: Grammar | None = None,
    projection: Projection | None = None,
    references: References | None = None,
) -> VerifyReport:
    """Verify every stream's chain (or only ``streams``) and, with ``checkpoints``, the
    log against them.

    Without checkpoints this detects any in-place change, deletion, insertion or
    reordering inside a chain, and every stored row that is not part of the log (which
    no reader shows; see :class:`EventStore`). With a checkpoint chain signed by one of
    ``keys`` (hex public keys the caller trusts) it also detects tail truncation,
    deleted streams and consistently rewritten chains. ``tofu=True`` trusts the key of
    the first checkpoint instead (trust on first use: the report's ``tofu_key`` says
    so); a checkpoint signed by any other key is a fault.
    Then every blob is rehashed against its digest (events reference blobs by digest,
    so a changed blob is a changed record), and with ``references`` (see
    :data:`References`) every blob an event references must be stored. Chains are
    checked in stream-id order, each up to its first fault; ``progress(n)`` is called
    as events are done. With a ``grammar`` (see :data:`Grammar`) each stream's events
    are also checked against the writing program's rules, up to the first violation (a
    ``grammar`` fault).

    With ``streams`` the same checks are made within that scope, at a cost that
    depends on those streams alone: their chains, their signed heads, the rows stored
    under their ids outside the log, and the blobs their events reference (rehashed);
    ``streams`` in the report counts the ones present. With a ``projection``, the
    whole log's catalog, when the store keeps it current, must equal the log's fold
    (each difference a ``catalog`` fault; ``log reindex`` rebuilds it).
    """
    cps = checkpoints or []
    tofu_key = cps[0].key if cps and tofu else None
    signed: dict[str, dict[int, str]] = {}
    if cps:
        if tofu:
            keys = {cps[0].key}
        problem = check_chain(cps, keys)
        if problem:
            fault = Fault(kind="checkpoint", stream=None, seq=None, detail=problem)
            return VerifyReport(
                streams=0,
                events=0,
                checkpoints=len(cps),
                fault=fault,
                faults=(fault,),
                tofu_key=tofu_key,
            )
        for cp in cps:
            for h in cp.heads:
                if streams is None or h.stream in streams:
                    signed.setdefault(h.stream, {})[h.seq] = h.hash
    if streams is None:
        present = {s.stream for s in await store.streams()}
    else:
        present = {s for s in streams if await store.head(s) is not None}
    stones = await _tombstones(store, None if streams is None else set(streams) | set(signed))
    total = 0
    faults: list[Fault] = []
    strays: list[Fault] = []
    unlisted = 0
    referenced: dict[str, tuple[str, int]] = {}
    fold = None
    if projection is not None and streams is None and await catalog_kept(store, projection):
        fold = CatalogFold(projection)
    names = sorted(present | set(signed))
    for start in range(0, len(names), CHAINS_PER_CALL):
        chunk = names[start : start + CHAINS_PER_CALL]
        checks = {
            stream: ChainCheck(
                stream,
                signed.get(stream),
                grammar(stream) if grammar is not None else None,
                references,
                fold,
            )
            for stream in chunk
            if stream in present
        }
        await _check_streams(store, list(checks.values()), progress)
        for stream in chunk:
            check = checks.get(stream)
            if check is None:
                stone = stones.get(stream)
                if stone is None:
                    detail = f"signed up to seq {max(signed[stream])} but absent from the log"
                    faults.append(
                        Fault(kind="stream_missing", stream=stream, seq=None, detail=detail)
                    )
                else:
                    faults += archived_against_signed(stone, signed[stream])
                continue
            if fold is not None and check.fault is not None:
                fold.complete = False
            total += check.count
            faults += [f for f in (check.fault, check.violation) if f is not None]
            for digest, seq in check.referenced.items():
                referenced.setdefault(digest, (stream, seq))
            if streams is not None:
                listed, more = await verify_strays(store, check.count, stream)
                strays += listed
                unlisted += more
    if streams is None:
        strays, unlisted = await verify_strays(store, total)
        blobs, found = await verify_blobs(store, referenced)
    else:
        blobs, found = await verify_referenced(store, referenced)
    faults += strays + found
    if projection is not None and streams is None:
        faults += await verify_catalog(store, projection, fold)
    if streams is None:
        faults += await verify_tombstones(store, stones, present)
    return VerifyReport(
        streams=len(present),
        events=total,
        checkpoints=len(cps),
        fault=faults[0] if faults else None,
        blobs=blobs,
        faults=tuple(faults[:MAX_LISTED]),
        unlisted=unlisted + max(len(faults) - MAX_LISTED, 0),
        tofu_key=tofu_key,
    )
