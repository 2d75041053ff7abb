"""The session as a trace, for the console: the rows the audit report's timeline holds
(``replay.audit_session``: one function computes them for both), each recorded
request's diff against the previous one (computed here, on the server, from the
recorded requests; the page shows it as text), and what each script printed.

The console builds its tree live from the event stream and hangs these facts on its
nodes by seq. Streamed model text (previews, never in the log) is not here: the stream
brings it (``?previews=1``)."""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import Response

from eventlog import closing

from .._display import hidden_path, shown_text
from .._events import CODEC, ScriptExecuted
from .._fleet import session_config
from .._session import SessionNotFoundError
from ._routes import context, json, query_int, require, session_id
from ._schemas import PromptDiff, ScriptOutput, TraceOut, TraceRow

OUTPUT_SHOWN = 16_384


async def trace(request: Request) -> Response:
    """``GET /api/sessions/{id}/trace?from_seq=``: the trace's facts from ``from_seq``
    on (the page asks again for what is new)."""
    from replay import BrokenLogError, audit_session

    require(request, "viewer")
    sid = session_id(request)
    store = context(request).store
    config = await session_config(store, sid)
    if config is None:
        raise SessionNotFoundError(f"no session {sid!r} in this log")
    start = query_int(request, "from_seq", 0, 2**62)
    hidden = hidden_path(config)
    try:
        audit = await audit_session(store, sid)
    except BrokenLogError as e:
        raise SessionNotFoundError(str(e)) from e
    rows = [
        TraceRow(seq=e.seq, turn=e.turn, time=e.time, kind=e.kind, what=shown_text(e.what, hidden),
                 details={k: shown_text(v, hidden) if isinstance(v, str) else v
                          for k, v in e.details.items()})
        for e in audit.entries
        if e.seq >= start
    ]  # fmt: skip
    prompts = [
        PromptDiff(seq=p.seq, turn=p.turn, new_messages=p.new_messages, size=p.size,
                   diff=shown_text(p.tail_diff, hidden))
        for p in audit.prompts
        if p.seq >= start
    ]  # fmt: skip
    outputs: list[ScriptOutput] = []
    async with closing(store.read(sid, from_seq=start)) as events:
        async for event in events:
            if not event.type.startswith(ScriptExecuted.event_type):
                continue
            body = CODEC.decode(event)
            assert isinstance(body, ScriptExecuted)
            out = await store.get_blob(body.stdout_digest)
            err = await store.get_blob(body.stderr_digest)
            outputs.append(
                ScriptOutput(
                    seq=event.seq,
                    call_id=body.call_id,
                    stdout=out[:OUTPUT_SHOWN].decode("utf-8", "replace"),
                    stderr=err[:OUTPUT_SHOWN].decode("utf-8", "replace"),
                    truncated=body.truncated or max(len(out), len(err)) > OUTPUT_SHOWN,
                )
            )
    return json(TraceOut(session_id=sid, rows=rows, prompts=prompts, outputs=outputs))
