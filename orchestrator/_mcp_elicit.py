"""An MCP server's forms (``elicitation/create``) during one of its calls, put to a
human through the embedding program's :data:`Elicitor` (``skillog run``: the
terminal), recorded before anyone is asked (``mcp.elicited``) and with the answer the
server received (``mcp.elicitation_answered``).

A form cannot suspend the session durably like an approval: the server holds the
call open waiting for the answer, and a request on a live connection cannot be
answered by another process after a restart. So the wait is in the process, bounded by
``policy.mcp.elicitation_timeout_ms`` (and by the server's call timeout), and ends as
``cancel`` by ``timeout``, or by ``nobody`` when the process has no one to ask.
Only form mode is taken: the requested schema must be a flat object of string,
number, integer or boolean fields, or multi-selects of strings (what MCP allows);
anything else is refused with an error to the server, and recorded. A URL-mode
request is declined (skillog opens no URLs). An accepted answer that does not fit
the form is sent as ``cancel``.
"""

from __future__ import annotations

from typing import Any

import jsonschema
import msgspec

from ._calls import CallContext
from ._effects import ElicitationAnswer, ElicitationRequest
from ._events import McpElicitationAnswered, McpElicited
from ._model import encode_canonical

FIELD_TYPES = frozenset({"string", "number", "integer", "boolean"})


class FormError(ValueError):
    """A form skillog does not put to a human; the message says why."""


def check_form(params: bytes) -> tuple[str, dict[str, Any]]:
    """The message and requested schema of a form request, or :class:`FormError`."""
    try:
        value = msgspec.json.decode(params)
    except msgspec.DecodeError as e:
        raise FormError(f"the parameters are not JSON ({e})") from None
    if not isinstance(value, dict):
        raise FormError("the parameters are not a JSON object")
    message = value.get("message")
    if not isinstance(message, str):
        raise FormError("`message` must be a string")
    schema = value.get("requestedSchema")
    if not isinstance(schema, dict) or schema.get("type") != "object":
        raise FormError("`requestedSchema` must be a JSON Schema of type object")
    properties = schema.get("properties")
    if not isinstance(properties, dict):
        raise FormError("`requestedSchema.properties` must be an object")
    for name, field in properties.items():
        kind = field.get("type") if isinstance(field, dict) else None
        if kind == "array" and _multi_select(field.get("items")):
            continue
        if kind not in FIELD_TYPES:
            raise FormError(
                f"`requestedSchema.properties.{name}` must be a string, number, integer "
                f"or boolean field, or a multi-select of strings, not {kind!r} (MCP forms "
                "are flat)"
            )
    required = schema.get("required", [])
    if not isinstance(required, list) or not all(r in properties for r in required):
        raise FormError("`requestedSchema.required` must name fields of `properties`")
    try:
        jsonschema.validators.validator_for(schema).check_schema(schema)
    except jsonschema.exceptions.SchemaError as e:
        raise FormError(f"`requestedSchema` is not a valid JSON Schema: {e.message}") from None
    return message, schema


def _multi_select(items: object) -> bool:
    """An array field's items are a choice among strings (``enum`` or ``anyOf`` of
    ``const``s: MCP 2025-11-25's multi-select)."""
    if not isinstance(items, dict) or items.get("type", "string") != "string":
        return False
    return "enum" in items or "anyOf" in items


def _fits(content: str | None, schema: dict[str, Any]) -> str | None:
    """Why an accepted answer does not fit the form, or None when it does."""
    try:
        value = msgspec.json.decode(content or "")
    except msgspec.DecodeError:
        return "the answer is not JSON"
    if not isinstance(value, dict):
        return "the answer is not a JSON object"
    error = jsonschema.exceptions.best_match(
        jsonschema.validators.validator_for(schema)(schema).iter_errors(value)
    )
    return None if error is None else f"the answer does not fit the form: {error.message}"


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
    await ctx.commit([asked(True)])
    timeout_ms = ctx.view.config.policy.mcp.elicitation_timeout_ms
    request = ElicitationRequest(
        session_id=ctx.session_id,
        call_id=call_id,
        server=server,
        message=message,
        schema=encode_canonical(schema).decode(),
    )
    got = await ctx.effects.elicit(request, index=index, timeout_ms=timeout_ms)
    reason = ""
    if got is None:
        got = ElicitationAnswer(action="cancel", decided_by="nobody")
        reason = "no one in this process can answer a form"
    elif got.decided_by == "timeout" and got.action == "cancel":
        reason = f"no answer within {timeout_ms} ms (policy.mcp.elicitation_timeout_ms)"
    elif got.action == "accept":
        unfit = _fits(got.content, schema)
        if unfit is not None:
            await ctx.commit([answered(got, unfit)])
            return encode_canonical({"action": "cancel"}), None
    await ctx.commit([answered(got, reason)])
    result: dict[str, Any] = {"action": got.action}
    if got.action == "accept":
        result["content"] = msgspec.json.decode(got.content or "{}")
    return encode_canonical(result), None
