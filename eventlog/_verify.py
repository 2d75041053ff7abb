"""Verification of every chain, and of the log against signed checkpoints."""

from __future__ import annotations

import hashlib
from collections.abc import Callable

import msgspec

from ._checkpoint import Checkpoint, check_chain
from ._hashchain import GENESIS_HASH, is_digest
from ._types import Event, EventStore, closing

#: Fault kinds, in the words the CLI prints.
KINDS = {
    "modified": "the event's content changed in place (its hash no longer matches)",
    "unlinked": "prev_hash is not the previous event's hash (an event inserted or removed)",
    "moved": "hash and link both wrong: the event was reordered, inserted or renumbered",
    "missing": "a seq is missing (an event was deleted)",
    "malformed": "a column has the wrong type or form",
    "truncated": "the stream is shorter than a signed checkpoint says",
    "stream_missing": "a stream in a signed checkpoint is not in the log",
    "rewritten": "the event at a signed head has a different hash (chain rewritten)",
    "checkpoint": "the checkpoint file itself does not verify",
}


class Fault(msgspec.Struct, frozen=True, kw_only=True):
    """The first problem found: where (stream, seq) and what (``kind``, see KINDS)."""

    kind: str
    stream: str | None
    seq: int | None
    detail: str

    def __str__(self) -> str:
        where = "checkpoint" if self.stream is None else f"stream {self.stream!r}"
        if self.seq is not None:
            where += f" seq {self.seq}"
        return f"{where}: {self.kind}: {self.detail}"


class VerifyReport(msgspec.Struct, frozen=True, kw_only=True):
    """What :func:`verify` checked; ``fault`` is the first problem, or None if intact."""

    streams: int
    events: int
    checkpoints: int
    fault: Fault | None

    @property
    def ok(self) -> bool:
        return self.fault is None


def _malformed(e: Event) -> str | None:
    if type(e.seq) is not int or type(e.recorded_at) is not int:
        return "seq and recorded_at must be integers"
    if not isinstance(e.body, bytes) or not isinstance(e.type, str):
        return "body must be a BLOB and type TEXT"
    if not (is_digest(e.hash) and is_digest(e.prev_hash)):
        return "hash and prev_hash must be 64 lowercase hex characters"
    return None


async def verify_stream(
    store: EventStore,
    stream: str,
    *,
    signed: dict[int, str] | None = None,
    progress: Callable[[int], None] | None = None,
) -> tuple[int, Fault | None]:
    """Check one chain from seq 0, hashing the stored bytes; (events checked, fault).

    ``signed`` maps seqs to the hashes a checkpoint signed for them.
    """
    signed = signed or {}
    expected, prev, count = 0, GENESIS_HASH, 0
    sb = stream.encode()
    sha = hashlib.sha256
    async with closing(store.read(stream)) as events:
        async for e in events:
            try:
                h = sha(
                    b"%s\n%s\n%s\n%d\n%d\n%s"
                    % (e.prev_hash.encode(), e.type.encode(), sb, e.seq, e.recorded_at, e.body)
                ).hexdigest()
            except (TypeError, AttributeError):
                h = ""
            if h != e.hash or e.prev_hash != prev or e.seq != expected:
                bad = _malformed(e)
                if bad:
                    return count, Fault(kind="malformed", stream=stream, seq=expected, detail=bad)
                if e.seq != expected:
                    detail = f"expected seq {expected}, the next stored is {e.seq}"
                    return count, Fault(kind="missing", stream=stream, seq=expected, detail=detail)
                kind = "modified" if e.prev_hash == prev else "unlinked" if h == e.hash else "moved"
                return count, Fault(kind=kind, stream=stream, seq=e.seq, detail=KINDS[kind])
            if e.seq in signed and signed[e.seq] != h:
                detail = f"checkpoint signed {signed[e.seq]}, the log has {h}"
                return count, Fault(kind="rewritten", stream=stream, seq=e.seq, detail=detail)
            prev, expected = h, expected + 1
            count += 1
            if progress is not None and count % 4096 == 0:
                progress(4096)
    if progress is not None:
        progress(count % 4096)
    if signed and max(signed) >= expected:
        detail = f"a checkpoint signed seq {max(signed)}, the log ends before seq {expected}"
        return count, Fault(kind="truncated", stream=stream, seq=expected, detail=detail)
    return count, None


async def verify(
    store: EventStore,
    *,
    checkpoints: list[Checkpoint] | None = None,
    public_key: str | None = None,
    progress: Callable[[int], None] | None = None,
) -> VerifyReport:
    """Verify every stream's chain and, with ``checkpoints``, the log against them.

    Without checkpoints this detects any in-place change, deletion, insertion or
    reordering inside a chain. With a checkpoint chain (whose signatures are checked
    against ``public_key`` if given, else the key in the first checkpoint) it also
    detects tail truncation, deleted streams and consistently rewritten chains. It stops
    at the first fault, in stream-id order; ``progress(n)`` is called as events are done.
    """
    cps = checkpoints or []
    signed: dict[str, dict[int, str]] = {}
    if cps:
        problem = check_chain(cps, public_key)
        if problem:
            fault = Fault(kind="checkpoint", stream=None, seq=None, detail=problem)
            return VerifyReport(streams=0, events=0, checkpoints=len(cps), fault=fault)
        for cp in cps:
            for h in cp.heads:
                signed.setdefault(h.stream, {})[h.seq] = h.hash
    present = {s.stream for s in await store.streams()}
    total = 0
    for stream in sorted(present | set(signed)):
        if stream not in present:
            detail = f"signed up to seq {max(signed[stream])} but absent from the log"
            fault = Fault(kind="stream_missing", stream=stream, seq=None, detail=detail)
            return VerifyReport(
                streams=len(present), events=total, checkpoints=len(cps), fault=fault
            )
        n, found = await verify_stream(store, stream, signed=signed.get(stream), progress=progress)
        total += n
        if found:
            return VerifyReport(
                streams=len(present), events=total, checkpoints=len(cps), fault=found
            )
    return VerifyReport(streams=len(present), events=total, checkpoints=len(cps), fault=None)
