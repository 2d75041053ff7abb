"""The console's sessions list: the filters of ``_finding`` as a plain GET form (a
filtered list is a link), pages by the catalog's cursor, the rows fetched again every
2 s on the first page (``/console/rows`` with the same query: the rows alone)."""

from __future__ import annotations

import time
from html import escape
from urllib.parse import urlencode

from starlette.requests import Request
from starlette.responses import HTMLResponse, Response
from starlette.routing import BaseRoute, Route

from .._session_list import STATES, SessionRow, age
from ._console import page
from ._finding import Filters, filters_of, find
from ._routes import context, require
from ._submission import shown_model

PAGE = 100
TASK_SHOWN = 160
_KEYS = ("status", "model", "submitter", "since", "until", "q")


def _options(values: list[str], chosen: str, everything: str) -> str:
    return f'<option value="">{everything}</option>' + "".join(
        f"<option{' selected' if v == chosen else ''}>{escape(v)}</option>" for v in values
    )


def _cut(text: str) -> str:
    line = " ".join(text.split())
    return line if len(line) <= TASK_SHOWN else line[: TASK_SHOWN - 1] + "…"


def _rows(rows: list[SessionRow]) -> str:
    now = time.time_ns()
    return "".join(
        f'<tr data-state="{escape(r.state)}" data-session="{escape(r.session)}">'
        f'<td class="task" title="{escape(r.task)}">'
        f'<a href="/console/sessions/{escape(r.session)}">'
        f"{escape(_cut(r.task) or '(no task)')}</a><br><code>{escape(r.session)}</code></td>"
        f"<td>{escape(r.started)}</td>"
        f"<td>{age(now - r.started_ns)}</td><td>{escape(shown_model(r.model))}</td>"
        f"<td>{escape(r.submitter)}</td><td>{r.turns}</td><td>{r.events}</td>"
        f"<td>{escape(' · '.join(filter(None, (r.status, r.parent))))}</td>"
        f"<td>{r.pending_approvals}</td><td>{escape(', '.join(r.workers))}</td></tr>"
        for r in rows
    )


async def _page(request: Request) -> tuple[Filters, list[SessionRow], str | None]:
    filters = filters_of(request.query_params)
    rows, following = await find(context(request).store, filters, PAGE)
    return filters, rows, following


async def sessions_page(request: Request) -> Response:
    """The sessions, newest first, ``PAGE`` a page, filtered by status, model,
    submitter, time and the task's text (``?status=&model=&submitter=&since=&until=
    &q=``), with links to the next page and back to the first."""
    who = require(request, "viewer")
    ctx = context(request)
    params = request.query_params
    chosen = {k: params.get(k, "")[:200] for k in _KEYS}
    _, rows, following = await _page(request)
    known = sorted({shown_model(r.model) for r in rows} | {shown_model(m) for m in ctx.models})
    query = {k: v for k, v in chosen.items() if v}
    links = []
    if params.get("cursor"):
        links.append(f'<a id="first" href="/console?{escape(urlencode(query))}">first page</a>')
    if following is not None:
        more = urlencode({**query, "cursor": following})
        links.append(f'<a id="next" href="/console?{escape(more)}">next page</a>')
    filters = (
        '<form id="filters" method="get" action="/console">'
        f'<label>Status <select name="status">{_options(list(STATES), chosen["status"], "any")}'
        "</select></label> "
        f'<label>Model <select name="model">{_options(known, chosen["model"], "any")}'
        "</select></label> "
        f'<label>Submitter <input name="submitter" value="{escape(chosen["submitter"])}" '
        'maxlength="200" size="10"></label> '
        f'<label>From <input name="since" type="date" value="{escape(chosen["since"])}">'
        "</label> "
        f'<label>To <input name="until" type="date" value="{escape(chosen["until"])}">'
        "</label> "
        f'<label>Task <input name="q" type="search" value="{escape(chosen["q"])}" '
        'maxlength="200"></label> <button type="submit">Filter</button> '
        f'<span id="count">{len(rows)} shown</span></form>'
    )
    live = "" if params.get("cursor") else ' data-live="1"'
    table = (
        f"<table id=sessions{live}><thead><tr><th>task · session</th><th>started (UTC)</th>"
        "<th>age</th><th>model</th><th>submitter</th><th>turns</th><th>events</th>"
        "<th>status</th><th>pending</th><th>workers</th></tr></thead>"
        f"<tbody>{_rows(rows)}</tbody></table>"
        f'<p id="pages">{" · ".join(links)}</p>'
    )
    submit = ""
    if who.may("submitter"):
        models = "".join(f"<option>{escape(shown_model(m))}</option>" for m in ctx.models)
        presets = "".join(f"<option>{escape(p)}</option>" for p in ctx.policies)
        submit = (
            '<form id="submit"><h2>New task</h2><textarea id="task" rows="3" required>'
            f'</textarea><label>Model <select id="model">{models}</select></label> '
            f'<label>Policy <select id="policy">{presets}</select></label> '
            '<button type="submit">Submit</button><p id="message" class="message"></p></form>'
        )
    return page("sessions", f"<h2>Sessions</h2>{filters}{table}{submit}", who)


async def rows_fragment(request: Request) -> Response:
    """The first page's rows alone, for the list's live refresh."""
    require(request, "viewer")
    _, rows, _ = await _page(request)
    return HTMLResponse(_rows(rows))


ROUTES: list[BaseRoute] = [
    Route("/console", sessions_page),
    Route("/console/rows", rows_fragment),
]
