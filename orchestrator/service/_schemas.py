"""What the API takes and gives: msgspec structs, strict (unknown fields refused), the
same types the OpenAPI schema is generated from."""

from __future__ import annotations

from typing import Annotated, Any, Literal

import msgspec

from .._approvals import PendingApproval
from .._events import SkillInfo
from .._forms import PendingForm
from .._session_list import SessionRow

Task = Annotated[str, msgspec.Meta(min_length=1, max_length=32_000)]
Reason = Annotated[str, msgspec.Meta(max_length=2_000)]
ModelSpec = Annotated[str, msgspec.Meta(min_length=1, max_length=300)]
SkillName = Annotated[str, msgspec.Meta(min_length=1, max_length=64)]
PresetName = Annotated[str, msgspec.Meta(min_length=1, max_length=100)]
TokenText = Annotated[str, msgspec.Meta(min_length=1, max_length=200)]


class _In(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    pass


class SubmitRequest(_In, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """A task to queue: a session recorded as started with this task; the workers run
    it. ``model`` is one of the server's configured models (default: the first);
    ``skills`` the names of the server's skills the session may see (default: all of
    them; ``[]``: none); ``policy`` one of the server's policy presets (default: the
    first). The catalog and the policy are recorded in the session's start, and every
    worker enforces what was recorded."""

    task: Task
    model: ModelSpec | None = None
    skills: Annotated[list[SkillName], msgspec.Meta(max_length=1000)] | None = None
    policy: PresetName | None = None


Remember = Annotated[str, msgspec.Meta(pattern=r"^(skill|pattern:.+)$", max_length=1_000)]


class DecisionRequest(_In, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """Why (recorded with the decision). ``remember`` (approve only) makes the approval
    stick for the rest of the session: ``skill`` (every call of this skill) or
    ``pattern:RULE`` (one allowed-tools rule that matches this call), recorded as
    ``approval.remembered`` (docs/policy.md)."""

    reason: Reason | None = None
    remember: Remember | None = None


class ExportRequest(_In, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """``content``: include message content in the spans (off by default)."""

    content: bool = False


class LoginRequest(_In, frozen=True, kw_only=True, forbid_unknown_fields=True):
    token: TokenText


TokenName = Annotated[str, msgspec.Meta(min_length=1, max_length=64, pattern=r"^[\w.@-]+$")]
RoleName = Literal["viewer", "approver", "submitter", "admin"]


class TokenRequest(_In, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """A token to create: its name (unique; recorded as who decided) and roles."""

    name: TokenName
    roles: Annotated[list[RoleName], msgspec.Meta(min_length=1, max_length=4)] = msgspec.field(
        default_factory=lambda: ["viewer"]
    )


class _Out(msgspec.Struct, frozen=True, kw_only=True):
    pass


class Submitted(_Out, frozen=True, kw_only=True):
    session_id: str
    model: str
    skills: list[str]
    policy: str


class SessionList(_Out, frozen=True, kw_only=True):
    """A page of sessions, most recent first; ``next`` is the cursor of the next page
    (``?cursor=``), null on the last."""

    sessions: list[SessionRow]
    next: str | None = None


class ActiveSkillOut(_Out, frozen=True, kw_only=True):
    name: str
    hash: str
    tier: str
    source: str


class SessionView(_Out, frozen=True, kw_only=True):
    """One session folded from its log: what the runtime itself decides from."""

    session_id: str
    status: str
    status_text: str
    provider: str
    model: str
    turn: int
    seq: int
    head_hash: str
    active_skills: list[ActiveSkillOut]
    catalog: list[SkillInfo]
    pending_approvals: list[PendingApproval]
    ended_reason: str | None
    input_tokens: int
    output_tokens: int
    messages: int
    workers: list[str]


class EventOut(_Out, frozen=True, kw_only=True):
    """A committed event: the envelope as stored, ``body`` the stored JSON verbatim
    (``verbatim`` true) or, where it names a scripted model's file, with the file's
    name for the server's path to it (``verbatim`` false: hash it from the log)."""

    stream: str
    seq: int
    position: int
    type: str
    recorded_at: int
    prev_hash: str
    hash: str
    body: msgspec.Raw
    verbatim: bool = True


class EventPage(_Out, frozen=True, kw_only=True):
    session_id: str
    events: list[EventOut]
    next_seq: int
    head_seq: int


class ApprovalList(_Out, frozen=True, kw_only=True):
    """The pending approval requests, and the MCP forms waiting for a human
    (``forms``: each with the server's message and flat schema, as the server wrote
    them)."""

    approvals: list[PendingApproval]
    forms: list[PendingForm] = []


class FormAnswerRequest(_In, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """A human's answer to a pending MCP form: ``accept`` with ``values`` (the form's
    fields, checked against its schema) or ``decline``; ``index`` which form of the
    call (default: its first pending one)."""

    action: Literal["accept", "decline"]
    values: Annotated[dict[str, Any], msgspec.Meta(max_length=100)] | None = None
    index: Annotated[int, msgspec.Meta(ge=0)] | None = None


class FormAnswerOut(_Out, frozen=True, kw_only=True):
    """The answer as recorded in ``forms/<session>``: ``answer`` the event's hash, which
    the session's ``mcp.elicitation_answered`` names once the driver takes it."""

    session_id: str
    call_id: str
    index: int
    action: str
    decided_by: str
    answer: str


class DecisionOut(_Out, frozen=True, kw_only=True):
    session_id: str
    call_id: str
    approved: bool
    decided_by: str
    reason: str | None


class FaultOut(_Out, frozen=True, kw_only=True):
    """A fault as ``skillog log verify`` names it; ``rule`` for a ``grammar`` fault,
    ``blob`` (the digest) for a blob's."""

    kind: str
    seq: int | None
    detail: str
    rule: str | None = None
    blob: str | None = None


class VerifyOut(_Out, frozen=True, kw_only=True):
    """The verdict on the session (the one ``skillog log verify`` and ``replay`` give):
    ``fault`` is the first of ``faults``; ``blobs`` the referenced blobs found intact."""

    session_id: str
    ok: bool
    events: int
    fault: FaultOut | None
    faults: list[FaultOut] = msgspec.field(default_factory=list)
    blobs: int = 0


class TurnOut(_Out, frozen=True, kw_only=True):
    turn: int
    seq: int
    request_hash: str
    rerendered_hash: str
    ok: bool


class DivergenceOut(_Out, frozen=True, kw_only=True):
    turn: int
    seq: int
    diff: str


class ReplayOut(_Out, frozen=True, kw_only=True):
    """The replay proof (``skillog replay``): the chain verified, every recorded model
    request re-rendered from the log alone and compared byte for byte. ``broken`` says
    why nothing could be proven (a chain or blob that does not verify)."""

    session_id: str
    ok: bool
    events: int
    turns: list[TurnOut]
    divergence: DivergenceOut | None
    broken: str | None


class ExportOut(_Out, frozen=True, kw_only=True):
    session_id: str
    endpoint: str
    spans: int


class Health(_Out, frozen=True, kw_only=True):
    status: str


class WhoAmI(_Out, frozen=True, kw_only=True):
    name: str
    roles: list[str]


class TokenOut(_Out, frozen=True, kw_only=True):
    name: str
    roles: list[str]


class TokenList(_Out, frozen=True, kw_only=True):
    tokens: list[TokenOut]


class TokenCreated(_Out, frozen=True, kw_only=True):
    """The new token, shown only in this answer (the server keeps its sha256)."""

    name: str
    roles: list[str]
    token: str


class TokenRevoked(_Out, frozen=True, kw_only=True):
    name: str
    revoked: int
    console_sessions_ended: int


class ErrorOut(_Out, frozen=True, kw_only=True):
    error: str
    field: str | None


class CancelRequest(_In, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """Why the session is cancelled (recorded in its ``session.ended``)."""

    reason: Reason = ""


class Cancelled(_Out, frozen=True, kw_only=True):
    session_id: str
    reason: str
    cancelled_by: str


class ForkRequest(_In, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """The seq of the last event the new session copies (0..the head)."""

    at_seq: Annotated[int, msgspec.Meta(ge=0)]


class Forked(_Out, frozen=True, kw_only=True):
    """The new session (queued for the workers, who continue it from ``at_seq``)."""

    session_id: str
    forked_from: str
    at_seq: int


class Resumed(_Out, frozen=True, kw_only=True):
    """Where the session stands: ``queued`` (the workers take it up) with ``status``;
    for a session that ended on a model error, the new session it goes on in
    (``continued_in``, forked right before the failing call; one per failed session)."""

    session_id: str
    status: str
    queued: bool
    continued_in: str | None = None


class BulkItem(_In, frozen=True, kw_only=True, forbid_unknown_fields=True):
    session: Annotated[str, msgspec.Meta(pattern=r"^[0-9A-Za-z_.-]{1,128}$")]
    call: Annotated[str, msgspec.Meta(pattern=r"^[0-9A-Za-z_.-]{1,128}$")]


class BulkDecisionRequest(_In, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """One decision (``approve`` true or false, with ``reason``) for every request in
    ``requests`` (1-200)."""

    approve: bool
    requests: Annotated[list[BulkItem], msgspec.Meta(min_length=1, max_length=200)]
    reason: Reason | None = None


class BulkOutcome(_Out, frozen=True, kw_only=True):
    """One request's outcome: the decision recorded, or why not (``error``)."""

    session_id: str
    call_id: str
    decision: DecisionOut | None = None
    error: str | None = None


class BulkDecisionOut(_Out, frozen=True, kw_only=True):
    decided: int
    outcomes: list[BulkOutcome]


Detail = str | int | bool | None


class TraceRow(_Out, frozen=True, kw_only=True):
    """One step of the session, as the audit report's timeline has it (the same
    function computes both): ``kind``, a one-line ``what`` and the ``details`` (for a
    model call: tokens, cached tokens read and written, ``cost_micro_usd`` at the
    budget's prices or null)."""

    seq: int
    turn: int
    time: str
    kind: str
    what: str
    details: dict[str, Detail]


class PromptDiff(_Out, frozen=True, kw_only=True):
    """A recorded request's tail against the previous request's (a unified diff; empty
    when they are the same), as the audit report shows it."""

    seq: int
    turn: int
    new_messages: int
    size: int
    diff: str


class ScriptOutput(_Out, frozen=True, kw_only=True):
    """What a script printed (from its output blobs, the first ``OUTPUT_SHOWN`` bytes of
    each, decoded as UTF-8 with replacement)."""

    seq: int
    call_id: str | None
    stdout: str
    stderr: str
    truncated: bool


class TraceOut(_Out, frozen=True, kw_only=True):
    session_id: str
    rows: list[TraceRow]
    prompts: list[PromptDiff]
    outputs: list[ScriptOutput]
