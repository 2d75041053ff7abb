"""Host tools: the embedding program's own Python functions, offered to the model.

A plain async or sync function with typed parameters becomes a tool whose JSON Schema is
derived from its signature (through a msgspec Struct built from the parameters) and whose
description is its docstring. Arguments are validated by msgspec before the function
runs; whatever goes wrong (bad arguments, an exception, an unencodable result) comes
back as an error result the model can read, never as an exception to the loop.
"""

from __future__ import annotations

import copy
import functools
import inspect
import re
import types
import typing
from collections.abc import Callable
from typing import Any

import msgspec
import trio

from eventlog import SkillogError

from ._events import EffectClass, ToolDef
from ._model import ToolSpec, encode_canonical

MAX_ARGUMENTS_BYTES = 256 * 1024
"""Arguments longer than this (UTF-8 bytes) are refused before they are parsed."""

INVALID_ARGUMENTS = "invalid_arguments"
"""``error_type`` of a result whose arguments were refused (too large, not JSON, not
matching the schema). Errors raised by the function carry the exception's class name."""

INVALID_RESULT = "invalid_result"
"""``error_type`` of a result the function returned but that cannot be sent as text."""

_NAME = re.compile(r"[A-Za-z][A-Za-z0-9_-]*(?:\.[A-Za-z0-9_-]+)*")
_MAX_NAME = 64
_RESERVED = "skills."
# The generated Struct's name never reaches the schema (its definition is hoisted to the
# top), but it must not collide with a Struct the user's parameters use.
_ARGUMENTS_STRUCT = "SkillogHostToolArguments__"


class HostToolError(SkillogError):
    """A function cannot be made into a host tool; the message names the function, the
    parameter and what to change."""


class ToolContext(msgspec.Struct, frozen=True, kw_only=True):
    """What a host tool learns about the call it serves: the session, the call id, the
    names of the active skills in load order, and the call's idempotency key (the same
    for every run of this call, in any process: pass it on to the outside system so a
    re-run after a crash is recognised there). A function receives it through a
    parameter annotated ``ToolContext``, which is left out of the schema."""

    session_id: str
    call_id: str
    active_skills: tuple[str, ...] = ()
    idempotency_key: str = ""


class ToolOutcome(msgspec.Struct, frozen=True, kw_only=True):
    """The outcome of one invocation: the text the model reads, whether it is an error,
    and if so its type (:data:`INVALID_ARGUMENTS`, :data:`INVALID_RESULT`, or the class
    name of the exception the function raised)."""

    content: str
    is_error: bool = False
    error_type: str | None = None


class HostTool:
    """A function the model can call. Make one with :meth:`from_function`."""

    def __init__(
        self,
        *,
        name: str,
        description: str,
        fn: Callable[..., Any],
        arguments: type[msgspec.Struct],
        input_schema: dict[str, Any],
        positional: tuple[str, ...],
        context_parameter: str | None,
        effect: EffectClass = "at-most-once",
        destructive: bool = False,
    ) -> None:
        self.name = name
        self.effect = effect
        self.destructive = destructive
        self.description = description
        self.input_schema = input_schema
        self._fn = fn
        self._fields: tuple[str, ...] = arguments.__struct_fields__
        self._decoder = msgspec.json.Decoder(arguments)
        self._positional = positional
        self._context_parameter = context_parameter
        self._is_async = _is_async(fn)

    @classmethod
    def from_function(
        cls,
        fn: Callable[..., Any],
        *,
        name: str | None = None,
        description: str | None = None,
        effect: EffectClass = "at-most-once",
        destructive: bool = False,
    ) -> HostTool:
        """Make a tool from an async or sync function.

        Every parameter needs a type msgspec can validate (``str``, ``int``, ``bool``,
        ``float``, ``list[str]``, ``Literal[...]``, ``X | None``, msgspec Structs, and
        ``Annotated[..., msgspec.Meta(description=...)]`` for per-field help); defaults
        make a field optional. A parameter annotated :class:`ToolContext` receives the
        call's context (with the idempotency key). ``effect`` is what the tool does to
        the world, which decides what resume does with a call the process was running
        when it stopped (docs/effects.md): ``"at-most-once"`` (the default, the safe one)
        never runs it again, ``"idempotent"`` runs it again with the same idempotency
        key, ``"pure"`` (read-only) runs it again. ``destructive`` marks a tool whose
        calls cannot be taken back (delete, send, pay): each asks for an approval
        whatever the tier (``policy.ask_destructive``). ``name`` defaults to the function's
        name (letters, digits, ``_``, ``-`` and dots, at most 64 characters;
        ``skills.*`` is the runtime's), and ``description`` to its docstring. Raises
        :class:`HostToolError` when the function
        cannot be described.
        """
        tool_name = name if name is not None else getattr(fn, "__name__", "")
        where = f"host tool {tool_name or fn!r}"
        _check_name(tool_name, where)
        text = description if description is not None else inspect.getdoc(fn)
        if not text or not text.strip():
            raise HostToolError(
                f"{where} has no description: give the function a docstring or pass description=..."
            )
        arguments, input_schema, positional, context_parameter = _describe(fn, where)
        return cls(
            name=tool_name,
            description=text.strip(),
            fn=fn,
            arguments=arguments,
            input_schema=input_schema,
            positional=positional,
            context_parameter=context_parameter,
            effect=_check_effect(effect, where),
            destructive=bool(destructive),
        )

    @property
    def spec(self) -> ToolSpec:
        """The tool as offered to the model."""
        return ToolSpec(
            name=self.name, description=self.description, input_schema=self.input_schema
        )

    def definition(self) -> ToolDef:
        """The tool as the log records it: the schema as canonical JSON text (sorted
        keys, no floats)."""
        return ToolDef(
            name=self.name,
            description=self.description,
            input_schema=encode_canonical(self.input_schema).decode(),
            effect=self.effect,
            destructive=self.destructive,
        )

    async def invoke(self, arguments_json: str, context: ToolContext) -> ToolOutcome:
        """Validate the arguments, run the function and return what the model will read.

        Never raises for anything the model or the function did: arguments over
        :data:`MAX_ARGUMENTS_BYTES`, invalid JSON, a non-object, a wrong type or an
        unknown field give an :data:`INVALID_ARGUMENTS` result naming the field; an
        exception from the function gives a result naming its type and message. A sync
        function runs in a worker thread so it cannot block the trio loop. A ``str``
        return value is the content as is; anything else is encoded as canonical JSON.
        Cancellation propagates.
        """
        parsed = self._parse(arguments_json)
        if isinstance(parsed, ToolOutcome):
            return parsed
        values = {field: getattr(parsed, field) for field in self._fields}
        if self._context_parameter is not None:
            values[self._context_parameter] = context
        args = [values.pop(p) for p in self._positional]
        call = functools.partial(self._fn, *args, **values)
        try:
            if self._is_async:
                value = await call()
            else:
                value = await trio.to_thread.run_sync(call)
        except Exception as e:
            # Any failure of the host's code is the model's to read, not the loop's to die of.
            detail = f": {e}" if str(e) else ""
            return ToolOutcome(
                content=f"tool {self.name} raised {type(e).__name__}{detail}",
                is_error=True,
                error_type=type(e).__name__,
            )
        return self._result(value)

    def _parse(self, text: str) -> msgspec.Struct | ToolOutcome:
        size = len(text.encode("utf-8", "surrogatepass"))
        if size > MAX_ARGUMENTS_BYTES:
            return self._refuse(
                f"the arguments are {size} bytes; the limit is {MAX_ARGUMENTS_BYTES} bytes"
            )
        try:
            parsed: msgspec.Struct = self._decoder.decode(text)
        except msgspec.ValidationError as e:
            return self._refuse(f"{e}; the arguments must be a JSON object matching the schema")
        except msgspec.DecodeError as e:
            return self._refuse(f"the arguments are not valid JSON ({e})")
        except RecursionError:
            return self._refuse("the arguments nest too deeply")
        return parsed

    def _refuse(self, reason: str) -> ToolOutcome:
        return ToolOutcome(
            content=f"invalid arguments for tool {self.name}: {reason}",
            is_error=True,
            error_type=INVALID_ARGUMENTS,
        )

    def _result(self, value: object) -> ToolOutcome:
        if isinstance(value, str):
            return ToolOutcome(content=value)
        if inspect.iscoroutine(value):
            value.close()
            return self._bad_result("it returned a coroutine; declare the function async def")
        try:
            return ToolOutcome(content=encode_canonical(value).decode())
        except (TypeError, ValueError, OverflowError) as e:
            return self._bad_result(f"its result cannot be encoded as JSON ({e})")

    def _bad_result(self, reason: str) -> ToolOutcome:
        return ToolOutcome(
            content=f"tool {self.name} failed: {reason}", is_error=True, error_type=INVALID_RESULT
        )


_EFFECTS: tuple[EffectClass, ...] = ("pure", "idempotent", "at-most-once")


def _check_effect(effect: str, where: str) -> EffectClass:
    for known in _EFFECTS:
        if effect == known:
            return known
    raise HostToolError(f"{where}: effect must be one of {', '.join(_EFFECTS)}, not {effect!r}")


def _is_async(fn: Callable[..., Any]) -> bool:
    return inspect.iscoroutinefunction(fn) or inspect.iscoroutinefunction(
        getattr(fn, "__call__", None)  # noqa: B004 - an object whose __call__ is async
    )


def _check_name(name: str, where: str) -> None:
    if not name or len(name) > _MAX_NAME or not _NAME.fullmatch(name):
        raise HostToolError(
            f"{where}: the name must start with a letter and hold only letters, digits, "
            f"'_', '-' and single dots between parts, at most {_MAX_NAME} characters; "
            "pass name=..."
        )
    if name.startswith(_RESERVED):
        raise HostToolError(f"{where}: names starting with {_RESERVED!r} belong to the runtime")


_Field = tuple[str, Any] | tuple[str, Any, Any]


_Described = tuple[type[msgspec.Struct], dict[str, Any], tuple[str, ...], str | None]
_DESCRIBED: dict[object, _Described] = {}
_MAX_DESCRIBED = 1024


def _describe(fn: Callable[..., Any], where: str) -> _Described:
    """The arguments Struct of ``fn``'s parameters, its JSON Schema, the positional-only
    parameters and the :class:`ToolContext` one. Remembered per :func:`_described_by`:
    an agent factory that defines its tools again for every session (closures) would
    otherwise derive the same Struct and schema each time (profiled: a tenth of a fleet
    worker's trio-thread CPU per trivial session). The tools described alike share the
    Struct and the schema dict, which nothing mutates."""
    key = _described_by(fn)
    found = _DESCRIBED.get(key) if key is not None else None
    if found is not None:
        return found
    fields, positional, context_parameter = _fields(fn, where)
    try:
        arguments = msgspec.defstruct(
            _ARGUMENTS_STRUCT, fields, kw_only=True, forbid_unknown_fields=True, frozen=True
        )
    except (TypeError, ValueError) as e:
        raise HostToolError(f"{where}: cannot describe the parameters: {e}") from e
    described = (arguments, _input_schema(arguments, where), positional, context_parameter)
    if key is not None:
        if len(_DESCRIBED) >= _MAX_DESCRIBED:
            _DESCRIBED.clear()
        _DESCRIBED[key] = described
    return described


def _described_by(fn: Callable[..., Any]) -> object | None:
    """What decides a plain function's description: its code (the parameters' names and
    kinds), its annotations, its defaults (with their types: ``1`` and ``True`` are equal)
    and the globals string annotations are evaluated in. None (not remembered) for
    anything else (a callable object, a wrapper that carries ``__wrapped__`` or
    ``__signature__``) and for unhashable defaults or annotations."""
    if type(fn) is not types.FunctionType:
        return None
    if hasattr(fn, "__wrapped__") or hasattr(fn, "__signature__"):
        return None
    defaults = tuple((type(v), v) for v in fn.__defaults__ or ())
    kwdefaults = tuple((k, type(v), v) for k, v in (fn.__kwdefaults__ or {}).items())
    key = (fn.__code__, tuple(fn.__annotations__.items()), defaults, kwdefaults,
           id(fn.__globals__))  # fmt: skip
    try:
        hash(key)
    except TypeError:
        return None
    return key


def _is_context(annotation: Any) -> bool:
    """``ToolContext``, or ``ToolContext | None`` (which lets it follow defaults)."""
    if annotation is ToolContext:
        return True
    args = set(typing.get_args(annotation))
    union = typing.get_origin(annotation) in (typing.Union, types.UnionType)
    return union and args == {ToolContext, type(None)}


def _fields(fn: Callable[..., Any], where: str) -> tuple[list[_Field], tuple[str, ...], str | None]:
    """The schema fields of ``fn``'s parameters, the positional-only ones, and the name of
    the parameter that takes the :class:`ToolContext`."""
    try:
        signature = inspect.signature(fn, eval_str=True)
    except (NameError, TypeError, ValueError) as e:
        raise HostToolError(f"{where}: cannot read the function's signature: {e}") from e
    fields: list[_Field] = []
    positional: list[str] = []
    context_parameter = None
    for parameter in signature.parameters.values():
        at = f"{where}, parameter {parameter.name!r}"
        if parameter.kind in (parameter.VAR_POSITIONAL, parameter.VAR_KEYWORD):
            raise HostToolError(f"{at}: *args and **kwargs cannot be described; name each one")
        if parameter.kind == parameter.POSITIONAL_ONLY:
            positional.append(parameter.name)
        annotation = parameter.annotation
        if _is_context(annotation):
            context_parameter = parameter.name
            continue
        if annotation is parameter.empty:
            raise HostToolError(f"{at}: has no type annotation; the schema needs one")
        try:
            msgspec.json.schema(annotation)
        except Exception as e:  # msgspec raises TypeError, or worse, for what it cannot type
            raise HostToolError(f"{at}: type {annotation!r} cannot be validated: {e}") from e
        default = parameter.default
        if default is parameter.empty:
            fields.append((parameter.name, annotation))
        elif isinstance(default, list | dict | set | bytearray) and default:
            # msgspec refuses shared mutable defaults; each call gets its own copy.
            factory = functools.partial(copy.deepcopy, default)
            fields.append((parameter.name, annotation, msgspec.field(default_factory=factory)))
        else:
            fields.append((parameter.name, annotation, default))
    return fields, tuple(positional), context_parameter


def _input_schema(arguments: type[msgspec.Struct], where: str) -> dict[str, Any]:
    """The JSON Schema of the arguments: an object at the top (providers want one),
    nested Structs kept in ``$defs``, and no floats (see :func:`_float_free`)."""
    try:
        schema = msgspec.json.schema(arguments)
    except Exception as e:  # a name clash between nested Structs surfaces as a KeyError
        raise HostToolError(f"{where}: cannot derive a JSON Schema: {e!r}") from e
    defs = dict(schema["$defs"])
    top: dict[str, Any] = dict(defs.pop(_ARGUMENTS_STRUCT))
    top.pop("title", None)
    if defs:
        top["$defs"] = defs
    result: dict[str, Any] = _float_free(top, "$", where)
    return result


def _float_free(node: Any, path: str, where: str, *, names: bool = False) -> Any:
    """``node`` without floats, so the schema hashes the same everywhere: whole floats
    become ints, a default holding a fraction is left out of the schema (the function
    still applies it), any other fraction is refused. ``names`` marks a map from names to
    schemas (``properties``, ``$defs``), whose keys are not schema keywords."""
    if isinstance(node, float):
        if node.is_integer():
            return int(node)
        raise HostToolError(
            f"{where}: the schema holds the fraction {node!r} at {path}; schemas must be "
            "float-free, so use integer bounds"
        )
    if isinstance(node, dict):
        return {
            key: _float_free(value, f"{path}.{key}", where, names=not names and key in _NAME_MAPS)
            for key, value in node.items()
            if names or not (key == "default" and _has_fraction(value))
        }
    if isinstance(node, list):
        return [_float_free(item, f"{path}[{i}]", where) for i, item in enumerate(node)]
    return node


_NAME_MAPS = frozenset({"properties", "$defs"})


def _has_fraction(node: Any) -> bool:
    if isinstance(node, float):
        return not node.is_integer()
    if isinstance(node, dict):
        return any(_has_fraction(v) for v in node.values())
    if isinstance(node, list):
        return any(_has_fraction(v) for v in node)
    return False
