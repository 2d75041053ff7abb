"""The audit report as one self-contained HTML page (pure).

Everything from the log goes through :func:`html.escape` here, or through
``textContent`` in ``static/report.js``; the recorded prompts travel as a JSON data
block (``<`` escaped, so nothing in it can close the block). The page loads nothing:
its style and script are inline, and its Content-Security-Policy allows exactly those
two (by hash) and nothing else, no fetch, no image, no form.
"""

from __future__ import annotations

import base64
import hashlib
from html import escape
from pathlib import Path

import msgspec

from ._audit import Audit, Check, RecordedPrompt
from ._reuse import PrefixReuse
from ._skills import Drift
from ._timeline import TimelineEntry

_STATIC = Path(__file__).parent / "static"
_CSS = (_STATIC / "report.css").read_text()
_JS = (_STATIC / "report.js").read_text()


def _source_hash(text: str) -> str:
    return "'sha256-" + base64.b64encode(hashlib.sha256(text.encode()).digest()).decode() + "'"


CSP = (
    f"default-src 'none'; script-src {_source_hash(_JS)}; style-src {_source_hash(_CSS)}; "
    "img-src 'none'; connect-src 'none'; form-action 'none'; base-uri 'none'"
)
"""The page's policy (also sent as a header by the service): only its own inline
style and script run, nothing is fetched."""

_STATE = {True: "ok", False: "fail", None: "unchecked"}


def render_html(audit: Audit, *, generator: str = "skillog", back: str | None = None) -> str:
    """The report of ``audit`` as one HTML document: the verdict first, then the
    session's summary, its timeline, its recorded prompts and any drift. ``back``: a
    same-site path the header links to (the service's page of the session)."""
    sid = escape(audit.session)
    nav = f'<nav><a id="back" href="{escape(back)}">Back to the session</a></nav>' if back else ""
    parts = [
        "<!doctype html>\n<html lang=en><head><meta charset=utf-8>",
        f'<meta http-equiv="Content-Security-Policy" content="{CSP}">',
        '<meta name="viewport" content="width=device-width, initial-scale=1">',
        f"<title>Audit report {sid}</title><style>{_CSS}</style></head><body>",
        f"<header>{nav}<h1>Audit report: session <code>{sid}</code></h1>",
        f'<p class="meta">{audit.events} events; written from the log alone by '
        f"{escape(generator)}</p></header>",
        _verdict(audit),
        _summary(audit.summary),
        _timeline(audit.entries),
        _prompts(audit.prompts, audit.reuse),
    ]
    if audit.drift is not None:
        parts.append(_drift(audit.drift))
    parts.append(_data(audit))
    parts.append(f"<script>{_JS}</script></body></html>\n")
    return "".join(parts)


def _verdict(audit: Audit) -> str:
    rows = "".join(_check(c) for c in audit.checks)
    head = "Verdict: proven" if audit.ok else "Verdict: NOT PROVEN"
    note = (
        "Every check below passed: the log is intact and every prompt was reproduced."
        if audit.ok
        else "A check failed: the log was altered or damaged, or the current code renders "
        "a prompt differently. What follows is what the log claims, not what it proves."
    )
    divergence = ""
    if audit.divergence is not None:
        divergence = (
            "<details open><summary>First divergence: recorded vs re-rendered</summary>"
            f'<pre class="diff">{escape(audit.divergence)}</pre></details>'
        )
    faults = "".join(
        f'<li class="fault" data-kind="{escape(f.kind)}">{escape(str(f))}</li>'
        for f in audit.faults
    )
    if faults:
        faults = f'<ul id="faults">{faults}</ul>'
    return (
        f'<section id="verdict" class="{"ok" if audit.ok else "fail"}">'
        f"<h2>{head}</h2><p>{note}</p>"
        f'<table id="checks"><tbody>{rows}</tbody></table>{faults}{divergence}</section>'
    )


def _check(c: Check) -> str:
    return (
        f'<tr class="check {_STATE[c.ok]}" data-check="{escape(c.name)}">'
        f'<th>{escape(c.name)}</th><td class="mark">{c.mark}</td>'
        f"<td>{escape(c.details)}</td></tr>"
    )


def _summary(summary: dict[str, str | int]) -> str:
    items = "".join(f"<dt>{escape(k)}</dt><dd>{escape(str(v))}</dd>" for k, v in summary.items())
    return f'<section id="summary"><h2>Session</h2><dl class="summary">{items}</dl></section>'


_COLUMNS = (
    ("seq", "c-seq"),
    ("time (UTC)", "c-time"),
    ("kind", "c-kind"),
    ("what", "c-what"),
    ("call", "c-call"),
    ("details", "c-details"),
)
_COLGROUP = "<colgroup>" + "".join(f'<col class="{c}">' for _, c in _COLUMNS) + "</colgroup>"


def _timeline(entries: list[TimelineEntry]) -> str:
    """One fixed-layout table per turn, so a browser lays out (and skips, while off
    screen) each turn on its own: a 1,000-turn page opens as fast as a short one."""
    turns: list[str] = []
    rows: list[str] = []
    turn = -1

    def close() -> None:
        if rows:
            label = "before the first model call" if turn == 0 else f"turn {turn}"
            turns.append(
                f'<div class="turn" id="turn-{turn}"><h3>{label}</h3>'
                f"<table>{_COLGROUP}<tbody>{''.join(rows)}</tbody></table></div>"
            )
            rows.clear()

    for e in entries:
        if e.turn != turn:
            close()
            turn = e.turn
        rows.append(_entry(e))
    close()
    head = "".join(f"<th>{name}</th>" for name, _ in _COLUMNS)
    return (
        '<section id="timeline"><h2>Timeline</h2>'
        f'<table class="head">{_COLGROUP}<thead><tr>{head}</tr></thead></table>'
        f"{''.join(turns)}</section>"
    )


def _entry(e: TimelineEntry) -> str:
    call = e.details.get("call_id")
    classes = ["bad"] if e.kind == "denial" or e.kind.endswith("✗") else []
    if call and e.kind != "tool":
        classes.append("in-call")
    details = "; ".join(
        f"{escape(k)}: {escape(str(v))}"
        for k, v in e.details.items()
        if v not in (None, "") and k != "call_id"
    )
    return (
        f'<tr class="{" ".join(classes)}" data-seq={e.seq} data-kind="{escape(e.kind)}">'
        f"<td>{e.seq}</td><td>{escape(e.time)}</td><td>{escape(e.kind)}</td>"
        f'<td class="what">{escape(e.what)}</td><td>{escape(str(call or ""))}</td>'
        f'<td class="details">{details}</td></tr>'
    )


def _prompts(prompts: list[RecordedPrompt], reuse: PrefixReuse | None) -> str:
    shares = {r.seq: r.share for r in reuse.requests} if reuse is not None else {}
    items = "".join(
        f'<details class="prompt" id="prompt-{i}" data-index={i} data-turn={p.turn}>'
        f"<summary>turn {p.turn} · seq {p.seq} · request "
        f'<span class="hash">sha256:{escape(p.request_hash[:16])}</span> · '
        f"{p.message_count} messages (+{p.new_messages}) · {p.size:,} bytes · "
        + (f"prefix reuse {shares[p.seq]:.1%} · " if p.seq in shares else "")
        + f"{_proof(p.proven)}</summary>"
        '<div class="prompt-body"></div></details>'
        for i, p in enumerate(prompts)
    )
    return (
        '<section id="prompts"><h2>Prompts</h2><p class="meta">Each request the model was '
        "sent, as recorded; open one for its diff against the previous request and its "
        f"bytes.</p>{_reuse(reuse)}{items}</section>"
    )


def _reuse(reuse: PrefixReuse | None) -> str:
    if reuse is None or reuse.mean is None or reuse.min is None:
        return ""
    breaks = ", ".join(
        f"turn {b.turn} ({escape(b.where)}{', compacted' if b.compacted else ''})"
        for b in reuse.breaks
    )
    return (
        f'<p class="meta" id="prefix-reuse">Prefix reuse (the share of each request, in '
        f"the provider's cache order, that repeats the previous one's bytes): mean "
        f"{reuse.mean:.1%}, min {reuse.min:.1%}; "
        f"{f'{len(reuse.breaks)} breaks: {breaks}' if reuse.breaks else 'no breaks'}.</p>"
    )


def _proof(proven: bool | None) -> str:
    if proven is None:
        return '<span class="warn">not proven</span>'
    return "✓ re-rendered byte for byte" if proven else '<span class="warn">✗ differs</span>'


def _drift(entries: list[Drift]) -> str:
    rows = "".join(
        f"<tr><td>{escape(d.name)}</td><td class=hash>sha256:{escape(d.recorded_hash[:12])}</td>"
        f"<td>{escape(d.status)}</td><td>{escape(_drift_detail(d))}</td></tr>"
        for d in entries
    )
    return (
        '<section id="drift"><h2>Drift against disk</h2><table><thead><tr><th>skill</th>'
        f"<th>recorded</th><th>status</th><th>details</th></tr></thead><tbody>{rows}"
        "</tbody></table></section>"
    )


def _drift_detail(d: Drift) -> str:
    if d.status == "changed":
        files = ", ".join(f"{c.change} {c.path}" for c in d.changes)
        return f"now sha256:{(d.disk_hash or '')[:12]} at {d.path}: {files}"
    if d.status == "unreadable":
        return f"{d.path}: {d.problem}"
    return d.path or ""


def _data(audit: Audit) -> str:
    data = {
        "lines": audit.lines,
        "tails": audit.tails,
        "prompts": [
            {
                "start": p.start,
                "count": p.message_count,
                "new": p.new_messages,
                "tail": p.tail,
                "diff": p.tail_diff,
            }
            for p in audit.prompts
        ],
    }
    # "<" escaped: no "</script>" or "<!--" in the block, whatever the log holds.
    text = msgspec.json.encode(data).decode().replace("<", "\\u003c")
    return f'<script type="application/json" id="prompt-data">{text}</script>'
