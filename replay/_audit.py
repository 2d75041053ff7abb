"""The audit of one session: every check replay can make, and what the page shows.

:func:`audit_session` asks for the verdict every reader shows (``orchestrator.verdict``:
the chain, rows outside it, the grammar, the blobs, the checkpoint when given), then
makes replay's own checks (a fork's link to its parent, the prompt proof), and keeps
each outcome as a named :class:`Check` row instead of stopping at the first failure,
and the verdict's faults as they are, so a report can show
a tampered log *and* say what is wrong with it. The timeline and the recorded prompts
come from the same recording the checks ran on: what the report shows is what was
checked. The HTML rendering is :mod:`replay._html`.
"""

from __future__ import annotations

import os
from collections.abc import Collection, Sequence

import msgspec

from eventlog import EventStore, Fault, VerifyReport, read_checkpoints
from orchestrator import PromptRendered, SessionEnded, SessionStarted, verdict

from ._errors import BrokenLogError
from ._fork import check_fork_link
from ._prove import ReplayReport, replay_session
from ._recording import Recording, load_recording
from ._redrive import redrive
from ._request import STEP, RecordedRequests, request_diff
from ._reuse import PrefixReuse, prefix_reuse
from ._skills import Drift, drift
from ._timeline import TimelineEntry, timeline


class Check(msgspec.Struct, frozen=True):
    """One row of the verdict. ``ok`` is None when the check could not run (``details``
    says why); the verdict holds when no row is False."""

    name: str
    ok: bool | None
    details: str

    @property
    def mark(self) -> str:
        """✓ passed, ✗ failed, – not checked."""
        return "✓" if self.ok else "–" if self.ok is None else "✗"


class RecordedPrompt(msgspec.Struct, frozen=True, kw_only=True):
    """One recorded request, stored as a delta: its bytes are
    ``lines[start:start + message_count]`` of :class:`Audit` followed by ``tails[tail]``
    (``start`` moves on after a compaction rewrote the history). ``tail_diff`` is the
    diff of its tail against the previous request's, labelled so (``STEP``; empty when
    the tail is the same); ``proven`` says whether the current composer re-rendered it
    byte for byte (None: not checked)."""

    turn: int
    seq: int
    request_hash: str
    message_count: int
    new_messages: int
    start: int = 0
    tail: int
    size: int
    tail_diff: str
    proven: bool | None


class Audit(msgspec.Struct, frozen=True, kw_only=True):
    """Everything the audit report shows: the verdict first, then the session."""

    session: str
    checks: list[Check]
    events: int
    entries: list[TimelineEntry]
    prompts: list[RecordedPrompt]
    lines: list[str]
    tails: list[str]
    divergence: str | None
    drift: list[Drift] | None
    summary: dict[str, str | int]
    faults: list[Fault] = msgspec.field(default_factory=list)
    reuse: PrefixReuse | None = None

    @property
    def ok(self) -> bool:
        return all(c.ok is not False for c in self.checks)


async def audit_session(
    store: EventStore,
    session: str,
    *,
    checkpoint: str | os.PathLike[str] | None = None,
    keys: Collection[str] = (),
    tofu: bool = False,
    against_disk: Sequence[str | os.PathLike[str]] | None = None,
    redrive: bool = False,
) -> Audit:
    """Audit ``session`` (with ``redrive``, also re-drive it with the current code).
    Raises :class:`BrokenLogError` only when there is nothing to
    report on (no such session, or events that do not decode); every other failure is
    a failed :class:`Check`."""
    cps = None if checkpoint is None else read_checkpoints(checkpoint)
    found = await verdict(store, session, checkpoints=cps, keys=keys, tofu=tofu)
    recording = await load_recording(store, session)
    checks = verdict_checks(found, checkpoint)
    link = await check_fork_link(store, recording)
    if link is not None:
        checks.append(Check("fork", link.ok, link.detail))
    recorded = RecordedRequests()
    report, failure = await _prove(store, recording, recorded)
    checks += _proof_checks(report, failure)
    if redrive:
        checks.append(await _redrive(store, recording, report))
    lines, tails, prompts = _prompts(recording, recorded, report)
    entries = timeline(recording)
    return Audit(
        session=session,
        checks=checks,
        events=len(recording),
        entries=entries,
        prompts=prompts,
        lines=lines,
        tails=tails,
        divergence=report.divergence.diff if report and report.divergence else None,
        drift=await drift(recording, against_disk) if against_disk else None,
        summary=summary(recording, entries),
        faults=list(found.faults),
        reuse=prefix_reuse(recording, recorded),
    )


#: The verdict's fault kinds by the row of the report that shows them.
_ROWS = {
    "grammar": ("grammar",),
    "blobs": ("blob_modified", "blob_malformed", "blob_missing"),
    "checkpoint": ("checkpoint", "truncated", "stream_missing", "rewritten"),
}


def verdict_checks(
    report: VerifyReport, checkpoint: str | os.PathLike[str] | None = None
) -> list[Check]:
    """The verdict (:func:`orchestrator.verdict`) as rows: ``chain`` (every chain and
    stray-row fault), ``grammar``, ``blobs`` and, with a ``checkpoint``, ``checkpoint``.
    A row fails exactly when the verdict has a fault of its kinds."""
    by_row: dict[str, list[Fault]] = {"chain": [], "grammar": [], "blobs": [], "checkpoint": []}
    for fault in report.faults:
        row = next((r for r, kinds in _ROWS.items() if fault.kind in kinds), "chain")
        by_row[row].append(fault)

    def failed(name: str) -> Check:
        found = by_row[name]
        return Check(name, False, "; ".join(str(f) for f in found))

    chain = Check(
        "chain",
        True,
        f"{report.events} events re-hashed from their stored bytes, seq 0 on; no row of "
        "the session's stream outside its chain",
    )
    if by_row["chain"]:
        chain = failed("chain")
    grammar = Check(
        "grammar", True, "every event is one the runtime can write at that point (RULES)"
    )
    if by_row["grammar"]:
        grammar = failed("grammar")
    elif by_row["chain"]:
        grammar = Check("grammar", None, "not checked past the broken chain")
    blobs = Check(
        "blobs",
        True,
        f"every blob the session's events reference ({report.blobs}: skill snapshots, "
        "script outputs, recorded requests) is in the log and matches its sha256",
    )
    if by_row["blobs"]:
        blobs = failed("blobs")
    checks = [chain, grammar, blobs]
    if checkpoint is not None:
        if by_row["checkpoint"]:
            checks.append(failed("checkpoint"))
        else:
            trust = (
                f"signed by {report.tofu_key}, trusted on first use (no trusted key was given)"
                if report.tofu_key
                else "signed by a trusted key"
            )
            where = os.fspath(checkpoint)
            checks.append(
                Check(
                    "checkpoint", True, f"the session matches the signed heads of {where}, {trust}"
                )
            )
    return checks


async def _prove(
    store: EventStore, recording: Recording, recorded: RecordedRequests
) -> tuple[ReplayReport | None, BrokenLogError | None]:
    try:
        return await replay_session(store, recording, recorded=recorded), None
    except BrokenLogError as e:
        return None, e


def _proof_checks(report: ReplayReport | None, failure: BrokenLogError | None) -> list[Check]:
    if report is None:
        assert failure is not None
        return [Check("prompts", False, str(failure))]
    proven = sum(t.ok for t in report.turns)
    details = (
        f"{proven} of {len(report.turns)} requests re-rendered from the log byte for byte "
        f"({report.request_bytes:,} bytes)"
    )
    if report.divergence is not None:
        d = report.divergence
        details += f"; first divergence at turn {d.turn} (seq {d.seq})"
    return [Check("prompts", report.ok, details)]


async def _redrive(store: EventStore, recording: Recording, report: ReplayReport | None) -> Check:
    if report is None:
        return Check("redrive", None, "not run: the prompt proof could not complete")
    result = await redrive(store, recording)
    if result.divergence is not None:
        return Check("redrive", False, str(result.divergence))
    note = "" if result.complete else " (the recording never ended; compared up to its end)"
    return Check("redrive", True, f"the current code reproduces all {result.compared} events{note}")


def _prompts(
    recording: Recording, recorded: RecordedRequests, report: ReplayReport | None
) -> tuple[list[str], list[str], list[RecordedPrompt]]:
    """The recorded requests as deltas: each message line once, each distinct tail
    once, so the page grows with the bytes the session added, not with the sum of its
    requests. Only the requests the proof read (and checked) are shown."""
    proven = {t.seq: t.ok for t in report.turns} if report is not None else {}
    tail_index = {digest: i for i, digest in enumerate(recorded.tails)}
    prompts: list[RecordedPrompt] = []
    previous = b""
    before = history = start = 0
    read = iter(recorded.starts)
    for event, body in zip(recording.events, recording.bodies, strict=True):
        if not isinstance(body, PromptRendered):
            continue
        tail = recorded.tails.get(body.tail_digest)
        at = next(read, None)
        if tail is None or at is None:
            break  # the proof stopped before this request (the checks say why)
        if at != start:  # a compaction rewrote the history: counted again from here
            start, before, history = at, 0, 0
        lines = recorded.lines[start + before : start + body.message_count]
        history += sum(len(line) for line in lines)
        prompts.append(
            RecordedPrompt(
                turn=body.turn,
                seq=event.seq,
                request_hash=body.request_hash,
                message_count=body.message_count,
                start=start,
                new_messages=body.message_count - before,
                tail=tail_index[body.tail_digest],
                size=history + len(tail),
                tail_diff="" if tail == previous else request_diff(previous, tail, labels=STEP),
                proven=proven.get(event.seq),
            )
        )
        previous, before = tail, body.message_count
    text = [line.decode("utf-8", "replace") for line in recorded.lines]
    return text, [t.decode("utf-8", "replace") for t in recorded.tails.values()], prompts


def summary(recording: Recording, entries: Sequence[TimelineEntry]) -> dict[str, str | int]:
    """Who ran the session, on what, how far it got and what it cost (from the log)."""
    out: dict[str, str | int] = {}
    for body in recording.bodies:
        if isinstance(body, SessionStarted):
            out |= {"agent": body.agent, "model": f"{body.provider}:{body.model}"}
        elif isinstance(body, SessionEnded):
            out["ended"] = f"{body.reason} after {body.turns} turns"
    out.setdefault("ended", "not ended (open or suspended)")
    counted = {"prompt": "model requests", "tool": "tool calls", "denial": "policy denials"}
    counted |= {"approval?": "approvals asked", "script": "scripts", "activation": "activations"}
    for name in counted.values():
        out[name] = 0
    tokens = [0, 0]
    for e in entries:
        if e.kind in counted:
            out[counted[e.kind]] = int(out[counted[e.kind]]) + 1
        elif e.kind == "model":
            tokens[0] += int(e.details.get("input_tokens") or 0)
            tokens[1] += int(e.details.get("output_tokens") or 0)
    out["tokens in / out"] = f"{tokens[0]:,} / {tokens[1]:,}"
    return out
