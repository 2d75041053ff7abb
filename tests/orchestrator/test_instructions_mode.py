"""Instructions mode ``results``: the active skills' instructions reach the model in the
``skills.load`` results, the system prompt stays as it was (docs/context.md)."""

from __future__ import annotations

import json
from typing import Any

import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from eventlog import MemoryStore
from orchestrator._context import compacted, plan_tool_results, shown_instructions, tokens_of
from orchestrator._events import ContextCompacted, PolicyConfig, SessionEnded, SessionStarted
from orchestrator._loop import Agent
from orchestrator._model import (
    Message,
    ModelRequest,
    ModelResponse,
    TextPart,
    ToolResult,
    Usage,
)
from orchestrator._prompt import compose, request_bytes
from orchestrator.adapters import ScriptedModel
from replay import load_recording
from replay._fork import fork_session

from .test_context import _proves, histories

READER = "Read the parts one by one.\n"
HELPER = "Help with care.\n"


class Recorder:
    """The scripted model, keeping every request it was sent."""

    def __init__(self, turns: list[dict[str, Any]]) -> None:
        self.model = ScriptedModel(turns)
        self.provider = self.model.provider
        self.requests: list[ModelRequest] = []

    async def complete(self, request: ModelRequest) -> ModelResponse:
        self.requests.append(request)
        return await self.model.complete(request)


def _call(name: str, **arguments: Any) -> dict[str, Any]:
    return {"tool_calls": [{"name": name, "arguments": arguments}]}


def _script(reads: int) -> list[dict[str, Any]]:
    """Load the reader; read, load the helper, read, unload it, read on."""
    turns = [_call("skills.load", names=["reader"])]
    for i in range(reads):
        if i % 10 == 3:
            turns.append(_call("skills.load", names=["helper"], mode="add"))
        if i % 10 == 7:
            turns.append(_call("skills.unload", names=["helper"]))
        turns.append(_call("skills.read", path=f"references/part{i % 3}.md"))
    return [*turns, {"text": "done"}]


def _agent(make_skill: Any, model: Any, **options: Any) -> Agent:
    files = {f"references/part{i}.md": f"part {i}\n" + "x" * 40_000 for i in range(3)}
    return Agent(
        model=model,
        model_name="test-model",
        skills=[make_skill("reader", body=READER, files=files), make_skill("helper", body=HELPER)],
        policy=PolicyConfig(approve=()),
        instructions_mode="results",
        **options,
    )


async def test_loads_and_unloads_leave_the_system_prompt_alone(kit, make_skill) -> None:
    store = MemoryStore()
    model = Recorder(_script(12))
    session = await _agent(make_skill, model, max_turns=40).run(store, "read")
    bodies = await kit.bodies(store, session.id)
    assert isinstance(bodies[-1], SessionEnded) and bodies[-1].reason == "completed"
    assert kit.of_type(bodies, SessionStarted)[0].instructions_mode == "results"
    # After the first load, every request has the same system prompt: no skill block.
    systems = {r.system for r in model.requests[1:]}
    assert len(systems) == 1 and "\n<active_skills>\n" not in systems.pop()
    assert "appear in the tool's result" in model.requests[0].system
    # The instructions are in the load results.
    loads = [json.loads(p.content) for p in _results(model.requests[-1], "reader")]
    assert loads and loads[0]["instructions"]["reader"] == READER
    await _proves(store, session.id)


def _results(request: ModelRequest, name: str) -> list[ToolResult]:
    return [
        p
        for m in request.messages
        for p in m.parts
        if isinstance(p, ToolResult) and f'"{name}":' in p.content and "instructions" in p.content
    ]


async def test_a_long_session_compacts_and_every_request_shows_the_active_instructions(
    kit, make_skill
) -> None:
    """200 reads of 40 KB under a 32k window: compactions clear reads and drop turns;
    every request shows each active skill's instructions once, in a load result or
    (once a dropped turn took its result away) in the system prompt."""
    store = MemoryStore()
    model = Recorder(_script(200))
    agent = _agent(make_skill, model, context_window=32_000, max_turns=300)
    session = await agent.run(store, "read everything")
    bodies = await kit.bodies(store, session.id)
    assert isinstance(bodies[-1], SessionEnded) and bodies[-1].reason == "completed"
    compactions = kit.of_type(bodies, ContextCompacted)
    assert {c.step for c in compactions} >= {"tool_results", "drop_turns"}
    for request in model.requests[1:]:
        shown = shown_instructions(request.messages)
        assert ("reader", READER) in shown or READER in request.system
        assert not (("reader", READER) in shown and READER in request.system)
    in_system = [READER in r.system for r in model.requests[1:]]
    assert in_system[0] is False and in_system[-1] is True  # a dropped turn took it away
    # No step cleared the reader's load result (it stays active); dropped turns may.
    reader_loads = {p.call_id for p in _results(model.requests[1], "reader")}
    assert reader_loads
    assert not [r for c in compactions for r in c.replaced if r.call_id in reader_loads]
    await _proves(store, session.id)
    # Fork from before the first compaction: the fork replays and re-drives.
    first = next(i for i, b in enumerate(bodies) if isinstance(b, ContextCompacted))
    recording = await load_recording(store, session.id)
    await fork_session(store, recording, first - 1, session_id="fork")
    await _proves(store, "fork")


class Counting(Recorder):
    """Reports a request's input tokens as a quarter of its canonical bytes: what the
    ``bytes/4`` estimate of the whole request is."""

    async def complete(self, request: ModelRequest) -> ModelResponse:
        response = await super().complete(request)
        usage = Usage(input_tokens=tokens_of(len(request_bytes(request))))
        return msgspec.structs.replace(response, usage=usage)


@pytest.mark.parametrize("mode", ["results", "system"])
async def test_a_newly_loaded_skill_is_counted_once_in_the_estimate(make_skill, mode) -> None:
    """After a load, the estimate is the last usage plus what was added: in mode
    ``results`` the load result carries the instructions and the system prompt does
    not, so they are counted once (sessions of rules 0 counted them twice)."""
    body = "Follow this step with care.\n" * 800  # 22 KB: about 5,600 tokens
    store = MemoryStore()
    model = Counting([_call("skills.load", names=["big"]), {"text": "ok"}])
    agent = Agent(
        model=model,
        model_name="test-model",
        skills=[make_skill("big", body=body)],
        instructions_mode=mode,
        max_turns=1,
        context_window=1_000_000,
    )
    session = await agent.run(store, "load it")
    state = session.state
    assert list(state.active_names) == ["big"] and state.usage_tokens  # the load is not counted yet
    bodies = {s.body_digest: body for s in state.active}
    request = compose(state, bodies)
    actual = tokens_of(len(request_bytes(request)))
    # Within the block's markup and the JSON escapes of its newlines (a few hundred
    # tokens), far from the 5,600 of counting the instructions twice.
    assert abs(session.estimate(request, bodies) - actual) < 300
    assert state.config is not None and state.config.context_rules == 1
    state.config = msgspec.structs.replace(state.config, context_rules=0)
    twice = session.estimate(request, bodies) - actual
    assert abs(twice - (len(body) // 4 if mode == "results" else 0)) < 300


async def test_a_skill_the_user_activates_is_shown_in_the_system_prompt(make_skill) -> None:
    """``/reader`` activates without a tool call: no load result carries the
    instructions, so ``<active_skills>`` does."""
    store = MemoryStore()
    model = Recorder([{"text": "ok"}])
    session = await _agent(make_skill, model).run(store, "/reader read part 0")
    assert "\n<active_skills>\n" in model.requests[0].system
    assert READER in model.requests[0].system
    await _proves(store, session.id)


async def test_sessions_in_mode_system_render_as_before(make_skill) -> None:
    store = MemoryStore()
    model = Recorder([_call("skills.load", names=["reader"]), {"text": "ok"}])
    agent = _agent(make_skill, model)
    agent.instructions_mode = "system"
    session = await agent.run(store, "read")
    assert READER in model.requests[1].system and "Its instructions then appear in <active" in (
        model.requests[1].system
    )
    assert not _results(model.requests[1], "reader")  # no instructions in the result
    await _proves(store, session.id)


@settings(max_examples=200, deadline=None)
@given(histories(), st.integers(0, 5))
def test_clearing_tool_results_never_clears_an_active_skills_instructions(
    case: tuple[list[Message], list[str]], keep: int
) -> None:
    messages, active = case
    before = shown_instructions(messages)
    replaced = plan_tool_results(messages, keep, frozenset(), active)
    after = shown_instructions(compacted(messages, replaced))
    assert {p for p in before if p[0] in active} <= after
    # The first message (the task) is never touched.
    assert compacted(messages, replaced)[0] == Message(role="user", parts=(TextPart(text="go"),))


def test_the_configuration_file_chooses_the_mode_and_a_bad_one_is_a_clear_error(
    tmp_path, capsys, monkeypatch
) -> None:
    from orchestrator.cli import main

    from .test_estimator import _run, _shown

    assert main(_run(tmp_path, monkeypatch, "model:\n  instructions: results\n")) == 0
    assert '"instructions_mode":"results"' in _shown(tmp_path, capsys)
    (tmp_path / "log.db").unlink()
    assert main(_run(tmp_path, monkeypatch, "")) == 0
    assert '"instructions_mode":"system"' in _shown(tmp_path, capsys)
    assert main(_run(tmp_path, monkeypatch, "model:\n  instructions: prompt\n")) == 2
    err = capsys.readouterr().err
    assert "instructions" in err and "Traceback" not in err
