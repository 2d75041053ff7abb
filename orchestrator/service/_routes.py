"""The API's handlers: thin over the library. Each reads the log or records an event;
none keeps anything. Authentication happened before (``_guard``); each handler states
the role it needs."""

from __future__ import annotations

import re
from typing import TypeVar

import msgspec
import trio
from starlette.requests import Request
from starlette.responses import Response

from eventlog import EventStore, Head, closing
from eventlog._catalog import (
    DEFAULT_LIMIT,
)

from .._approvals import RememberError, decide_approval, pending_approvals
from .._display import hidden_path
from .._events import CODEC
from .._fleet import lease_history, queue_session, session_config
from .._forms import FormAnswerError, FormValuesError, answer_form, pending_forms
from .._session import SessionNotFoundError
from .._session_list import status_text
from .._state import SessionState, apply
from .._verdict import verdict
from ..skills import Role
from ._auth import Principal
from ._context import ServiceContext
from ._errors import ApiError
from ._finding import filters_of, find
from ._schemas import (
    ActiveSkillOut,
    ApprovalList,
    DecisionOut,
    DecisionRequest,
    DivergenceOut,
    EventPage,
    ExportOut,
    ExportRequest,
    FaultOut,
    FormAnswerOut,
    FormAnswerRequest,
    Health,
    ReplayOut,
    SessionList,
    SessionView,
    SubmitRequest,
    Submitted,
    TurnOut,
    VerifyOut,
    WhoAmI,
)
from ._sse import EventStreamResponse, event_out, is_end
from ._submission import offered, offered_model, shown_model, tailored

MAX_PAGE = 1000
# A \uD800-\uDBFF escape not followed by a \uDC00-\uDFFF one, or one of those alone
# (after an even run of backslashes: an escaped backslash is not an escape).
_LONE_SURROGATE = re.compile(
    rb"(?<!\\)(?:\\\\)*(\\u[dD][89abAB][0-9a-fA-F]{2}(?!\\u[dD][c-fC-F][0-9a-fA-F]{2})"
    rb"|(?<!\\u[dD][89abAB][0-9a-fA-F]{2})\\u[dD][c-fC-F][0-9a-fA-F]{2})"
)
_SESSION_ID = re.compile(r"[0-9A-Za-z_.-]{1,128}")
_ENCODER = msgspec.json.Encoder()
T = TypeVar("T")


def json(value: object, status: int = 200) -> Response:
    return Response(_ENCODER.encode(value), status, media_type="application/json")


def context(request: Request) -> ServiceContext:
    ctx: ServiceContext = request.app.state.ctx
    return ctx


def require(request: Request, role: Role) -> Principal:
    """The caller, who must hold ``role`` (403 otherwise)."""
    principal: Principal = request.state.principal
    if not principal.may(role):
        raise ApiError(403, f"token {principal.name!r} lacks the {role!r} role for this request")
    return principal


async def body(request: Request, kind: type[T]) -> T:
    """The JSON body decoded strictly as ``kind`` (422 naming the field at fault)."""
    raw = await request.body()
    try:
        return msgspec.json.decode(raw or b"{}", type=kind)
    except msgspec.DecodeError as e:
        lone = _LONE_SURROGATE.search(raw)
        if lone is None:
            raise
        raise ApiError(
            400,
            f"the request body has a lone UTF-16 surrogate {lone.group(1).decode()} at byte "
            f"{lone.start(1)}: JSON text must be Unicode, and half of a surrogate pair is no "
            "character; send both halves of the pair (or the character itself), or remove it",
            "$",
        ) from e


def session_id(request: Request) -> str:
    sid: str = request.path_params["session"]
    if not _SESSION_ID.fullmatch(sid):
        raise ApiError(422, "a session id is 1-128 letters, digits, '_', '.' or '-'", "session")
    return sid


def query_int(request: Request, name: str, default: int, high: int) -> int:
    text = request.query_params.get(name)
    if text is None:
        return default
    if not re.fullmatch(r"\d{1,12}", text) or int(text) > high:
        raise ApiError(422, f"{name} must be an integer from 0 to {high}", f"query.{name}")
    return int(text)


async def fold(request: Request, sid: str) -> SessionState:
    """The session's state, folded from its log (404 when it is not a session)."""
    state = SessionState(sid)
    async with closing(context(request).store.read(sid)) as events:
        async for event in events:
            apply(state, CODEC.decode(event), seq=event.seq, hash=event.hash)
    if state.config is None:
        raise SessionNotFoundError(f"no session {sid!r} in this log")
    return state


async def head_of(store: EventStore, sid: str) -> Head:
    head = await store.head(sid)
    if head is None:
        raise SessionNotFoundError(f"no session {sid!r} in this log")
    return head


async def live(request: Request) -> Response:
    """Liveness for a load balancer or an orchestrator's probe: no token, and nothing
    in the answer but that the server answers."""
    return json(Health(status="ok"))


async def health(request: Request) -> Response:
    require(request, "viewer")
    return json(Health(status="ok"))


async def ready(request: Request) -> Response:
    """Ready when the log answers a read."""
    require(request, "viewer")
    with trio.move_on_after(5):
        await context(request).store.head("readiness-probe")
        return json(Health(status="ready"))
    raise ApiError(503, "the event log did not answer within 5 s")


async def whoami(request: Request) -> Response:
    principal = require(request, "viewer")
    return json(WhoAmI(name=principal.name, roles=sorted(principal.roles)))


async def list_sessions(request: Request) -> Response:
    """A page of sessions from the catalog, most recent first: ``limit`` (50, at most
    1000), ``cursor`` (the previous page's ``next``), ``status`` (repeatable), ``q``
    (text in the task), ``model``, ``submitter``, ``since`` and ``until`` (UTC dates or
    times); see ``_finding``."""
    require(request, "viewer")
    limit = query_int(request, "limit", DEFAULT_LIMIT, MAX_PAGE) or DEFAULT_LIMIT
    rows, following = await find(context(request).store, filters_of(request.query_params), limit)
    page = [msgspec.structs.replace(r, model=shown_model(r.model)) for r in rows]
    return json(SessionList(sessions=page, next=following))


async def submit(request: Request) -> Response:
    """Queue a session (the same as ``skillog submit``); the workers run it."""
    who = require(request, "submitter")
    ctx = context(request)
    req = await body(request, SubmitRequest)
    spec = offered_model(req.model, ctx.models)
    preset = offered(req.policy, tuple(ctx.policies), "policy preset", "$.policy")
    agent = await trio.to_thread.run_sync(ctx.make_agent, spec)
    try:
        agent = tailored(agent, req.skills, ctx.policies[preset])
        session_id = await queue_session(
            ctx.store, agent, req.task, submitter=who.name, policy=preset
        )
    finally:
        agent.close()
    skills = sorted(s.name for s in agent.skills)
    out = Submitted(session_id=session_id, model=shown_model(spec), skills=skills, policy=preset)
    return json(out, 201)


async def get_session(request: Request) -> Response:
    require(request, "viewer")
    sid = session_id(request)
    state = await fold(request, sid)
    config = state.config
    assert config is not None
    store = context(request).store
    view = SessionView(
        session_id=sid,
        status=state.status,
        status_text=status_text(state),
        provider=config.provider,
        model=shown_model(f"{config.provider}:{config.model}").partition(":")[2],
        turn=state.turn,
        seq=state.seq,
        head_hash=state.head_hash,
        active_skills=[
            ActiveSkillOut(name=s.name, hash=s.hash, tier=s.tier, source=s.source)
            for s in state.active
        ],
        catalog=sorted(state.catalog.values(), key=lambda s: s.name),
        pending_approvals=await pending_approvals(store, sid),
        ended_reason=state.ended.reason if state.ended else None,
        input_tokens=state.input_tokens,
        output_tokens=state.output_tokens,
        messages=len(state.messages),
        workers=await lease_history(store, sid),
    )
    return json(view)


async def session_events(request: Request) -> Response:
    """A page of the session's events by seq: ``from_seq`` (0), ``limit`` (100, max
    1000); ``next_seq`` is where the next page starts."""
    require(request, "viewer")
    sid = session_id(request)
    store = context(request).store
    head = await head_of(store, sid)
    start = query_int(request, "from_seq", 0, 2**62)
    limit = query_int(request, "limit", 100, MAX_PAGE)
    hidden = hidden_path(await session_config(store, sid))
    async with closing(store.read(sid, from_seq=start, to_seq=start + limit)) as events:
        page = [event_out(e, hidden) async for e in events]
    next_seq = page[-1].seq + 1 if page else max(start, 0)
    return json(EventPage(session_id=sid, events=page, next_seq=next_seq, head_seq=head.seq))


async def stream_events(request: Request) -> Response:
    """Server-Sent Events: ``id`` is the seq; reconnecting with ``Last-Event-ID`` (or
    ``?from_seq=``) resumes right after it. With ``?previews=1``, streamed answers and
    MCP calls' progress are previewed too, as ``event: delta`` and ``event: progress``
    messages (no ``id``, never recorded: ``_previews``)."""
    require(request, "viewer")
    sid = session_id(request)
    ctx = context(request)
    store = ctx.store
    last = request.headers.get("last-event-id")
    if last is None and request.query_params.get("from_seq", "0") == "0" and ctx.tail.known(sid):
        # A follow from the start of a stream other streams follow now, or that the tail
        # saw begin: it exists and seq 0 is not past its head, so its head decides
        # nothing (a read, a thread hop, saved on most connections when hundreds follow
        # the newest session; the first of them come before any stream follows it).
        start = 0
    else:
        head = await head_of(store, sid)
        if last is not None:
            if not re.fullmatch(r"\d{1,12}", last.strip()):
                raise ApiError(
                    422, "Last-Event-ID must be the seq of an event", "header.last-event-id"
                )
            start = int(last) + 1
        else:
            start = query_int(request, "from_seq", 0, 2**62)
        start = min(start, head.seq + 1)
        if start > head.seq and await _ended(store, sid, head.seq):
            # Nothing will follow: 204 tells an EventSource to stop reconnecting.
            return Response(status_code=204)
    previews = request.query_params.get("previews", "0")
    if previews not in ("0", "1"):
        raise ApiError(
            422, "previews is 1 (send previews of streamed answers) or 0", "query.previews"
        )
    holder = (require(request, "viewer").name, request.state.seen.client)
    return EventStreamResponse(  # type: ignore[return-value]
        store, ctx.tail, sid, start, limits=ctx.stream_limits, holder=holder,
        previews=ctx.previews if previews == "1" else None,
    )  # fmt: skip


async def _ended(store: EventStore, sid: str, last: int) -> bool:
    async with closing(store.read(sid, from_seq=last)) as events:
        return any([is_end(event) async for event in events])


async def list_approvals(request: Request) -> Response:
    require(request, "viewer")
    sid = request.query_params.get("session")
    if sid is not None and not _SESSION_ID.fullmatch(sid):
        raise ApiError(422, "not a session id", "query.session")
    store = context(request).store
    return json(
        ApprovalList(
            approvals=await pending_approvals(store, sid), forms=await pending_forms(store, sid)
        )
    )


def call_id(request: Request) -> str:
    """The path's call id, or a 422."""
    call: str = request.path_params["call"]
    if not _SESSION_ID.fullmatch(call):
        raise ApiError(422, "a call id is 1-128 letters, digits, '_', '.' or '-'", "call")
    return call


async def answer_form_request(request: Request) -> Response:
    """Answer a pending MCP form; ``decided_by`` is the token's name. 409 when the
    form is not pending (never asked, answered, its call over), 422 when the values do
    not fit it."""
    principal = require(request, "approver")
    sid = session_id(request)
    call = call_id(request)
    req = await body(request, FormAnswerRequest)
    if req.action == "decline" and req.values:
        raise ApiError(422, "a declined form takes no values", "values")
    try:
        answer, digest = await answer_form(
            context(request).store,
            sid,
            call,
            action=req.action,
            values=req.values or {},
            decided_by=principal.name,
            index=req.index,
        )
    except FormValuesError as e:
        raise ApiError(422, str(e), "values") from e
    except FormAnswerError as e:
        raise ApiError(409, str(e)) from e
    return json(
        FormAnswerOut(
            session_id=sid,
            call_id=call,
            index=answer.index,
            action=answer.action,
            decided_by=answer.decided_by,
            answer=digest,
        )
    )


async def decide(request: Request) -> Response:
    """Approve or deny a pending request; ``decided_by`` is the token's name. 409 when
    the call is not pending (never requested, decided, expired, lost a race)."""
    principal = require(request, "approver")
    sid = session_id(request)
    call = call_id(request)
    req = await body(request, DecisionRequest)
    try:
        decision = await decide_approval(
            context(request).store,
            sid,
            call,
            approved=request.url.path.endswith("/approve"),
            decided_by=principal.name,
            reason=req.reason,
            remember=req.remember,
        )
    except RememberError as e:
        raise ApiError(422, str(e), "remember") from e
    return json(
        DecisionOut(
            session_id=sid,
            call_id=call,
            approved=decision.approved,
            decided_by=decision.decided_by,
            reason=decision.reason,
        )
    )


async def verify_session(request: Request) -> Response:
    """The verdict on the session (``orchestrator.verdict``, as ``skillog log verify``
    and ``replay`` give it): its chain from the stored bytes, rows of its stream outside
    the chain, the session grammar, the blobs it references."""
    require(request, "viewer")
    sid = session_id(request)
    store = context(request).store
    if await session_config(store, sid) is None:
        raise SessionNotFoundError(f"no session {sid!r} in this log")
    report = await verdict(store, sid)
    faults = [
        FaultOut(kind=f.kind, seq=f.seq, detail=f.detail, rule=f.rule, blob=f.blob)
        for f in report.faults
    ]
    out = VerifyOut(
        session_id=sid,
        ok=report.ok,
        events=report.events,
        fault=faults[0] if faults else None,
        faults=faults,
        blobs=report.blobs,
    )
    return json(out)


async def replay_proof(request: Request) -> Response:
    """Prove every prompt of the session from the log alone (``skillog replay``)."""
    from replay import BrokenLogError, load_recording, replay_session, verify_recording

    require(request, "viewer")
    sid = session_id(request)
    store = context(request).store
    if await session_config(store, sid) is None:
        raise SessionNotFoundError(f"no session {sid!r} in this log")
    try:
        await verify_recording(store, sid)
        report = await replay_session(store, await load_recording(store, sid))
    except BrokenLogError as e:
        return json(
            ReplayOut(session_id=sid, ok=False, events=0, turns=[], divergence=None, broken=str(e))
        )
    turns = [
        TurnOut(turn=t.turn, seq=t.seq, request_hash=t.request_hash,
                rerendered_hash=t.rerendered_hash, ok=t.ok)
        for t in report.turns
    ]  # fmt: skip
    d = report.divergence
    divergence = None if d is None else DivergenceOut(turn=d.turn, seq=d.seq, diff=d.diff)
    out = ReplayOut(
        session_id=sid, ok=report.ok, events=report.events, turns=turns,
        divergence=divergence, broken=None,
    )  # fmt: skip
    return json(out)


async def otel_export(request: Request) -> Response:
    """Send the session's trace to the configured OTLP backend (``skillog otel export``);
    the session must have ended. 409 when no backend is configured or the log does not
    verify, 502 when the backend refuses."""
    from otel import (
        BrokenChainError,
        ExportFailedError,
        ExportOptions,
        SessionNotEndedError,
        export_sessions,
        otlp_exporter,
        traces_url,
    )

    require(request, "admin")
    sid = session_id(request)
    ctx = context(request)
    req = await body(request, ExportRequest)
    if ctx.otel_endpoint is None:
        raise ApiError(409, "no OTLP endpoint configured: start skillog serve --otel-endpoint URL")
    if await session_config(ctx.store, sid) is None:
        raise SessionNotFoundError(f"no session {sid!r} in this log")
    url = traces_url(ctx.otel_endpoint)
    exporter = otlp_exporter(url, timeout_s=5.0)
    options = ExportOptions(content=req.content, retries=1, endpoint=url)
    try:
        report = await export_sessions(ctx.store, exporter, sessions=[sid], options=options)
    except (SessionNotEndedError, BrokenChainError) as e:
        raise ApiError(409, str(e)) from e
    except ExportFailedError as e:
        raise ApiError(502, str(e)) from e
    finally:
        await trio.to_thread.run_sync(exporter.shutdown)
    return json(ExportOut(session_id=sid, endpoint=url, spans=report.spans))
