"""An MCP server's forms (``elicitation/create``) during one of its calls, recorded
before anyone is asked (``mcp.elicited``) and with the answer the server received
(``mcp.elicitation_answered``).

The answer comes from an answer kept in the log for the same form (given while no
driver waited), else the embedding program's :data:`Elicitor` (``skillog run``: the
terminal), else a human in another process through ``forms/<session>``
(``_forms``: ``skillog approvals answer``, the API, the console). The server holds its
call open meanwhile, so the wait is bounded by ``policy.mcp.elicitation_timeout_ms``
(and the server's call timeout) and ends as ``cancel`` by ``timeout``; the request
stays answerable after the driver dies, and the same form asked again takes the
answer. Only form mode is taken: the requested schema must be a flat object of string,
number, integer or boolean fields, or multi-selects of strings (what MCP allows);
anything else is refused with an error to the server, and recorded. A URL-mode
request is declined (skillog opens no URLs). An accepted answer that does not fit
the form is sent as ``cancel``.
"""

from __future__ import annotations

from typing import Any

import msgspec

from ._calls import CallContext
from ._effects import ElicitationAnswer, ElicitationRequest
from ._events import McpElicitationAnswered, McpElicited
from ._forms import FormError, check_form, fits
from ._model import encode_canonical


def _mode(params: bytes) -> object:
    try:
        value = msgspec.json.decode(params)
    except msgspec.DecodeError:
        return None
    return value.get("mode") if isinstance(value, dict) else None


async def elicit(
    ctx: CallContext, server: str, index: int, params: bytes
) -> tuple[bytes | None, str | None]:
    """Ask, record and answer one form of the call ``ctx`` (see the module)."""
    call_id = ctx.call.id

    def asked(valid: bool, reason: str = "") -> McpElicited:
        digest = ctx.rec.blob(params)
        return McpElicited(
            call_id=call_id, server=server, index=index, params=digest, valid=valid, reason=reason
        )

    def answered(answer: ElicitationAnswer, reason: str = "") -> McpElicitationAnswered:
        return McpElicitationAnswered(
            call_id=call_id,
            server=server,
            index=index,
            action=answer.action,
            content=answer.content if answer.action == "accept" else None,
            decided_by=answer.decided_by,
            reason=reason,
            answer=answer.answer,
        )

    if _mode(params) == "url":
        reason = "skillog opens no URLs: a URL-mode request is declined"
        answer = ElicitationAnswer(action="decline", decided_by="skillog")
        await ctx.commit([asked(False, reason), answered(answer, reason)])
        return encode_canonical({"action": "decline"}), None
    try:
        message, schema = check_form(params)
    except FormError as e:
        reason = f"skillog cannot put this form to a human: {e}"
        await ctx.commit([asked(False, reason)])
        return None, reason
    elicited = asked(True)
    earlier = [f for f in ctx.recorded.forms if (f.index, f.params) == (index, elicited.params)]
    if not earlier:  # else a process that stopped while it waited recorded it already
        await ctx.commit([elicited])
    timeout_ms = ctx.view.config.policy.mcp.elicitation_timeout_ms
    request = ElicitationRequest(
        session_id=ctx.session_id,
        call_id=call_id,
        server=server,
        message=message,
        schema=encode_canonical(schema).decode(),
        params=elicited.params,
    )
    got = await ctx.effects.elicit(request, index=index, timeout_ms=timeout_ms)
    reason = ""
    if got is None:
        got = ElicitationAnswer(action="cancel", decided_by="nobody")
        reason = "no one in this process can answer a form"
    elif got.decided_by == "timeout" and got.action == "cancel":
        reason = f"no answer within {timeout_ms} ms (policy.mcp.elicitation_timeout_ms)"
    elif got.action == "accept":
        unfit = fits(got.content, schema)
        if unfit is not None:
            await ctx.commit([answered(got, unfit)])
            return encode_canonical({"action": "cancel"}), None
    await ctx.commit([answered(got, reason)])
    result: dict[str, Any] = {"action": got.action}
    if got.action == "accept":
        result["content"] = msgspec.json.decode(got.content or "{}")
    return encode_canonical(result), None
