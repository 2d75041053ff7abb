"""A model that answers from a script: deterministic, offline, for tests and demos."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import trio

from .._model import (
    Delta,
    DeltaSink,
    ModelError,
    ModelRequest,
    ModelResponse,
    TextPart,
    ToolCall,
    Usage,
    encode_canonical,
)
from ._errors import default_retryable
from ._script import ScriptTurn, WhenExhausted, load_script, script_turns

END_OF_SCRIPT = "(end of script)"


def scripted_response(turn: ScriptTurn, index: int, *, model: str) -> ModelResponse:
    """The response for turn ``index`` of a script; raises ``ModelError`` for a failure."""
    if turn.error is not None:
        failure = turn.error
        retryable = failure.retryable
        if retryable is None:
            retryable = default_retryable(failure.kind, failure.status)
        raise ModelError(
            failure.message or f"scripted {failure.kind} failure (turn {index})",
            kind=failure.kind,
            retryable=retryable,
            retry_after_ms=failure.retry_after_ms,
            status=failure.status,
        )
    parts: list[TextPart | ToolCall] = []
    if turn.text is not None:
        parts.append(TextPart(text=turn.text))
    for position, call in enumerate(turn.tool_calls):
        arguments = call.raw_arguments
        if arguments is None:
            arguments = encode_canonical(call.arguments or {}).decode()
        parts.append(
            ToolCall(id=call.id or f"call_{index}_{position}", name=call.name, arguments=arguments)
        )
    stop = turn.stop_reason or ("tool_use" if turn.tool_calls else "end_turn")
    return ModelResponse(
        parts=tuple(parts),
        stop_reason=stop,
        usage=turn.usage or Usage(),
        model=model,
        id=f"scripted_{index}",
    )


class ScriptedModel:
    """A :class:`ModelAdapter` that answers each call with the next scripted turn.

    Responses depend only on the script and the call count, never on the request (its
    ``model`` is echoed): the same script gives the same responses byte for byte. Tool
    call ids are ``call_<turn>_<index>`` unless the script names them. After the last
    turn, ``when_exhausted="end"`` answers ``(end of script)`` with stop reason
    ``end_turn`` on every further call, so a loop always terminates; ``"raise"`` raises
    a non-retryable ``ModelError`` instead. One instance serves one session.

    With ``follow_history`` (what :meth:`from_file` gives, so ``skillog resume`` of a
    scripted session needs nothing more), the first call skips the turns whose answers
    the request's history already holds: a resumed session continues the script where
    it stopped instead of starting it again.
    """

    def __init__(
        self,
        turns: Sequence[ScriptTurn | Mapping[str, Any]],
        *,
        when_exhausted: WhenExhausted = "end",
        follow_history: bool = False,
    ) -> None:
        """``turns`` are :class:`ScriptTurn` structs or mappings in the file format;
        invalid ones raise :class:`ScriptError` naming the turn."""
        self._turns = script_turns(turns)
        self._when_exhausted = when_exhausted
        self._follow_history = follow_history
        self._next = 0

    @classmethod
    def from_file(cls, path: str | Path) -> ScriptedModel:
        """Load a YAML or JSON script (see docs/adapters.md); reads the file now."""
        script = load_script(path)
        return cls(script.turns, when_exhausted=script.when_exhausted, follow_history=True)

    @property
    def provider(self) -> str:
        return "skillog.scripted"

    @property
    def turns(self) -> tuple[ScriptTurn, ...]:
        return self._turns

    @property
    def calls(self) -> int:
        """How many times :meth:`complete` has been called."""
        return self._next

    def _answered(self, request: ModelRequest) -> int:
        """The index of the first turn whose answer is not in the request's history:
        each answered turn left one assistant message; a failure turn left none."""
        answers = sum(1 for m in request.messages if m.role == "assistant")
        index = 0
        while index < len(self._turns) and answers > 0:
            answers -= self._turns[index].error is None
            index += 1
        return index

    async def stream(self, request: ModelRequest, on_delta: DeltaSink) -> ModelResponse:
        """:meth:`complete`, its text and calls also sent as deltas (text in pieces of
        up to 16 characters, each after the turn's ``stream_delay_ms``), for testing
        what observers see."""
        response = await self.complete(request)
        at_turn = self._next - 1  # the turn complete() answered with
        delay = self._turns[at_turn].stream_delay_ms if at_turn < len(self._turns) else 0
        for index, part in enumerate(response.parts):
            if isinstance(part, TextPart):
                for at in range(0, len(part.text), 16):
                    if delay:
                        await trio.sleep(delay / 1000)
                    on_delta(Delta(kind="text", index=index, text=part.text[at : at + 16]))
            else:
                on_delta(Delta(kind="tool_call", index=index, call_id=part.id, name=part.name))
                on_delta(Delta(kind="tool_call", index=index, text=part.arguments))
        return response

    async def complete(self, request: ModelRequest) -> ModelResponse:
        await trio.lowlevel.checkpoint()
        if self._follow_history and self._next == 0:
            self._next = self._answered(request)
        index = self._next
        self._next += 1
        if index < len(self._turns):
            return scripted_response(self._turns[index], index, model=request.model)
        if self._when_exhausted == "raise":
            raise ModelError(
                f"the model script has {len(self._turns)} turns and call {index} asked for "
                "another; add turns or use when_exhausted: end",
                kind="other",
            )
        return ModelResponse(
            parts=(TextPart(text=END_OF_SCRIPT),),
            stop_reason="end_turn",
            model=request.model,
            id=f"scripted_{index}",
        )
