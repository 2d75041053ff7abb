"""The verdict on a log or one session: the one function every reader asks.

``skillog log verify``, ``log checkpoint``, ``replay`` (text, ``--json``, ``--html``),
the service's verify and replay endpoints, its console audit page and the
OpenTelemetry export all decide whether a log is intact with :func:`verdict`, so no
two of them can disagree about the same file (DESIGN.md, invariant 8). It is
eventlog's :func:`~eventlog.verify` with what only the runtime knows plugged in: the
session grammar (which sequences of events it writes) and :func:`blob_references`
(which blobs its events name, so a deleted blob is a fault, not a surprise at replay).

The references are read with structs of the digest fields alone, built once per event
type: collecting them costs a dict lookup per event and one small decode per event
that names a blob.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable, Sequence
from typing import Any

import msgspec

from eventlog import (
    BlobReader,
    Checkpoint,
    EventStore,
    Fault,
    StreamGrammar,
    VerifyReport,
    split_type,
    verify,
)

from ._catalog import SESSIONS
from ._events import CODEC, McpElicitationAnswered, McpFormAnswered
from ._forms import check_answer_refs
from ._grammar import GrammarCheck, Violation, session_grammar
from ._streams import forms_stream, is_session_stream


class _Prompt(msgspec.Struct):
    new_message_digests: list[str]
    tail_digest: str


class _File(msgspec.Struct):
    sha256: str


class _Activated(msgspec.Struct):
    body_digest: str
    files: list[_File]


class _Digest(msgspec.Struct):
    digest: str


class _Params(msgspec.Struct):
    params: str


class _McpResult(msgspec.Struct):
    digest: str
    notes: str | None = None


class _Images(msgspec.Struct):
    images: list[_Digest]


class _SummaryRequested(msgspec.Struct):
    request_hash: str


class _Interrupted(msgspec.Struct):
    text_digest: str = ""


class _Compacted(msgspec.Struct):
    summary_digest: str = ""


class _Script(msgspec.Struct):
    stdout_digest: str
    stderr_digest: str


def _prompt(decode: Callable[[bytes], _Prompt]) -> BlobReader:
    def read(body: bytes) -> Iterable[str]:
        p = decode(body)
        return [*p.new_message_digests, p.tail_digest]

    return read


def _activated(decode: Callable[[bytes], _Activated]) -> BlobReader:
    def read(body: bytes) -> Iterable[str]:
        a = decode(body)
        return [a.body_digest, *(f.sha256 for f in a.files)]

    return read


def _digest(decode: Callable[[bytes], _Digest]) -> BlobReader:
    return lambda body: (decode(body).digest,)


def _params(decode: Callable[[bytes], _Params]) -> BlobReader:
    return lambda body: (decode(body).params,)


def _mcp_result(decode: Callable[[bytes], _McpResult]) -> BlobReader:
    def read(body: bytes) -> Iterable[str]:
        r = decode(body)
        return (r.digest,) if r.notes is None else (r.digest, r.notes)

    return read


def _images(decode: Callable[[bytes], _Images]) -> BlobReader:
    return lambda body: [i.digest for i in decode(body).images]


def _script(decode: Callable[[bytes], _Script]) -> BlobReader:
    def read(body: bytes) -> Iterable[str]:
        s = decode(body)
        return (s.stdout_digest, s.stderr_digest)

    return read


def _summary_requested(decode: Callable[[bytes], _SummaryRequested]) -> BlobReader:
    return lambda body: (decode(body).request_hash,)


def _compacted(decode: Callable[[bytes], _Compacted]) -> BlobReader:
    def read(body: bytes) -> Iterable[str]:
        digest = decode(body).summary_digest
        return (digest,) if digest else ()

    return read


def _interrupted(decode: Callable[[bytes], _Interrupted]) -> BlobReader:
    def read(body: bytes) -> Iterable[str]:
        digest = decode(body).text_digest
        return (digest,) if digest else ()

    return read


def _reader(cls: type[Any], wrap: Callable[[Any], BlobReader]) -> BlobReader:
    return wrap(msgspec.json.Decoder(cls).decode)


#: The event types that name blobs, by tag, and how to read the digests they name.
BLOB_FIELDS: dict[str, BlobReader] = {
    "prompt.rendered": _reader(_Prompt, _prompt),
    "skill.activated": _reader(_Activated, _activated),
    "resource.read": _reader(_Digest, _digest),
    "mcp.result": _reader(_McpResult, _mcp_result),
    "mcp.sampled": _reader(_Params, _params),
    "mcp.elicited": _reader(_Params, _params),
    "tool.images": _reader(_Images, _images),
    "script.executed": _reader(_Script, _script),
    "context.summary_requested": _reader(_SummaryRequested, _summary_requested),
    "context.compacted": _reader(_Compacted, _compacted),
    "model.interrupted": _reader(_Interrupted, _interrupted),
}


def blob_references(type_: str) -> BlobReader | None:
    """The hook :func:`eventlog.verify` takes as ``references``: for an event type (a
    versioned ``tag@N`` too), the function listing the blob digests its body names."""
    return BLOB_FIELDS.get(split_type(type_)[0] if "@" in type_ else type_)


async def verdict(
    store: EventStore,
    session: str | None = None,
    *,
    checkpoints: list[Checkpoint] | None = None,
    keys: Collection[str] = (),
    tofu: bool = False,
    progress: Callable[[int], None] | None = None,
) -> VerifyReport:
    """Whether the log (or one ``session``) is intact, and every fault if not.

    The whole log: every chain, every row outside the log, every blob rehashed, every
    blob an event references present, the session grammar, the session catalog equal
    to the log's fold (when the store keeps one), and with ``checkpoints``
    (signed by one of ``keys``, or the file's own key with ``tofu``) the signed heads.
    One session: the same checks within its scope (its chain, its rows outside the
    chain, its signed head, the blobs it references), at a cost that depends on that
    session alone. Every reader shows this report; none decides on its own.
    """
    named: list[tuple[str, int, McpElicitationAnswered]] = []

    def grammar(stream: str) -> StreamGrammar:
        rules = session_grammar(stream)
        return _FormRefs(rules, named) if is_session_stream(stream) else rules

    report = await verify(
        store,
        streams=None if session is None else (session,),
        checkpoints=checkpoints,
        keys=keys,
        tofu=tofu,
        progress=progress,
        grammar=grammar,
        references=blob_references,
        projection=SESSIONS,
    )
    faults = await _form_answer_faults(store, named)
    if not faults:
        return report
    return msgspec.structs.replace(
        report, fault=report.fault or faults[0], faults=(*report.faults, *faults)
    )


ANSWERED_TAG = "mcp.elicitation_answered"
_ANSWERED = msgspec.json.Decoder(McpElicitationAnswered).decode


class _FormRefs:
    """A session's grammar that also collects the ``mcp.elicitation_answered`` events
    naming a human's answer in ``forms/<session>`` (checked once the chains are)."""

    def __init__(
        self, rules: GrammarCheck, named: list[tuple[str, int, McpElicitationAnswered]]
    ) -> None:
        self.rules, self.named = rules, named

    def feed(self, rows: Sequence[Any]) -> Violation | None:
        for row in rows:
            if row[1] == ANSWERED_TAG:
                try:
                    body = _ANSWERED(row[3])
                except (msgspec.DecodeError, msgspec.ValidationError):
                    continue  # the grammar names a malformed body
                if body.answer:
                    self.named.append((self.rules.stream, row[0], body))
        return self.rules.feed(rows)


async def _form_answer_faults(
    store: EventStore, named: list[tuple[str, int, McpElicitationAnswered]]
) -> list[Fault]:
    """A fault per recorded answer whose ``mcp.form_answered`` is missing or differs."""
    faults = []
    answers: dict[str, dict[str, McpFormAnswered]] = {}
    for stream, seq, answered in named:
        if stream not in answers:
            answers[stream] = {}
            async for event in store.read(forms_stream(stream)):
                body = CODEC.decode(event)
                if isinstance(body, McpFormAnswered):
                    answers[stream][event.hash] = body
        problem = check_answer_refs(answered, answers[stream].get(answered.answer))
        if problem is not None:
            detail = f"mcp.elicitation_answered (call {answered.call_id}): {problem}"
            faults.append(
                Fault(kind="grammar", stream=stream, seq=seq, detail=detail, rule="form_answer")
            )
    return faults
