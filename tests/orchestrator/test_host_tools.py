"""Host tools: schemas from signatures, validated invocation, errors as results."""

from __future__ import annotations

import json
import threading
from typing import Annotated, Any, Literal

import msgspec
import pytest
import trio
import trio.testing

from orchestrator._events import ToolDef
from orchestrator._host_tools import (
    INVALID_ARGUMENTS,
    INVALID_RESULT,
    MAX_ARGUMENTS_BYTES,
    HostTool,
    HostToolError,
    ToolContext,
    ToolOutcome,
)
from orchestrator._model import ToolSpec, encode_canonical

CONTEXT = ToolContext(session_id="s-1", call_id="call_0_0", active_skills=("pdf", "forms"))


class Address(msgspec.Struct, frozen=True):
    city: str
    zip: str | None = None


async def lookup(
    city: str,
    days: int,
    context: ToolContext,
    units: Literal["metric", "imperial"] = "metric",
    alerts: bool = False,
    tags: list[str] | None = None,
    ratio: float = 1.0,
    note: Annotated[str, msgspec.Meta(description="Shown to the user.")] = "",
) -> dict[str, Any]:
    """Look up the weather.

    Returns a forecast.
    """
    return {"city": city, "days": days, "units": units, "alerts": alerts, "tags": tags,
            "ratio": ratio, "note": note, "skills": list(context.active_skills)}  # fmt: skip


def tool(fn: Any, **kwargs: Any) -> HostTool:
    return HostTool.from_function(fn, **kwargs)


def no_floats(node: Any) -> bool:
    if isinstance(node, float):
        return False
    if isinstance(node, dict):
        return all(no_floats(v) for v in node.values())
    if isinstance(node, list):
        return all(no_floats(v) for v in node)
    return True


def test_schema_from_the_signature() -> None:
    t = tool(lookup)
    assert (t.name, t.description) == ("lookup", "Look up the weather.\n\nReturns a forecast.")
    assert t.input_schema == {
        "type": "object",
        "properties": {
            "city": {"type": "string"},
            "days": {"type": "integer"},
            "units": {"enum": ["imperial", "metric"], "default": "metric"},
            "alerts": {"type": "boolean", "default": False},
            "tags": {
                "anyOf": [{"type": "array", "items": {"type": "string"}}, {"type": "null"}],
                "default": None,
            },
            "ratio": {"type": "number", "default": 1},  # a whole float default becomes an int
            "note": {"type": "string", "default": "", "description": "Shown to the user."},
        },
        "required": ["city", "days"],
        "additionalProperties": False,
    }
    assert t.spec == ToolSpec(name="lookup", description=t.description, input_schema=t.input_schema)
    assert t.definition() == ToolDef(
        name="lookup",
        description=t.description,
        input_schema=encode_canonical(t.input_schema).decode(),
    )


def test_schemas_are_deterministic_and_float_free() -> None:
    def f(
        where: Address,
        scale: float = 0.5,
        weights: list[float] = [0.25],  # noqa: B006 - the case under test
        n: int = 3,
    ) -> str:
        """Scale."""
        return ""

    first, second = tool(f), tool(f)
    assert encode_canonical(first.input_schema) == encode_canonical(second.input_schema)
    schema = first.input_schema
    assert no_floats(schema)
    # fractional defaults are left out of the schema (the function still applies them)
    assert schema["properties"]["scale"] == {"type": "number"}
    assert schema["properties"]["weights"] == {"type": "array", "items": {"type": "number"}}
    assert schema["properties"]["n"] == {"type": "integer", "default": 3}
    assert schema["properties"]["where"] == {"$ref": "#/$defs/Address"}
    assert schema["$defs"]["Address"]["required"] == ["city"]


def test_a_function_defined_again_is_described_once_and_only_when_the_same() -> None:
    """An agent factory that defines its tools for every session: the description is
    derived once per distinct signature (same code, annotations, defaults), never shared
    between functions whose annotations or defaults differ."""

    def define(kind: Any, default: Any) -> Any:
        def step(n=default):  # type: ignore[no-untyped-def]
            """One step."""
            return ""

        step.__annotations__ = {"n": kind, "return": str}  # as evaluated at definition
        return step

    first, again = tool(define(int, 1)), tool(define(int, 1))
    assert first.input_schema is again.input_schema  # derived once
    assert first.input_schema == again.input_schema
    other_type = tool(define(str, "1"))
    assert other_type.input_schema["properties"]["n"] == {"type": "string", "default": "1"}
    assert first.input_schema["properties"]["n"] == {"type": "integer", "default": 1}
    truthy = tool(define(int, True))  # equal to 1, yet a different default
    assert truthy.input_schema is not first.input_schema
    assert truthy.input_schema["properties"]["n"]["default"] is True


def test_a_property_named_default_is_not_mistaken_for_the_keyword() -> None:
    def f(default: float = 0.5, properties: str = "x") -> str:
        """Odd names."""
        return ""

    assert tool(f).input_schema["properties"] == {
        "default": {"type": "number"},
        "properties": {"type": "string", "default": "x"},
    }


def test_fractional_constraints_are_refused() -> None:
    def f(p: Annotated[float, msgspec.Meta(ge=0.5)]) -> str:
        """Bounded."""
        return ""

    with pytest.raises(HostToolError, match=r"fraction 0\.5 at \$\.properties\.p\.minimum"):
        tool(f)


async def test_invoke_validates_passes_context_and_encodes_the_result() -> None:
    outcome = await tool(lookup).invoke('{"city": "Oslo", "days": 2, "tags": ["x"]}', CONTEXT)
    assert outcome.is_error is False and outcome.error_type is None
    assert json.loads(outcome.content) == {
        "city": "Oslo", "days": 2, "units": "metric", "alerts": False, "tags": ["x"],
        "ratio": 1.0, "note": "", "skills": ["pdf", "forms"],
    }  # fmt: skip
    # canonical JSON: keys sorted, no spaces
    assert outcome.content.startswith('{"alerts":false,"city":"Oslo"')


@pytest.mark.parametrize(
    ("value", "content"),
    [
        ("plain text", "plain text"),
        (None, "null"),
        ([3, 1], "[3,1]"),
        (Address("Oslo"), '{"city":"Oslo","zip":null}'),
    ],
)
async def test_return_values(value: Any, content: str) -> None:
    async def f() -> Any:
        """Return something."""
        return value

    assert await tool(f).invoke("{}", CONTEXT) == ToolOutcome(content=content)


async def test_unencodable_results_are_errors() -> None:
    def f() -> object:
        """Return an object."""
        return object()

    async def g() -> int:
        """Return a coroutine by mistake."""
        return 1

    async def h() -> Any:
        """Hand back a coroutine instead of its value."""
        return g()

    for fn, fragment in [(f, "cannot be encoded as JSON"), (h, "returned a coroutine")]:
        outcome = await tool(fn).invoke("{}", CONTEXT)
        assert (outcome.is_error, outcome.error_type) == (True, INVALID_RESULT)
        assert fragment in outcome.content

    def k() -> Any:
        """A sync function handing back a coroutine: trio refuses it in the worker."""
        return g()

    outcome = await tool(k).invoke("{}", CONTEXT)
    assert (outcome.is_error, outcome.error_type) == (True, "TypeError")


async def test_sync_functions_run_in_a_worker_thread_without_blocking_the_loop() -> None:
    started = trio.Event()
    release = threading.Event()
    threads: list[str] = []

    def blocking(label: str) -> str:
        """Block until released."""
        threads.append(threading.current_thread().name)
        # Only a loop that is still running can run this while the function blocks.
        trio.from_thread.run_sync(started.set)
        assert release.wait(5)
        return label

    results: list[ToolOutcome] = []

    async def call() -> None:
        results.append(await tool(blocking).invoke('{"label": "done"}', CONTEXT))

    with trio.fail_after(5):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(call)
            await started.wait()
            release.set()
    assert results == [ToolOutcome(content="done")]
    assert threads[0] != threading.main_thread().name


async def test_exceptions_become_readable_error_results() -> None:
    async def failing(path: str) -> str:
        """Fail."""
        raise FileNotFoundError(f"no file {path}")

    def silent() -> str:
        """Fail without a message."""
        raise RuntimeError

    outcome = await tool(failing).invoke('{"path": "a.txt"}', CONTEXT)
    assert outcome == ToolOutcome(
        content="tool failing raised FileNotFoundError: no file a.txt",
        is_error=True,
        error_type="FileNotFoundError",
    )
    outcome = await tool(silent).invoke("{}", CONTEXT)
    assert (outcome.content, outcome.error_type) == (
        "tool silent raised RuntimeError",
        "RuntimeError",
    )


async def test_cancellation_propagates(autojump_clock: trio.testing.MockClock) -> None:
    async def slow() -> str:
        """Sleep."""
        await trio.sleep(60)
        return "late"

    with trio.move_on_after(1) as scope:
        await tool(slow).invoke("{}", CONTEXT)
    assert scope.cancelled_caught


def nest(depth: int) -> str:
    return '{"city": "x", "days": 1, "tags": ' + "[" * depth + "]" * depth + "}"


HOSTILE = {
    "wrong type": ('{"city": "Oslo", "days": "2"}', "Expected `int`, got `str` - at `$.days`"),
    "bool for int": ('{"city": "Oslo", "days": true}', "Expected `int`, got `bool` - at `$.days`"),
    "float for int": ('{"city": "Oslo", "days": 2.0}', "Expected `int`, got `float` - at `$.days`"),
    "missing": ('{"city": "Oslo"}', "Object missing required field `days`"),
    "extra field": ('{"city": "x", "days": 1, "admin": true}', "unknown field `admin`"),
    "bad literal": ('{"city": "x", "days": 1, "units": "kelvin"}', "Invalid enum value 'kelvin'"),
    "nested type": ('{"city": "x", "days": 1, "tags": [1]}', "at `$.tags[0]`"),
    "NaN": ('{"city": "x", "days": 1, "ratio": NaN}', "not valid JSON"),
    "Infinity": ('{"city": "x", "days": 1, "ratio": Infinity}', "not valid JSON"),
    "huge number": ('{"city": "x", "days": 1, "ratio": 1e999}', "Number out of range"),
    "array": ("[1, 2]", "Expected `object`, got `array`"),
    "string": ('"Oslo"', "Expected `object`, got `str`"),
    "null": ("null", "Expected `object`, got `null`"),
    "empty": ("", "not valid JSON"),
    "truncated": ('{"city": "Os', "not valid JSON"),
    "trailing": ('{"city": "x", "days": 1} {}', "not valid JSON"),
    "deep nesting": (nest(5000), "at `$.tags[0]`"),
    "context injected": ('{"city": "x", "days": 1, "context": {}}', "unknown field `context`"),
}


@pytest.mark.parametrize(("arguments", "fragment"), HOSTILE.values(), ids=HOSTILE.keys())
async def test_hostile_arguments_are_refused_readably(arguments: str, fragment: str) -> None:
    outcome = await tool(lookup).invoke(arguments, CONTEXT)
    assert (outcome.is_error, outcome.error_type) == (True, INVALID_ARGUMENTS)
    assert outcome.content.startswith("invalid arguments for tool lookup: ")
    assert fragment in outcome.content


async def test_deep_nesting_into_an_untyped_parameter_is_refused() -> None:
    def f(blob: Any = None) -> str:
        """Take anything."""
        return "ran"

    deep = '{"blob": ' + "[" * 200_000 + "]" * 200_000 + "}"
    outcome = await tool(f).invoke(deep[: MAX_ARGUMENTS_BYTES - 2] + "}", CONTEXT)
    assert (outcome.is_error, outcome.error_type) == (True, INVALID_ARGUMENTS)
    nested = '{"blob": ' + "[" * 50_000 + "]" * 50_000 + "}"
    outcome = await tool(f).invoke(nested, CONTEXT)
    assert outcome.error_type == INVALID_ARGUMENTS
    assert "nest too deeply" in outcome.content


async def test_oversized_arguments_are_refused_before_parsing() -> None:
    def f(text: str) -> int:
        """Measure."""
        return len(text)

    fits = '{"text": "' + "a" * (MAX_ARGUMENTS_BYTES - 12) + '"}'
    assert len(fits.encode()) == MAX_ARGUMENTS_BYTES
    assert await tool(f).invoke(fits, CONTEXT) == ToolOutcome(content=str(MAX_ARGUMENTS_BYTES - 12))
    # multi-byte characters count as bytes, not characters
    over = '{"text": "' + "é" * (MAX_ARGUMENTS_BYTES // 2) + '"}'
    outcome = await tool(f).invoke(over, CONTEXT)
    assert outcome.error_type == INVALID_ARGUMENTS
    assert f"the limit is {MAX_ARGUMENTS_BYTES} bytes" in outcome.content


async def test_an_optional_context_parameter_also_receives_the_context() -> None:
    def who(name: str = "x", ctx: ToolContext | None = None) -> str:
        """Say who calls."""
        assert ctx is not None
        return f"{name} in {ctx.session_id} for {ctx.call_id}"

    t = tool(who)
    assert set(t.input_schema["properties"]) == {"name"}
    assert (await t.invoke("{}", CONTEXT)).content == "x in s-1 for call_0_0"


async def test_positional_only_parameters_and_names() -> None:
    def add(a: int, /, b: int = 1) -> int:
        """Add."""
        return a + b

    t = tool(add, name="math.add", description="Add two numbers.")
    assert (t.name, t.description) == ("math.add", "Add two numbers.")
    assert (await t.invoke('{"a": 2, "b": 3}', CONTEXT)).content == "5"


def _untyped(x):  # type: ignore[no-untyped-def]
    """Untyped."""


def _variadic(*args: int) -> None:
    """Variadic."""


def _undocumented(x: int) -> None:
    pass


def _custom(x: threading.Lock) -> None:
    """Unsupported type."""


@pytest.mark.parametrize(
    ("fn", "options", "fragment"),
    [
        (_untyped, {"name": "u"}, "parameter 'x': has no type annotation"),
        (_variadic, {"name": "v"}, "*args and **kwargs"),
        (_undocumented, {"name": "d"}, "has no description"),
        (_custom, {"name": "c"}, "parameter 'x': type"),
        (lambda: None, {"description": "x"}, "the name must start with a letter"),
        (lookup, {"name": "skills.load"}, "belong to the runtime"),
        (lookup, {"name": "a..b"}, "single dots"),
        (lookup, {"name": "x" * 65}, "at most 64"),
    ],
)
def test_functions_that_cannot_be_tools(fn: Any, options: dict[str, Any], fragment: str) -> None:
    with pytest.raises(HostToolError, match="host tool") as info:
        tool(fn, **options)
    assert fragment in str(info.value)
