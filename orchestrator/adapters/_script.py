"""The model script format: turns a :class:`ScriptedModel` answers with, in order.

A script is data (YAML or JSON, or the same shapes built in code); docs/adapters.md
describes the format with an example. Each rule lives in a ``__post_init__`` so it holds
for files and for code alike, and a broken file is reported at its ``$.turns[N]`` path.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Annotated, Any, Literal

import msgspec
import yaml

from .._model import ModelErrorKind, StopReason, Usage
from ._errors import ScriptError

WhenExhausted = Literal["end", "raise"]

_Name = Annotated[str, msgspec.Meta(min_length=1)]
_NonNegative = Annotated[int, msgspec.Meta(ge=0)]


class ScriptToolCall(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """One tool call of a scripted turn.

    ``arguments`` (an object) is sent as canonical JSON, keys sorted; ``raw_arguments``
    is sent verbatim, to script a malformed call. Neither means ``{}``. ``id`` defaults
    to ``call_<turn>_<index>``.
    """

    name: _Name
    arguments: dict[str, Any] | None = None
    raw_arguments: str | None = None
    id: _Name | None = None

    def __post_init__(self) -> None:
        if self.arguments is not None and self.raw_arguments is not None:
            raise ValueError("give `arguments` or `raw_arguments`, not both")


class ScriptFailure(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """A scripted failure: the turn raises ``ModelError`` with these fields.
    ``retryable`` defaults to what the adapters report for that kind (and status)."""

    kind: ModelErrorKind
    message: str = ""
    retryable: bool | None = None
    retry_after_ms: _NonNegative | None = None
    status: Annotated[int, msgspec.Meta(ge=100, le=599)] | None = None


class ScriptTurn(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """One answer of the scripted model: text and/or tool calls, a failure, or an empty
    response. ``stop_reason`` defaults to ``tool_use`` when there are tool calls, else
    ``end_turn``; ``usage`` to zero tokens. ``stream_delay_ms``: when streamed, wait
    this long before each piece (a slow model, for watching previews)."""

    text: str | None = None
    tool_calls: tuple[ScriptToolCall, ...] = ()
    stop_reason: StopReason | None = None
    usage: Usage | None = None
    error: ScriptFailure | None = None
    empty: bool = False
    stream_delay_ms: _NonNegative = 0

    def __post_init__(self) -> None:
        says = self.text is not None or bool(self.tool_calls)
        if self.error is not None and (says or self.empty or self.stop_reason or self.usage):
            raise ValueError("a turn with `error` fails: it cannot also answer")
        if self.empty and says:
            raise ValueError("an `empty: true` turn cannot have text or tool_calls")
        if not (says or self.empty or self.error is not None):
            raise ValueError(
                "the turn says nothing: give `text`, `tool_calls`, `error` or `empty: true`"
            )


class Script(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """A whole script. ``when_exhausted``: after the last turn, ``end`` answers a final
    text turn (stop reason ``end_turn``) every time; ``raise`` raises ``ModelError``."""

    turns: tuple[ScriptTurn, ...]
    when_exhausted: WhenExhausted = "end"


_TURN_PATH = re.compile(r"\$\.turns\[(\d+)\]")


def parse_script(data: object, *, source: str) -> Script:
    """Validate decoded script data (a mapping, as read from YAML or JSON).

    Raises :class:`ScriptError` naming ``source``, the turn and the field.
    """
    try:
        return msgspec.convert(data, Script)
    except msgspec.ValidationError as e:
        message = str(e)
        turn = _TURN_PATH.search(message)
        where = f" in turn {turn.group(1)}" if turn else ""
        raise ScriptError(f"{source}: invalid model script{where}: {message}") from e


def script_turns(turns: Sequence[ScriptTurn | Mapping[str, Any]]) -> tuple[ScriptTurn, ...]:
    """Turns given in code, as structs or as plain mappings in the file format."""
    if all(isinstance(t, ScriptTurn) for t in turns):
        return tuple(t for t in turns if isinstance(t, ScriptTurn))
    raw = [msgspec.to_builtins(t) if isinstance(t, ScriptTurn) else t for t in turns]
    return parse_script({"turns": raw}, source="<code>").turns


def load_script(path: str | Path) -> Script:
    """Read and validate a script file: JSON when the name ends in ``.json``, else YAML.

    This reads a small file synchronously: call it while setting up, or through
    ``trio.to_thread.run_sync`` from inside a running loop.
    """
    path = Path(path)
    try:
        data = path.read_bytes()
    except OSError as e:
        raise ScriptError(f"{path}: cannot read the model script: {e.strerror or e}") from e
    return _script_of(str(path), path.suffix == ".json", data)


@functools.lru_cache(maxsize=16)
def _script_of(source: str, is_json: bool, data: bytes) -> Script:
    """The script in ``data``, parsed once per content: ``serve`` builds an agent (and
    so reads its scripted model) for every submission, and the pure-Python YAML parser
    took most of that. The file is read every time, so an edit is seen at once; the
    result is frozen, shared by every model built from the same bytes."""
    try:
        decoded: object = msgspec.json.decode(data) if is_json else yaml.safe_load(data)
    except (msgspec.DecodeError, yaml.YAMLError) as e:
        kind = "JSON" if is_json else "YAML"
        raise ScriptError(f"{source}: the model script is not valid {kind}: {e}") from e
    return parse_script(decoded, source=source)
