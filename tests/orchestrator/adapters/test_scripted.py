"""ScriptedModel and the script format; RecordedModel."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

from orchestrator._model import (
    ModelError,
    ModelRequest,
    ModelResponse,
    TextPart,
    ToolCall,
    Usage,
    encode_canonical,
)
from orchestrator.adapters import (
    AdapterConfigError,
    RecordedModel,
    RecordingError,
    ScriptedModel,
    ScriptError,
    ScriptToolCall,
    ScriptTurn,
    load_script,
)

REQUEST = ModelRequest(model="demo", system="", messages=(), tools=(), max_tokens=100)

SCRIPT_YAML = """\
turns:
  - text: Loading the skill.
    tool_calls:
      - name: skills.load
        arguments: {names: [pdf], mode: add}
      - name: skills.read
        arguments: {path: references/forms.md}
  - tool_calls:
      - name: skills.read
        raw_arguments: '{"path": '
  - error: {kind: rate_limited, retry_after_ms: 1500}
  - error: {kind: timeout, message: scripted timeout}
  - error: {kind: http, status: 503}
  - empty: true
  - text: Done.
    stop_reason: max_tokens
    usage: {input_tokens: 120, output_tokens: 8}
"""


async def replies(model: ScriptedModel, n: int) -> list[ModelResponse | ModelError]:
    out: list[ModelResponse | ModelError] = []
    for _ in range(n):
        try:
            out.append(await model.complete(REQUEST))
        except ModelError as e:
            out.append(e)
    return out


async def test_a_yaml_script_plays_every_kind_of_turn(tmp_path: Path) -> None:
    path = tmp_path / "turns.yaml"
    path.write_text(SCRIPT_YAML)
    model = ScriptedModel.from_file(path)
    assert model.provider == "skillog.scripted"
    first, malformed, limited, timeout, server, empty, done, after = await replies(model, 8)

    assert first == ModelResponse(
        parts=(
            TextPart(text="Loading the skill."),
            ToolCall(id="call_0_0", name="skills.load", arguments='{"mode":"add","names":["pdf"]}'),
            ToolCall(id="call_0_1", name="skills.read", arguments='{"path":"references/forms.md"}'),
        ),
        stop_reason="tool_use",
        model="demo",
        id="scripted_0",
    )
    assert isinstance(malformed, ModelResponse)
    assert malformed.tool_calls == (
        ToolCall(id="call_1_0", name="skills.read", arguments='{"path": '),
    )
    assert isinstance(limited, ModelError)
    assert (limited.kind, limited.retryable, limited.retry_after_ms) == ("rate_limited", True, 1500)
    assert isinstance(timeout, ModelError) and str(timeout) == "scripted timeout"
    assert (timeout.kind, timeout.retryable) == ("timeout", True)
    assert isinstance(server, ModelError)
    assert (server.kind, server.status, server.retryable) == ("http", 503, True)
    assert empty == ModelResponse(parts=(), stop_reason="end_turn", model="demo", id="scripted_5")
    assert isinstance(done, ModelResponse)
    assert (done.text, done.stop_reason, done.usage) == (
        "Done.",
        "max_tokens",
        Usage(input_tokens=120, output_tokens=8),
    )
    assert after == ModelResponse(
        parts=(TextPart(text="(end of script)"),),
        stop_reason="end_turn",
        model="demo",
        id="scripted_7",
    )
    assert model.calls == 8


async def test_the_documented_example_script_plays(tmp_path: Path) -> None:
    docs = Path(__file__).parents[3] / "docs" / "adapters.md"
    text = docs.read_text()
    example = text[text.index("```yaml\n") + 8 : text.index("```\n", text.index("```yaml\n"))]
    path = tmp_path / "turns.yaml"
    path.write_text(example)
    model = ScriptedModel.from_file(path)
    outcomes = await replies(model, 8)
    kinds = [o.kind if isinstance(o, ModelError) else o.stop_reason for o in outcomes]
    assert kinds == ["tool_use", "tool_use", "rate_limited", "timeout", "http"] + ["end_turn"] * 3


async def test_json_scripts_and_turns_in_code_give_the_same_responses(tmp_path: Path) -> None:
    path = tmp_path / "turns.json"
    path.write_text(
        '{"turns": [{"text": "hi", "tool_calls": [{"name": "t", "arguments": {"b":1, "a":0.5}}]}]}'
    )
    from_json = await ScriptedModel.from_file(path).complete(REQUEST)
    from_dicts = await ScriptedModel(
        [{"text": "hi", "tool_calls": [{"name": "t", "arguments": {"a": 0.5, "b": 1}}]}]
    ).complete(REQUEST)
    from_structs = await ScriptedModel(
        [
            ScriptTurn(
                text="hi", tool_calls=(ScriptToolCall(name="t", arguments={"a": 0.5, "b": 1}),)
            )
        ]
    ).complete(REQUEST)
    assert (
        encode_canonical(from_json)
        == encode_canonical(from_dicts)
        == encode_canonical(from_structs)
    )
    assert from_json.tool_calls[0].arguments == '{"a":0.5,"b":1}'


async def test_explicit_ids_and_no_arguments() -> None:
    model = ScriptedModel([{"tool_calls": [{"name": "t", "id": "mine"}, {"name": "t"}]}])
    response = await model.complete(REQUEST)
    assert [(c.id, c.arguments) for c in response.tool_calls] == [
        ("mine", "{}"),
        ("call_0_1", "{}"),
    ]


async def test_when_exhausted_raise(tmp_path: Path) -> None:
    path = tmp_path / "s.yaml"
    path.write_text("when_exhausted: raise\nturns:\n  - text: only\n")
    model = ScriptedModel.from_file(path)
    await model.complete(REQUEST)
    with pytest.raises(ModelError, match="has 1 turns and call 1 asked for another") as info:
        await model.complete(REQUEST)
    assert not info.value.retryable
    assert not ScriptedModel([], when_exhausted="raise").turns


BAD_SCRIPTS = {
    "missing name": (
        "turns:\n  - text: a\n  - tool_calls: [{arguments: {}}]\n",
        "in turn 1: Object missing required field `name` - at `$.turns[1].tool_calls[0]`",
    ),
    "says nothing": ("turns:\n  - {}\n", "in turn 0: the turn says nothing"),
    "error and text": (
        "turns:\n  - text: a\n  - text: b\n    error: {kind: timeout}\n",
        "in turn 1: a turn with `error` fails",
    ),
    "empty and text": (
        "turns:\n  - empty: true\n    text: x\n",
        "in turn 0: an `empty: true` turn cannot have",
    ),
    "both arguments": (
        "turns:\n  - tool_calls: [{name: t, arguments: {}, raw_arguments: '{}'}]\n",
        "not both",
    ),
    "unknown kind": (
        "turns:\n  - error: {kind: exploded}\n",
        "Invalid enum value 'exploded' - at `$.turns[0].error.kind`",
    ),
    "unknown stop": ("turns:\n  - text: a\n    stop_reason: done\n", "`$.turns[0].stop_reason`"),
    "bad usage": (
        "turns:\n  - text: a\n    usage: {input_tokens: many}\n",
        "`$.turns[0].usage.input_tokens`",
    ),
    "unknown field": (
        "turns:\n  - text: a\n    colour: red\n",
        "unknown field `colour` - at `$.turns[0]`",
    ),
    "array arguments": (
        "turns:\n  - tool_calls: [{name: t, arguments: [1, 2]}]\n",
        "`$.turns[0].tool_calls[0].arguments`",
    ),
    "bare list": ("- text: a\n", "Expected `object`, got `array`"),
    "broken yaml": ("turns: [\n", "not valid YAML"),
    "empty file": ("", "Expected `object`, got `null`"),
}


@pytest.mark.parametrize(("text", "fragment"), BAD_SCRIPTS.values(), ids=BAD_SCRIPTS.keys())
def test_a_bad_script_file_names_the_file_and_the_turn(
    tmp_path: Path, text: str, fragment: str
) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text(text)
    with pytest.raises(ScriptError) as info:
        load_script(path)
    assert str(info.value).startswith(f"{path}: ")
    assert fragment in str(info.value)


def test_bad_json_and_missing_files(tmp_path: Path) -> None:
    path = tmp_path / "bad.json"
    path.write_text('{"turns": [')
    with pytest.raises(ScriptError, match="not valid JSON"):
        load_script(path)
    with pytest.raises(ScriptError, match="cannot read the model script"):
        load_script(tmp_path / "missing.yaml")


def test_bad_turns_in_code_name_the_turn() -> None:
    with pytest.raises(
        ScriptError,
        match=r"<code>: invalid model script in turn 1: .*\$\.turns\[1\]\.tool_calls\[0\]\.name",
    ):
        ScriptedModel([ScriptTurn(text="ok"), {"tool_calls": [{"name": ""}]}])
    with pytest.raises(ValueError, match="says nothing"):
        ScriptTurn()


# -- RecordedModel ----------------------------------------------------------------------


def sha(request: ModelRequest) -> str:
    return hashlib.sha256(encode_canonical(request)).hexdigest()


ONE = ModelResponse(parts=(TextPart(text="one"),), stop_reason="end_turn")
TWO = ModelResponse(parts=(TextPart(text="two"),), stop_reason="end_turn")


async def test_recorded_answers_in_order_then_refuses() -> None:
    model = RecordedModel([ONE, TWO])
    assert model.provider == "skillog.recorded"
    assert await model.complete(REQUEST) == ONE
    assert await model.complete(REQUEST) == TWO
    with pytest.raises(
        RecordingError, match="model call 2 has no recorded response: the recording holds 2"
    ) as info:
        await model.complete(REQUEST)
    assert (info.value.index, info.value.retryable, model.calls, model.remaining) == (
        2,
        False,
        2,
        0,
    )


async def test_recorded_failures_are_raised_in_place() -> None:
    failure = ModelError("overloaded", kind="http", retryable=True, status=529)
    model = RecordedModel([failure, ONE], provider="anthropic")
    with pytest.raises(ModelError) as info:
        await model.complete(REQUEST)
    assert info.value is failure
    assert await model.complete(REQUEST) == ONE
    assert model.provider == "anthropic"


async def test_recorded_checks_request_hashes() -> None:
    other = ModelRequest(model="demo", system="changed", messages=(), tools=(), max_tokens=100)
    model = RecordedModel(
        [ONE, TWO], expected_hashes=[sha(REQUEST), sha(REQUEST)], request_hash=sha
    )
    assert await model.complete(REQUEST) == ONE
    with pytest.raises(RecordingError) as info:
        await model.complete(other)
    message = str(info.value)
    assert "model call 1: the request differs" in message
    assert sha(REQUEST) in message and sha(other) in message
    # a mismatch does not consume the recorded response
    assert await model.complete(REQUEST) == TWO


def test_recorded_configuration_errors() -> None:
    with pytest.raises(AdapterConfigError, match="needs request_hash"):
        RecordedModel([ONE], expected_hashes=["a"])
    with pytest.raises(AdapterConfigError, match="1 outcomes but 2 expected hashes"):
        RecordedModel([ONE], expected_hashes=["a", "b"], request_hash=sha)


async def test_a_script_file_is_parsed_once_per_content_and_an_edit_is_seen(
    tmp_path: Path,
) -> None:
    """``serve`` builds a model per submission: the file is read each time, parsed only
    when its bytes changed; every model still starts at the first turn."""
    import os

    from orchestrator.adapters import adapter_from_spec

    path = tmp_path / "turns.yaml"
    path.write_text("turns:\n  - text: one\n")
    stat = path.stat()
    first, second = (adapter_from_spec(f"scripted:{path}") for _ in range(2))
    assert isinstance(first, ScriptedModel) and isinstance(second, ScriptedModel)
    assert first.turns[0] is second.turns[0]  # one parse, shared (frozen)
    assert (await first.complete(REQUEST)).parts == (TextPart(text="one"),)
    assert first.calls == 1 and second.calls == 0
    assert (await second.complete(REQUEST)).parts == (TextPart(text="one"),)
    path.write_text("turns:\n  - text: two\n")  # same size
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns))  # and the same mtime
    assert load_script(path).turns[0].text == "two"
    third = adapter_from_spec(f"scripted:{path}")
    assert (await third.complete(REQUEST)).parts == (TextPart(text="two"),)
