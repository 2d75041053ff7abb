"""MCP servers' forms as durable requests: what a form may ask (a flat schema), what
an answer may say (values that fit it), and the channel through which a human in
another process answers one while the session's driver waits holding the lease.

The driver cannot share its session's stream (it holds the lease and appends there),
so answers go to a stream of their own, ``forms/<session>`` (``mcp.form_answered``),
written by ``skillog approvals answer``, the service's API and its console. The driver
polls that stream while a form waits (reads of a short stream from where it was, cost
flat in history) and records in the session ``mcp.elicitation_answered`` naming the
answer's hash; ``log verify`` checks the reference (:func:`check_answer_refs`).

A driver whose own process can ask (the terminal) races that prompt against the
stream: its answer is appended there too (:meth:`FormWait.claim`), so whichever answer
is appended first holds, in any process, and the other is refused or withdrawn.

An answer outlives the driver: one given while no driver waits (it died) is kept
unconsumed, and the same form (the same parameters' digest) asked again in the session
takes it without asking anyone. A form is pending while its call is open, it has no
answer in the session, and no unconsumed answer waits for it; an answer to anything
else is refused (:class:`FormAnswerError`) and nothing is written.
"""

from __future__ import annotations

import time
import unicodedata
from collections.abc import Callable
from typing import Any, Literal

import jsonschema
import msgspec
import trio

from eventlog import ConcurrencyError, EventStore, SkillogError
from eventlog._catalog import Listing

from ._catalog import catalog_current, entry_of
from ._events import CODEC, McpElicitationAnswered, McpElicited, McpFormAnswered
from ._model import encode_canonical
from ._streams import forms_stream, is_session_stream

FIELD_TYPES = frozenset({"string", "number", "integer", "boolean"})

MAX_VALUES_BYTES = 64 * 1024
"""The most an answer's values may weigh, as canonical JSON."""

MAX_STRING_CHARS = 8 * 1024
"""The longest string value an answer may carry."""

POLL_S = 0.1
"""How often a waiting driver looks for an answer in ``forms/<session>``."""


class FormError(ValueError):
    """A form skillog does not put to a human; the message says why."""


class FormAnswerError(SkillogError):
    """An answer that cannot be recorded: the form is not pending (never asked,
    answered, its call over, the session ended), or the values do not fit it. Nothing
    was written."""


class FormValuesError(FormAnswerError):
    """Values that do not fit the form (unknown field, wrong type, too long, control
    characters); the message names the field. Nothing was written."""


class PendingForm(msgspec.Struct, frozen=True, kw_only=True):
    """One form waiting for a human: where it is, what the server asks (its message and
    flat schema, as the server wrote them: print them through ``visible``), since when
    (ns)."""

    session_id: str
    call_id: str
    index: int
    server: str
    message: str
    schema: dict[str, Any]
    params: str
    requested_at: int


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


def fits(content: str | None, schema: dict[str, Any]) -> str | None:
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


def check_values(values: object, schema: dict[str, Any]) -> str:
    """The canonical JSON of a human's ``values`` for the form ``schema``, or
    :class:`FormValuesError` naming the field and what to do: only the form's fields,
    of their types (a number given as text is taken as the number), within
    :data:`MAX_STRING_CHARS`, no control characters but newline and tab."""
    if not isinstance(values, dict):
        raise FormValuesError("the values must be a JSON object of the form's fields")
    properties: dict[str, Any] = schema.get("properties", {})
    unknown = sorted(set(values) - set(properties))
    if unknown:
        names = ", ".join(repr(n[:40]) for n in unknown[:5])
        raise FormValuesError(
            f"the form has no field {names}; its fields: {', '.join(sorted(properties))}"
        )
    taken = {name: _coerce(name, value, properties[name]) for name, value in values.items()}
    for name, value in taken.items():
        for text in value if isinstance(value, list) else [value]:
            if isinstance(text, str):
                _check_text(name, text)
    content = encode_canonical(taken).decode()
    if len(content) > MAX_VALUES_BYTES:
        raise FormValuesError(
            f"the values are {len(content)} bytes; at most {MAX_VALUES_BYTES} are taken"
        )
    unfit = fits(content, schema)
    if unfit is not None:
        raise FormValuesError(f"{unfit}; answer again with values that fit")
    return content


def _coerce(name: str, value: object, field: dict[str, Any]) -> object:
    """``value`` as the field's type when it is text that says one (``--set age=42``)."""
    kind = field.get("type")
    if not isinstance(value, str) or kind == "string":
        return value
    try:
        if kind == "integer":
            return int(value)
        if kind == "number":
            number = float(value)
            return int(number) if number.is_integer() else number
    except ValueError:
        raise FormValuesError(_wrong(name, kind, value)) from None
    if kind == "boolean" and value in ("true", "false"):
        return value == "true"
    if kind == "array":
        return [v for v in value.split(",") if v]
    raise FormValuesError(_wrong(name, kind, value))


def _wrong(name: str, kind: object, value: str) -> str:
    words = {"integer": "an integer", "number": "a number", "boolean": "true or false"}
    return f"field {name!r} takes {words.get(str(kind), kind)}, not {value[:40]!r}"


def _check_text(name: str, text: str) -> None:
    if len(text) > MAX_STRING_CHARS:
        raise FormValuesError(
            f"field {name!r} is {len(text)} characters; at most {MAX_STRING_CHARS} are taken"
        )
    bad = next((c for c in text if c not in "\n\t" and unicodedata.category(c) == "Cc"), None)
    if bad is not None:
        raise FormValuesError(
            f"field {name!r} holds the control character U+{ord(bad):04X}; only newline "
            "and tab are taken"
        )


class _Open(msgspec.Struct, kw_only=True):
    asked: McpElicited
    seq: int
    recorded_at: int


class _SessionForms(msgspec.Struct, kw_only=True):
    open: dict[tuple[str, int], _Open]
    answered: dict[tuple[str, int], str]  # who answered each form the session took
    consumed: set[str]
    ended: bool
    known: bool


_CALL_ENDS = frozenset({"tool.completed", "tool.interrupted"})
_READ = frozenset({"mcp.elicited", "mcp.elicitation_answered", "session.started", "session.ended"})


async def _session_forms(store: EventStore, session_id: str) -> _SessionForms:
    """The session's open forms and the answers it took, from its events (only the few
    types that matter are decoded)."""
    found = _SessionForms(open={}, answered={}, consumed=set(), ended=False, known=False)
    async for event in store.read(session_id):
        tag = event.type.partition("@")[0]
        if tag in _CALL_ENDS:
            call_id = msgspec.json.decode(event.body)["call_id"]
            for key in [k for k in found.open if k[0] == call_id]:
                del found.open[key]
            continue
        if tag not in _READ:
            continue
        body = CODEC.decode(event)
        if isinstance(body, McpElicited):
            if body.valid:
                key = (body.call_id, body.index)
                found.open[key] = _Open(asked=body, seq=event.seq, recorded_at=event.recorded_at)
        elif isinstance(body, McpElicitationAnswered):
            found.open.pop((body.call_id, body.index), None)
            found.answered[(body.call_id, body.index)] = body.decided_by
            if body.answer:
                found.consumed.add(body.answer)
        elif tag == "session.started":
            found.known = True
        else:
            found.ended = True
    return found


async def _answers(
    store: EventStore, session_id: str, from_seq: int = 0
) -> list[tuple[McpFormAnswered, str, int]]:
    """The answers in ``forms/<session>`` from ``from_seq``: (body, hash, seq)."""
    found = []
    async for event in store.read(forms_stream(session_id), from_seq=from_seq):
        body = CODEC.decode(event)
        if isinstance(body, McpFormAnswered):
            found.append((body, event.hash, event.seq))
    return found


def _unconsumed(
    answers: list[tuple[McpFormAnswered, str, int]], consumed: set[str]
) -> list[tuple[McpFormAnswered, str, int]]:
    return [a for a in answers if a[1] not in consumed]


async def pending_forms(store: EventStore, session_id: str | None = None) -> list[PendingForm]:
    """The forms of one session, or of every session not ended, that wait for a human,
    oldest first."""
    if session_id is not None:
        ids = [session_id]
    elif await catalog_current(store):  # the sessions with open forms, indexed
        listing = Listing(limit=None, status=("running", "resumable"))
        rows = await store.list_catalog(listing)  # type: ignore[attr-defined]
        ids = sorted(row.key for row in rows if entry_of(row).forms)
    else:
        ids = [i.stream for i in await store.streams() if is_session_stream(i.stream)]
    pending = []
    for sid in ids:
        forms = await _session_forms(store, sid)
        if forms.ended or not forms.open:
            continue
        for (call_id, index), item in await _unanswered(store, sid, forms):
            params = await store.get_blob(item.asked.params)
            message, schema = check_form(params or b"")
            pending.append(
                PendingForm(
                    session_id=sid,
                    call_id=call_id,
                    index=index,
                    server=item.asked.server,
                    message=message,
                    schema=schema,
                    params=item.asked.params,
                    requested_at=item.recorded_at,
                )
            )
    pending.sort(key=lambda p: (p.requested_at, p.session_id, p.call_id, p.index))
    return pending


def _answers_form(answer: McpFormAnswered, call_id: str, index: int, params: str) -> bool:
    return (answer.call_id, answer.index, answer.params) == (call_id, index, params)


async def _unanswered(
    store: EventStore, session_id: str, forms: _SessionForms
) -> list[tuple[tuple[str, int], _Open]]:
    """The session's open forms that no answer in ``forms/<session>`` fills yet (one
    the session has not taken), by call and index."""
    waiting = _unconsumed(await _answers(store, session_id), forms.consumed)
    return [
        ((call_id, index), item)
        for (call_id, index), item in sorted(forms.open.items())
        if not any(_answers_form(a, call_id, index, item.asked.params) for a, _, _ in waiting)
    ]


async def answer_form(
    store: EventStore,
    session_id: str,
    call_id: str,
    *,
    action: Literal["accept", "decline"],
    values: object = None,
    decided_by: str,
    index: int | None = None,
    clock: Callable[[], int] = time.time_ns,
) -> tuple[McpFormAnswered, str]:
    """Record a human's answer to the pending form of the call ``call_id`` (its
    ``index``-th; the first one pending when None) in ``forms/<session>``; returns the
    answer and its event's hash. ``values`` (``accept`` only): a mapping of the form's
    fields, checked by :func:`check_values`. Raises :class:`FormAnswerError` when no
    such form is pending or the values do not fit; of two answers racing, one is
    recorded and the other refused."""
    forms = await _session_forms(store, session_id)
    if not forms.known:
        raise FormAnswerError(f"no session {session_id!r} in this database; `skillog sessions`")
    if forms.ended:
        raise FormAnswerError(f"session {session_id} has ended; no form of it waits for an answer")
    head = await store.head(forms_stream(session_id))  # before the answers: see append

    def named(key: tuple[str, int]) -> bool:
        return key[0] == call_id and (index is None or key[1] == index)

    which = f"call {call_id}" + ("" if index is None else f" (form {index})")
    for (_, i), item in [f for f in await _unanswered(store, session_id, forms) if named(f[0])]:
        params = await store.get_blob(item.asked.params)
        _, schema = check_form(params or b"")
        content = check_values(values or {}, schema) if action == "accept" else None
        body = McpFormAnswered(
            session=session_id,
            call_id=call_id,
            index=i,
            params=item.asked.params,
            action=action,
            content=content,
            decided_by=decided_by,
        )
        try:
            (event,) = await store.append(
                forms_stream(session_id),
                [CODEC.encode(body, recorded_at=clock())],
                expected_seq=0 if head is None else head.seq + 1,
            )
        except ConcurrencyError as e:
            raise FormAnswerError(
                f"another answer to session {session_id} was recorded meanwhile; nothing was "
                "written: look again with `skillog approvals`"
            ) from e
        return body, event.hash
    taken = [by for key, by in sorted(forms.answered.items()) if named(key)]
    if any(named(key) for key in forms.open):
        given = [
            a.decided_by for a, _, _ in await _answers(store, session_id) if a.call_id == call_id
        ]
        by = f" by {given[-1]}" if given else ""
        raise FormAnswerError(
            f"{which} of session {session_id} is already answered{by}; the session takes "
            "the answer when it goes on"
        )
    if taken:
        raise FormAnswerError(
            f"{which} of session {session_id} was already answered by {taken[-1]}; nothing "
            "was written"
        )
    raise FormAnswerError(
        f"{which} of session {session_id} has no pending form (never asked, answered, or "
        "its call is over); `skillog approvals` lists the pending ones"
    )


class FormWait:
    """A driver's wait for the human answer to one form through ``forms/<session>``:
    :meth:`stored` finds one given earlier (after a restart), :meth:`wait` polls for a
    new one. Reads the session's events only when the forms stream holds answers to
    the same form that may have been taken already."""

    def __init__(self, store: EventStore, session_id: str, call_id: str, index: int, params: str):
        self.store, self.session_id = store, session_id
        self.call_id, self.index, self.params = call_id, index, params
        self._next = 0

    async def stored(self) -> tuple[McpFormAnswered, str] | None:
        """An unconsumed answer to this form, or to the same form of another call."""
        answers = await _answers(self.store, self.session_id)
        self._next = answers[-1][2] + 1 if answers else 0
        same = [a for a in answers if a[0].params == self.params]
        if not same:
            return None
        consumed = (await _session_forms(self.store, self.session_id)).consumed
        left = _unconsumed(same, consumed)
        exact = [a for a in left if (a[0].call_id, a[0].index) == (self.call_id, self.index)]
        found = exact or left
        return (found[0][0], found[0][1]) if found else None

    async def wait(self) -> tuple[McpFormAnswered, str]:
        """The first new answer to this form (cancel the scope to stop waiting)."""
        while True:
            found = await self._new()
            if found is not None:
                return found
            await trio.sleep(POLL_S)

    async def claim(
        self,
        action: Literal["accept", "decline", "cancel"],
        content: str | None,
        decided_by: str,
        clock: Callable[[], int] = time.time_ns,
    ) -> tuple[McpFormAnswered, str, bool]:
        """Record an answer given in the driver's own process (the terminal's) in
        ``forms/<session>`` unless an answer to this form got there first: the stream
        decides which of two racing answers holds, whatever process gave them. Returns
        the answer that holds, its event's hash, and whether it is this one."""
        body = McpFormAnswered(
            session=self.session_id,
            call_id=self.call_id,
            index=self.index,
            params=self.params,
            action=action,
            content=content,
            decided_by=decided_by,
        )
        while True:
            found = await self._new()
            if found is not None:
                return (*found, False)
            try:
                (event,) = await self.store.append(
                    forms_stream(self.session_id),
                    [CODEC.encode(body, recorded_at=clock())],
                    expected_seq=self._next,
                )
            except ConcurrencyError:
                continue  # another answer landed: read it, and try again if not to this form
            self._next = event.seq + 1
            return body, event.hash, True

    async def _new(self) -> tuple[McpFormAnswered, str] | None:
        """The first answer to this form among those recorded since the last look."""
        for answer, digest, seq in await _answers(self.store, self.session_id, self._next):
            self._next = seq + 1
            if _answers_form(answer, self.call_id, self.index, self.params):
                return answer, digest
        return None


def check_answer_refs(
    answered: McpElicitationAnswered, answer: McpFormAnswered | None
) -> str | None:
    """Why a recorded ``mcp.elicitation_answered`` does not match the answer event it
    names (``answer`` None: no such event in ``forms/<session>``), or None."""
    if answer is None:
        return f"it names answer {answered.answer[:16]}…, which is not in the log"
    if answered.content != answer.content:
        return "its values differ from those of the answer it names"
    if (answered.action, answered.decided_by) != (answer.action, answer.decided_by):
        return (
            f"it says {answered.action} by {answered.decided_by!r}, but the answer it names "
            f"says {answer.action} by {answer.decided_by!r}"
        )
    return None
