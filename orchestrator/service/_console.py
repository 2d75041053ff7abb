"""The web console: small server-rendered pages, no build step, nothing from elsewhere.

Every value from the log goes through :func:`html.escape` here, or through
``textContent`` in ``static/console.js``; no page has inline script (the CSP forbids
it), so a skill description or tool argument holding markup renders as text.
"""

from __future__ import annotations

from html import escape
from pathlib import Path
from typing import Any

from starlette.requests import Request
from starlette.responses import HTMLResponse, RedirectResponse, Response
from starlette.routing import BaseRoute, Route

from .._approvals import PendingApproval, pending_approvals
from .._display import hidden_path, shown_html
from .._events import PolicyConfig
from .._fleet import session_config
from .._forms import PendingForm, pending_forms
from .._policy import suggested_rule
from .._session import SessionNotFoundError
from .._session_list import status_text, when
from .._state import SessionState
from ._auth import Principal, token_digest
from ._errors import ApiError
from ._guard import COOKIE
from ._proxy import secure
from ._routes import body, context, fold, json, require, session_id
from ._schemas import LoginRequest, WhoAmI
from ._submission import shown_model

_STATIC = Path(__file__).parent / "static"
_FILES = {  # read once, at import: serving them never touches the disk
    "console.js": ((_STATIC / "console.js").read_bytes(), "text/javascript; charset=utf-8"),
    "console.css": ((_STATIC / "console.css").read_bytes(), "text/css; charset=utf-8"),
}


def page(title: str, content: str, who: Principal | None) -> HTMLResponse:
    nav = ""
    if who is not None:
        roles = ", ".join(sorted(who.roles))
        nav = (
            '<nav><a href="/console">Sessions</a> <a href="/console/approvals">Approvals</a>'
            + (' <a href="/console/tokens">Tokens</a>' if who.may("admin") else "")
            + f' <span class="who">{escape(who.name)} ({escape(roles)})</span>'
            ' <button id="logout" type="button">Log out</button></nav>'
        )
    return HTMLResponse(
        "<!doctype html>\n<html lang=en><head><meta charset=utf-8>"
        f"<title>{escape(title)} · skillog</title>"
        '<link rel="stylesheet" href="/static/console.css">'
        '<script src="/static/console.js" defer></script></head>'
        f"<body><header><h1>skillog</h1>{nav}</header>"
        '<p id="offline" class="message error" hidden>The server does not answer: actions '
        "are disabled until it does again.</p>"
        f"<main>{content}</main></body></html>"
    )


async def login_page(request: Request) -> Response:
    form = (
        '<form id="login"><label>Token <input id="token" type="password" '
        'autocomplete="off" required></label> <button type="submit">Log in</button>'
        '<p id="message" class="message"></p></form>'
    )
    return page("log in", form, None)


async def login(request: Request) -> Response:
    """Open a console session for a valid token; its id (never the token) goes into
    the cookie (see ``_guard`` and ``_console_sessions``)."""
    req = await body(request, LoginRequest)
    ctx = context(request)
    digest = token_digest(req.token)
    who = await ctx.tokens.lookup_digest(digest)
    if who is None:
        raise ApiError(401, "invalid or revoked token", "$.token")
    response = json(WhoAmI(name=who.name, roles=sorted(who.roles)))
    response.set_cookie(
        COOKIE,
        ctx.console.open(digest),
        max_age=int(ctx.console.absolute_s),
        httponly=True,
        samesite="strict",
        secure=secure(request.state.seen, ctx.proxying),
    )
    return response


async def logout(request: Request) -> Response:
    """End the console session of the cookie (its id answers nothing afterwards)."""
    ctx = context(request)
    cookie = request.cookies.get(COOKIE)
    if cookie:
        ctx.console.close(cookie)
    response = json({"logged_out": True})
    response.delete_cookie(
        COOKIE, httponly=True, samesite="strict", secure=secure(request.state.seen, ctx.proxying)
    )
    return response


def unknown_session(sid: str, who: Principal) -> Response:
    """The page for a session id this log does not hold (404), with the way back."""
    content = (
        f'<section id="unknown"><h2>No session {escape(sid)}</h2>'
        "<p>This log holds no session with that id: it may be mistyped, or the session "
        "lives in another log (another <code>--db</code>).</p>"
        '<p><a href="/console">Back to the sessions</a></p></section>'
    )
    response = page("unknown session", content, who)
    response.status_code = 404
    return response


async def session_page(request: Request) -> Response:
    who = require(request, "viewer")
    sid = session_id(request)
    try:
        state = await fold(request, sid)
    except SessionNotFoundError:
        return unknown_session(sid, who)
    assert state.config is not None
    skills = "".join(
        f"<li><b>{escape(s.name)}</b> <i>{escape(s.tier)}</i> {escape(s.description)}</li>"
        for s in sorted(state.catalog.values(), key=lambda s: s.name)
    )
    pending = await pending_approvals(context(request).store, sid)
    content = (
        f'<section id="session" data-session="{escape(sid)}">'
        f"<h2>Session {escape(sid)}</h2>"
        f'<p>Status: <span id="status">{escape(status_text(state))}</span> · model '
        f"{escape(shown_model(f'{state.config.provider}:{state.config.model}'))} · "
        f'<a href="/api/sessions/{escape(sid)}/verify">verify</a> · '
        f'<a href="/api/sessions/{escape(sid)}/replay">replay proof</a> · '
        f'<a id="audit" href="/console/sessions/{escape(sid)}/audit">audit report</a></p>'
        f"{_actions(state, who)}"
        f'<h3>Skills available</h3><ul id="catalog">{skills}</ul>'
        f'<h3>Pending approvals</h3><div id="approvals">'
        f"{_approvals(pending, {sid: state.config.policy}, who)}</div>"
        '<h3>Trace <span id="live" class="live"></span></h3>'
        '<div id="trace"></div>'
        '<details id="raw"><summary>Every event, as recorded</summary>'
        '<ol id="events" start="0"></ol></details></section>'
    )
    return page(f"session {sid}", content, who)


def _actions(state: SessionState, who: Principal) -> str:
    """Cancel, resume and fork (from the seq typed here or an event's own button), for
    a submitter; each result stays on the page until dismissed."""
    can = who.may("submitter")
    ended = state.status == "ended"
    failed = state.ended is not None and state.ended.reason == "error"  # goes on in a fork

    def button(action: str, label: str, usable: bool) -> str:
        off = "" if usable else " disabled"
        return f'<button type="button" class="action" data-action="{action}"{off}>{label}</button>'

    return (
        f'<div id="actions" data-can="{"1" if can else ""}">'
        '<label>Reason <input id="action-reason" maxlength="2000"></label> '
        + button("cancel", "Cancel session", can and not ended)
        + " "
        + button("resume", "Resume", can and (not ended or failed))
        + ' <label>Fork at seq <input id="fork-at" type="number" min="0" '
        f'max="{state.seq}" value="{state.seq}"></label> '
        + button("fork", "Fork", can)
        + '<div id="confirm" hidden><span>Cancel this session? Its open calls are '
        "closed by their effect class and it cannot go on afterwards.</span> "
        '<button type="button" class="action" data-action="cancel-yes">Yes, cancel it</button> '
        '<button type="button" id="confirm-no">No</button></div></div>'
        '<div id="notices" aria-live="polite"></div>'
    )


async def audit_page(request: Request) -> Response:
    """The audit report ``skillog replay --html`` writes (the same page, from the same
    code): the verdict, the timeline and every prompt, from the log alone. It carries
    its own inline style and script, so it is sent with its own policy, which allows
    those two by hash and nothing else."""
    from replay import CSP, audit_session, render_html

    who = require(request, "viewer")
    sid = session_id(request)
    store = context(request).store
    if await session_config(store, sid) is None:
        return unknown_session(sid, who)
    report = render_html(
        await audit_session(store, sid),
        generator="the skillog service",
        back=f"/console/sessions/{sid}",
    )
    report = shown_html(report, hidden_path(await session_config(store, sid)))
    return HTMLResponse(report, headers={"content-security-policy": CSP})


async def approvals_fragment(request: Request) -> Response:
    """The pending-approvals panel of one session (the live view reloads it)."""
    who = require(request, "viewer")
    sid = session_id(request)
    config = await session_config(context(request).store, sid)
    if config is None:
        raise ApiError(404, f"no session {sid!r} in this log")
    pending = await pending_approvals(context(request).store, sid)
    return HTMLResponse(_approvals(pending, {sid: config.policy}, who))


async def _inbox(request: Request, who: Principal) -> str:
    store = context(request).store
    pending = await pending_approvals(store)
    policies: dict[str, PolicyConfig] = {}
    for p in pending:
        config = await session_config(store, p.session_id)
        if config is not None:
            policies[p.session_id] = config.policy
    forms = await pending_forms(store)
    if not forms:
        return _approvals(pending, policies, who)
    return _forms(forms, who) + (_approvals(pending, policies, who) if pending else "")


def _forms(forms: list[PendingForm], who: Principal) -> str:
    """Each MCP form waiting for a human, rendered from its flat schema (the server's
    words escaped): a field per property, Submit (accept) and Decline; the API checks
    the values against the form and says which field does not fit."""
    can = "" if who.may("approver") else " disabled"
    items = []
    for f in forms:
        required = set(f.schema.get("required", []))
        fields = "".join(
            _field(str(name), spec, name in required)
            for name, spec in f.schema.get("properties", {}).items()
            if isinstance(spec, dict)
        )
        items.append(
            f'<article class="approval form" data-session="{escape(f.session_id)}" '
            f'data-call="{escape(f.call_id)}" data-index="{f.index}"><dl>'
            f'<dt>session</dt><dd><a href="/console/sessions/{escape(f.session_id)}">'
            f"{escape(f.session_id)}</a></dd>"
            f"<dt>call</dt><dd>{escape(f.call_id)}</dd>"
            f"<dt>form from</dt><dd>MCP server {escape(f.server)}</dd>"
            f"<dt>message</dt><dd><pre>{escape(f.message)}</pre></dd>"
            f"<dt>requested</dt><dd>{when(f.requested_at)} UTC</dd></dl>"
            f'<fieldset class="fields">{fields}</fieldset>'
            f'<button class="answer" data-action="accept"{can}>Submit</button> '
            f'<button class="answer" data-action="decline"{can}>Decline</button>'
            '<p class="message"></p></article>'
        )
    return "".join(items)


def _field(name: str, spec: dict[str, Any], required: bool) -> str:
    kind = spec.get("type")
    title = escape(str(spec.get("title") or name))
    star = " *" if required else ""
    data = f'data-field="{escape(name)}" data-kind="{escape(str(kind))}"'
    if kind == "array":
        items = spec.get("items") or {}
        choices = items.get("enum") or [c.get("const") for c in items.get("anyOf", [])]
        boxes = "".join(
            f'<label><input type="checkbox" class="choice" value="{escape(str(c))}"> '
            f"{escape(str(c))}</label> "
            for c in choices
        )
        return f'<div class="field" {data}><span>{title}{star}</span> {boxes}</div>'
    if kind == "boolean":
        control = '<input type="checkbox" class="value">'
    elif isinstance(spec.get("enum"), list):
        options = "".join(
            f'<option value="{escape(str(c))}">{escape(str(c))}</option>' for c in spec["enum"]
        )
        control = f'<select class="value"><option value=""></option>{options}</select>'
    elif kind in ("integer", "number"):
        step = "1" if kind == "integer" else "any"
        control = f'<input type="number" step="{step}" class="value">'
    else:
        control = '<input type="text" maxlength="8192" class="value">'
    return f'<div class="field" {data}><label>{title}{star} {control}</label></div>'


async def approvals_page(request: Request) -> Response:
    """Every pending request; the page fetches the inbox again every 2 s, adding the
    new requests and removing those decided elsewhere (a reason being typed stays)."""
    who = require(request, "viewer")
    panel = await _inbox(request, who)
    bulk = ""
    if who.may("approver"):
        bulk = (
            '<div id="bulk"><label><input type="checkbox" id="pick-all"> all</label> '
            '<label>Reason <input id="bulk-reason" maxlength="2000"></label> '
            '<button type="button" class="bulk" data-verdict="approve">Approve selected</button> '
            '<button type="button" class="bulk" data-verdict="deny">Deny selected</button></div>'
            '<div id="notices" aria-live="polite"></div>'
        )
    content = f'<h2>Pending approvals</h2>{bulk}<div id="inbox">{panel}</div>'
    return page("approvals", content, who)


async def inbox_fragment(request: Request) -> Response:
    """The inbox's panel alone (what the approvals page fetches to stay live)."""
    who = require(request, "viewer")
    return HTMLResponse(await _inbox(request, who))


def _approvals(
    pending: list[PendingApproval], policies: dict[str, PolicyConfig], who: Principal
) -> str:
    """Each request with everything the approver needs: session, skill, tier, tool, the
    arguments, what the policy said, and the buttons (disabled without the role)."""
    if not pending:
        return '<p class="none">none</p>'
    can = "" if who.may("approver") else " disabled"
    pick = '<label class="pick"><input type="checkbox" class="pick"> select</label>'
    pick = "" if can else pick
    items = []
    for p in pending:
        policy = policies.get(p.session_id)
        said = (
            f"scripts of tiers {', '.join(policy.approve) or 'none'} need approval; "
            f"sandbox {policy.sandbox}; network for {', '.join(policy.network) or 'no tier'}"
            if policy is not None
            else ""
        )
        expiry = f"<dt>expires</dt><dd>{when(p.expires_at)} UTC</dd>" if p.expires_at else ""
        installs = (
            f'<dt>installs</dt><dd class="install">{escape(" ".join(p.install))} into skill '
            f"{escape(p.skill or '')}'s own environment, from the package index (network "
            "for the installer only), before the script runs</dd>"
            if p.install
            else ""
        )
        items.append(
            f'<article class="approval" data-session="{escape(p.session_id)}" '
            f'data-call="{escape(p.call_id)}">{pick}<dl>'
            f'<dt>session</dt><dd><a href="/console/sessions/{escape(p.session_id)}">'
            f"{escape(p.session_id)}</a></dd>"
            f"<dt>call</dt><dd>{escape(p.call_id)}</dd>"
            f"<dt>skill</dt><dd>{escape(p.skill or 'host tool')}</dd>"
            f"<dt>tier</dt><dd>{escape(p.tier or '-')}</dd>"
            f"<dt>tool</dt><dd>{escape(p.tool)}</dd>"
            f"<dt>arguments</dt><dd><pre>{escape(p.arguments)}</pre></dd>{installs}"
            f"<dt>policy</dt><dd>{escape(p.action)}<br>{escape(said)}</dd>"
            f"<dt>requested</dt><dd>{when(p.requested_at)} UTC</dd>{expiry}</dl>"
            '<label>Reason <input class="reason" maxlength="2000"></label> '
            f"{_remember_choice(p)} "
            f'<button class="decide" data-verdict="approve"{can}>Approve</button> '
            f'<button class="decide" data-verdict="deny"{can}>Deny</button>'
            '<p class="message"></p></article>'
        )
    return "".join(items)


def _remember_choice(p: PendingApproval) -> str:
    """Approve once, or always (recorded as ``approval.remembered``): for this skill in
    this session, or for the rule the terminal offers too (docs/policy.md)."""
    rule = suggested_rule(p.path, p.tool)
    skill = (
        f'<option value="skill">always for {escape(p.skill)} in this session</option>'
        if p.skill is not None
        else ""
    )
    return (
        '<label>Approve <select class="remember"><option value="">once</option>'
        f'{skill}<option value="pattern:{escape(rule)}">always for {escape(rule)}</option>'
        "</select></label>"
    )


async def static(request: Request) -> Response:
    found = _FILES.get(request.path_params["name"])  # a fixed set: a URL is never a path
    if found is None:
        raise ApiError(404, "no such file")
    return Response(found[0], media_type=found[1])


async def home(request: Request) -> Response:
    return RedirectResponse("/console", status_code=303)


ROUTES: list[BaseRoute] = [
    Route("/", home),
    Route("/console/login", login_page),
    Route("/console/approvals", approvals_page),
    Route("/console/approvals/inbox", inbox_fragment),
    Route("/console/sessions/{session}", session_page),
    Route("/console/sessions/{session}/approvals", approvals_fragment),
    Route("/console/sessions/{session}/audit", audit_page),
    Route("/static/{name}", static),
]
