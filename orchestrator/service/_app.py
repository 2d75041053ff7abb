"""The ASGI application: the route table (which is also the OpenAPI document), the one
exception handler, the guard. ``create_app(ctx)`` is all a server needs."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from importlib.metadata import PackageNotFoundError, version

import msgspec
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Route

from eventlog import SkillogError

from . import _actions as actions
from . import _console as console
from . import _console_list as listing
from . import _routes as api
from . import _token_admin as tokens
from . import _trace as trace
from ._context import ServiceContext
from ._errors import ApiError, handle
from ._guard import Guard
from ._openapi import Operation, openapi
from ._schemas import (
    ApprovalList,
    BulkDecisionOut,
    BulkDecisionRequest,
    Cancelled,
    CancelRequest,
    DecisionOut,
    DecisionRequest,
    EventPage,
    ExportOut,
    ExportRequest,
    Forked,
    ForkRequest,
    FormAnswerOut,
    FormAnswerRequest,
    Health,
    LoginRequest,
    ReplayOut,
    Resumed,
    SessionList,
    SessionView,
    SubmitRequest,
    Submitted,
    TokenCreated,
    TokenList,
    TokenRequest,
    TokenRevoked,
    TraceOut,
    VerifyOut,
    WhoAmI,
)

Handler = Callable[[Request], Awaitable[Response]]
S = "/api/sessions/{session}"
API: list[tuple[Operation, Handler]] = [
    (
        Operation(
            "GET", "/api/live", "liveness: the server answers (no token)", None, response=Health
        ),
        api.live,
    ),
    (
        Operation("GET", "/api/health", "the caller's view of liveness", "viewer", response=Health),
        api.health,
    ),
    (
        Operation("GET", "/api/ready", "readiness: the log answers", "viewer", response=Health),
        api.ready,
    ),
    (
        Operation(
            "GET", "/api/whoami", "the caller's token name and roles", "viewer", response=WhoAmI
        ),
        api.whoami,
    ),
    (
        Operation(
            "GET", "/api/sessions", "sessions, most recent first", "viewer", response=SessionList
        ),
        api.list_sessions,
    ),
    (
        Operation(
            "POST",
            "/api/sessions",
            "queue a task as a new session",
            "submitter",
            SubmitRequest,
            Submitted,
            201,
        ),
        api.submit,
    ),
    (
        Operation("GET", S, "one session, folded from its log", "viewer", response=SessionView),
        api.get_session,
    ),
    (
        Operation(
            "GET",
            S + "/events",
            "a page of events by seq (?from_seq=&limit=)",
            "viewer",
            response=EventPage,
        ),
        api.session_events,
    ),
    (
        Operation(
            "GET",
            S + "/stream",
            "live events (SSE; id = seq; Last-Event-ID resumes)",
            "viewer",
            media="text/event-stream",
        ),
        api.stream_events,
    ),
    (
        Operation(
            "GET",
            S + "/trace",
            "the session as a trace: the audit timeline's rows, prompt diffs, script output",
            "viewer",
            response=TraceOut,
        ),
        trace.trace,
    ),
    (
        Operation(
            "GET", S + "/verify", "verify the session's hash chain", "viewer", response=VerifyOut
        ),
        api.verify_session,
    ),
    (
        Operation(
            "GET",
            S + "/replay",
            "prove every prompt from the log alone (skillog replay)",
            "viewer",
            response=ReplayOut,
        ),
        api.replay_proof,
    ),
    (
        Operation(
            "POST",
            S + "/otel-export",
            "send the ended session's trace to the configured OTLP backend",
            "admin",
            ExportRequest,
            ExportOut,
        ),
        api.otel_export,
    ),
    (
        Operation(
            "GET",
            "/api/approvals",
            "pending approval requests and MCP forms (?session=)",
            "viewer",
            response=ApprovalList,
        ),
        api.list_approvals,
    ),
    (
        Operation(
            "POST",
            S + "/approvals/{call}/approve",
            "approve a pending request",
            "approver",
            DecisionRequest,
            DecisionOut,
        ),
        api.decide,
    ),
    (
        Operation(
            "POST",
            S + "/approvals/{call}/deny",
            "deny a pending request",
            "approver",
            DecisionRequest,
            DecisionOut,
        ),
        api.decide,
    ),
    (
        Operation(
            "POST",
            S + "/forms/{call}/answer",
            "answer a pending MCP form (accept with values, or decline)",
            "approver",
            FormAnswerRequest,
            FormAnswerOut,
        ),
        api.answer_form_request,
    ),
    (
        Operation(
            "POST",
            S + "/cancel",
            "cancel the session (recorded; open calls resolved by effect class)",
            "submitter",
            CancelRequest,
            Cancelled,
        ),
        actions.cancel,
    ),
    (
        Operation(
            "POST",
            S + "/resume",
            "hand a suspended or failed session back to the workers",
            "submitter",
            response=Resumed,
            status=202,
        ),
        actions.resume,
    ),
    (
        Operation(
            "POST",
            S + "/fork",
            "a new session from the events 0..at_seq, queued for the workers",
            "submitter",
            ForkRequest,
            Forked,
            201,
        ),
        actions.fork,
    ),
    (
        Operation(
            "POST",
            "/api/approvals/decide",
            "one decision (with a reason) for many pending requests",
            "approver",
            BulkDecisionRequest,
            BulkDecisionOut,
        ),
        actions.decide_many,
    ),
    (
        Operation(
            "POST",
            "/api/login",
            "open a console session (its id in an HttpOnly cookie) from a token",
            None,
            LoginRequest,
            WhoAmI,
        ),
        console.login,
    ),
    (
        Operation("GET", "/api/tokens", "the tokens' names and roles", "admin", response=TokenList),
        tokens.list_tokens,
    ),
    (
        Operation(
            "POST",
            "/api/tokens",
            "create a token (shown only in this answer)",
            "admin",
            TokenRequest,
            TokenCreated,
            201,
        ),
        tokens.create_token,
    ),
    (
        Operation(
            "POST",
            "/api/tokens/{name}/revoke",
            "revoke a name's tokens and end their console sessions",
            "admin",
            response=TokenRevoked,
        ),
        tokens.revoke_token,
    ),
    (Operation("POST", "/api/logout", "end the console session", "viewer"), console.logout),
]


def _version() -> str:
    try:
        return version("skillog")
    except PackageNotFoundError:  # pragma: no cover - running from a bare checkout
        return "0"


def create_app(ctx: ServiceContext) -> Starlette:
    """The service over ``ctx`` (see :class:`ServiceContext`)."""
    schema = msgspec.json.encode(openapi([op for op, _ in API], _version()))

    async def openapi_json(request: Request) -> Response:
        api.require(request, "viewer")
        return Response(schema, media_type="application/json")

    routes: list[BaseRoute] = [Route(op.path, handler, methods=[op.method]) for op, handler in API]
    routes.append(Route("/openapi.json", openapi_json, methods=["GET"]))
    routes.extend(console.ROUTES)
    routes.extend(listing.ROUTES)
    routes.append(Route("/console/tokens", tokens.tokens_page))
    errors = (ApiError, msgspec.ValidationError, msgspec.DecodeError, SkillogError, HTTPException)
    app = Starlette(
        routes=routes,
        middleware=[Middleware(Guard, ctx=ctx, routes=routes)],
        exception_handlers={**dict.fromkeys(errors, handle), Exception: handle},
    )
    app.state.ctx = ctx
    return app
