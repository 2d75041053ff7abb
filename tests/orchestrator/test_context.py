"""The context budget: long sessions compact (recorded) instead of dying at the window,
replay reproduces every request after a compaction, and a provider's context-overflow
answer is recorded, compacted for and retried once (docs/context.md)."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from eventlog import MemoryStore, NewEvent, verify
from orchestrator._context import (
    STUB_PREFIX,
    compacted,
    context_window_for,
    plan_skill_instructions,
    plan_tool_results,
)
from orchestrator._events import (
    CODEC,
    ContextCompacted,
    ModelFailed,
    ModelResponded,
    PolicyConfig,
    PromptRendered,
    SessionEnded,
    SessionStarted,
)
from orchestrator._grammar import session_grammar
from orchestrator._loop import Agent, RetryPolicy
from orchestrator._model import Message, TextPart, ToolCall, ToolResult
from orchestrator.adapters import ScriptedModel
from replay import load_recording, redrive, replay_session
from replay._fork import fork_session

WINDOW = 32_000
BIG = 40_000  # bytes per reference file: about 10k tokens, three fill a 32k window


def _read_turns(n: int, files: int) -> list[dict[str, Any]]:
    """Load the skill, then ``n`` turns each reading a (large) reference file."""
    turns: list[dict[str, Any]] = [
        {"tool_calls": [{"name": "skills.load", "arguments": {"names": ["big"]}}]}
    ]
    for i in range(n):
        path = f"references/part{i % files}.md"
        turns.append({"tool_calls": [{"name": "skills.read", "arguments": {"path": path}}]})
    return [*turns, {"text": "done"}]


def _big_skill(make_skill: Any, files: int) -> Any:
    return make_skill(
        "big",
        body="Read the parts one by one.\n",
        files={f"references/part{i}.md": f"part {i}\n" + "x" * BIG for i in range(files)},
    )


def _reader(make_skill: Any, turns: list[dict[str, Any]], *, files: int, **options: Any) -> Agent:
    """An agent with the big skill (``files`` reference files) on a scripted model."""
    return Agent(
        model=ScriptedModel(turns),
        model_name=options.pop("model_name", "test-model"),
        skills=[_big_skill(make_skill, files=files)],
        policy=PolicyConfig(approve=()),
        **options,
    )


async def _proves(store: MemoryStore, session_id: str) -> None:
    report = await verify(store, grammar=session_grammar)
    assert report.ok, report.faults
    recording = await load_recording(store, session_id)
    replayed = await replay_session(store, recording)
    assert replayed.ok, replayed.divergence
    redriven = await redrive(store, recording)
    assert redriven.ok, redriven.divergence


async def test_a_200_turn_session_of_large_reads_completes_under_a_32k_window(
    kit, make_skill
) -> None:
    store = MemoryStore()
    agent = _reader(
        make_skill, _read_turns(200, files=5), files=5, context_window=WINDOW, max_turns=300
    )
    session = await agent.run(store, "read everything")
    bodies = await kit.bodies(store, session.id)
    ended = bodies[-1]
    assert isinstance(ended, SessionEnded) and ended.reason == "completed", ended
    compactions = kit.of_type(bodies, ContextCompacted)
    assert len(compactions) > 20
    for c in compactions:
        assert c.reason == "budget"
        assert c.tokens_after < c.tokens_before and c.tokens_after <= c.budget
        assert all(r.stub.startswith(STUB_PREFIX) for r in c.replaced)
    assert {c.step for c in compactions} == {"tool_results", "drop_turns"}
    # The stub tells the model how to get the result back.
    reads = [r for r in compactions[0].replaced if r.tool == "skills.read"]
    assert '{"path":"references/part0.md"}' in reads[0].stub
    # The recorded requests all fit the window, and the last turns' reads are intact.
    last = session.state.messages
    assert sum(1 for m in last if m.role == "tool" and len(str(m.parts[0])) > BIG) <= 4
    await _proves(store, session.id)


async def test_a_request_that_cannot_fit_ends_the_session_with_context_exhausted(
    kit, make_skill
) -> None:
    store = MemoryStore()
    agent = _reader(make_skill, _read_turns(1, files=1), files=1, context_window=8_000)
    session = await agent.run(store, "read it")
    ended = (await kit.bodies(store, session.id))[-1]
    assert isinstance(ended, SessionEnded) and ended.reason == "context_exhausted"
    assert ended.error is not None and "over the budget of 3904" in ended.error
    assert "--context-window" in ended.error
    await _proves(store, session.id)


async def test_a_context_overflow_answer_is_recorded_compacted_for_and_retried_once(
    kit, make_skill
) -> None:
    store = MemoryStore()
    overflow = {"error": {"kind": "context_overflow", "status": 400, "message": "too long"}}
    turns = _read_turns(6, files=3)
    turns.insert(6, overflow)  # the 7th request: 5 reads in the history, no window known
    agent = _reader(make_skill, turns, files=3, model_name="unknown-model")
    session = await agent.run(store, "read")
    bodies = await kit.bodies(store, session.id)
    assert isinstance(bodies[-1], SessionEnded) and bodies[-1].reason == "completed"
    failed = kit.of_type(bodies, ModelFailed)
    assert [(f.kind, f.will_retry) for f in failed] == [("context_overflow", True)]
    at = bodies.index(failed[0])
    compaction = bodies[at + 1]
    assert isinstance(compaction, ContextCompacted) and compaction.reason == "overflow"
    assert compaction.budget == 0  # the window is unknown: no budget, only the retry
    # The same turn is rendered again after the compaction.
    prompts = [b for b in bodies if isinstance(b, PromptRendered)]
    again = next(p for p in prompts if bodies.index(p) > at)
    assert again.turn == failed[0].turn
    await _proves(store, session.id)


async def test_a_second_overflow_in_the_same_turn_ends_with_context_exhausted(
    kit, make_skill
) -> None:
    store = MemoryStore()
    overflow = {"error": {"kind": "context_overflow", "status": 400, "message": "too long"}}
    turns = _read_turns(6, files=3)
    turns[6:6] = [overflow, overflow]
    agent = _reader(
        make_skill, turns, files=3, retry=RetryPolicy(base_ms=0), model_name="unknown-model"
    )
    session = await agent.run(store, "read")
    bodies = await kit.bodies(store, session.id)
    ended = bodies[-1]
    assert isinstance(ended, SessionEnded) and ended.reason == "context_exhausted"
    assert [f.will_retry for f in kit.of_type(bodies, ModelFailed)] == [True, False]
    await _proves(store, session.id)


async def test_fork_from_before_a_compaction_replays_and_continues(kit, make_skill) -> None:
    store = MemoryStore()
    agent = _reader(make_skill, _read_turns(12, files=3), files=3, context_window=WINDOW)
    session = await agent.run(store, "read")
    bodies = await kit.bodies(store, session.id)
    first = next(i for i, b in enumerate(bodies) if isinstance(b, ContextCompacted))
    recording = await load_recording(store, session.id)
    fork = await fork_session(store, recording, first - 1, session_id="fork")
    # The fork continues (a new model) and compacts again on its own.
    agent.model = ScriptedModel(_read_turns(12, files=3)[5:])
    resumed = await agent.resume(store, fork)
    forked = await kit.bodies(store, resumed.id)
    assert isinstance(forked[-1], SessionEnded) and forked[-1].reason == "completed"
    assert kit.of_type(forked, ContextCompacted)
    await _proves(store, "fork")


async def _crash_and_resume(
    kit: Any, agent: Agent, turns: list[dict[str, Any]], store: MemoryStore, cut: int
) -> None:
    """A process that stopped right after event ``cut`` of the session in ``store``,
    resumed by a new one: the same events as the continuous run, and it replays."""
    [info] = await store.streams()
    bodies = await kit.bodies(store, info.stream)
    events = [e async for e in store.read(info.stream)]
    crashed = MemoryStore()
    await crashed.append(
        "s",
        [NewEvent(type=e.type, body=e.body, recorded_at=e.recorded_at) for e in events[: cut + 1]],
        expected_seq=0,
        blobs=[await store.get_blob(d) for d in _digests(bodies[: cut + 1])],
    )
    # The script from the first answer (or failure) the cut left out.
    used = sum(1 for b in bodies[: cut + 1] if isinstance(b, ModelResponded | ModelFailed))
    agent.model = ScriptedModel(turns[used:])
    await agent.resume(crashed, "s")
    again = await kit.bodies(crashed, "s")
    assert [type(b).__name__ for b in again] == [type(b).__name__ for b in bodies]
    await _proves(crashed, "s")


async def test_resume_after_a_compaction_renders_what_a_continuous_run_renders(
    kit, make_skill
) -> None:
    """A process that stops right after a compaction: the next prompt, rendered by a
    new process, names the whole rewritten history and replays."""
    store = MemoryStore()
    turns = _read_turns(10, files=3)
    agent = _reader(make_skill, turns, files=3, context_window=WINDOW)
    full = await agent.run(store, "read")
    bodies = await kit.bodies(store, full.id)
    cut = next(i for i, b in enumerate(bodies) if isinstance(b, ContextCompacted))
    while isinstance(bodies[cut + 1], ContextCompacted):  # the steps of one transaction
        cut += 1
    await _crash_and_resume(kit, agent, turns, store, cut)


async def test_resume_after_an_overflow_compacts_and_retries_as_a_continuous_run_does(
    kit, make_skill
) -> None:
    store = MemoryStore()
    overflow = {"error": {"kind": "context_overflow", "status": 400, "message": "too long"}}
    turns = _read_turns(6, files=3)
    turns.insert(6, overflow)
    agent = _reader(make_skill, turns, files=3, model_name="unknown-model")
    full = await agent.run(store, "read")
    bodies = await kit.bodies(store, full.id)
    cut = next(i for i, b in enumerate(bodies) if isinstance(b, ModelFailed))
    await _crash_and_resume(kit, agent, turns, store, cut)


def _digests(bodies: list[Any]) -> list[str]:
    from orchestrator._events import SkillActivated

    out: list[str] = []
    for b in bodies:
        if isinstance(b, SkillActivated):
            out += [b.body_digest, *(f.sha256 for f in b.files)]
        if isinstance(b, PromptRendered):
            out += [*b.new_message_digests, b.tail_digest]
    return out


def test_known_models_have_their_windows_and_agents_record_them() -> None:
    assert context_window_for("claude-sonnet-4-5-20250929") == 200_000
    assert context_window_for("gpt-4o-mini") == 128_000
    assert context_window_for("gpt-4-0613") == 8_192
    assert context_window_for("my-local-model") == 0
    model = ScriptedModel([{"text": "hi"}])
    config: SessionStarted = Agent(model=model, model_name="gpt-4o").session_config()
    assert config.context_window == 128_000
    chosen = Agent(model=model, model_name="gpt-4o", context_window=1000).session_config()
    assert chosen.context_window == 1000


# -- properties: what compaction never drops ------------------------------------------------


@st.composite
def histories(draw: st.DrawFn) -> tuple[list[Message], list[str]]:
    """A history of turns (a user message, then assistant calls answered by tool
    results), the last turn's calls possibly unanswered, and the active skills."""
    messages = [Message(role="user", parts=(TextPart(text="go"),))]
    tools = ["skills.read", "skills.load", "skills.run_script", "lookup"]
    turns = draw(st.integers(0, 12))
    for t in range(turns):
        n = draw(st.integers(1, 3))
        calls = []
        for i in range(n):
            name = draw(st.sampled_from(tools))
            args = json.dumps({"path": f"references/{t}.md"}) if name == "skills.read" else "{}"
            calls.append(ToolCall(id=f"c{t}_{i}", name=name, arguments=args))
        messages.append(Message(role="assistant", parts=tuple(calls)))
        if t == turns - 1 and draw(st.booleans()):
            break  # the last calls are not answered yet
        results = []
        for c in calls:
            size = draw(st.integers(0, 3000))
            content = "y" * size
            if c.name == "skills.load":
                name = draw(st.sampled_from(["a", "b", "c"]))
                content = json.dumps({"instructions": {name: "z" * size}})
            results.append(ToolResult(call_id=c.id, content=content))
        messages.append(Message(role="tool", parts=tuple(results)))
    active = draw(st.lists(st.sampled_from(["a", "b", "c"]), unique=True))
    return messages, active


@settings(max_examples=200, deadline=None)
@given(histories(), st.integers(0, 5))
def test_compaction_keeps_every_call_the_active_instructions_and_the_last_turns(
    case: tuple[list[Message], list[str]], keep: int
) -> None:
    messages, active = case
    replaced = plan_tool_results(messages, keep, frozenset())
    replaced += plan_skill_instructions(
        compacted(messages, replaced), active, frozenset((r.message, r.call_id) for r in replaced)
    )
    after = compacted(messages, replaced)
    # Same roles, same calls and results in the same order: only contents change.
    assert [m.role for m in after] == [m.role for m in messages]
    for before, now in zip(messages, after, strict=True):
        assert [type(p) for p in before.parts] == [type(p) for p in now.parts]
        assert [getattr(p, "id", getattr(p, "call_id", None)) for p in before.parts] == [
            getattr(p, "id", getattr(p, "call_id", None)) for p in now.parts
        ]
        if before.role != "tool":
            assert before == now  # the user's words and the model's calls stay
    # The last `keep` turns' results stay unless they carry inactive instructions.
    tool_messages = [i for i, m in enumerate(messages) if m.role == "tool"]
    recent = set(tool_messages[len(tool_messages) - keep :]) if keep else set()
    for r in replaced:
        assert r.stub.startswith(STUB_PREFIX) and len(r.stub) < r.size
        if r.message in recent:
            assert r.tool == "skills.load"
    # Instructions of an active skill are never cleared.
    for r in replaced:
        if r.tool == "skills.load":
            original = next(
                p
                for p in messages[r.message].parts
                if isinstance(p, ToolResult) and p.call_id == r.call_id
            )
            named = json.loads(original.content).get("instructions", {})
            if r.message in recent:
                assert not set(named) & set(active)
    # Planning again over the compacted history replaces nothing more.
    cleared = frozenset((r.message, r.call_id) for r in replaced)
    assert plan_tool_results(after, keep, cleared) == ()
    assert plan_skill_instructions(after, active, cleared) == ()


@pytest.mark.parametrize("keep", [0, 2])
def test_unanswered_calls_are_never_touched(keep: int) -> None:
    messages = [
        Message(role="user", parts=(TextPart(text="go"),)),
        Message(role="assistant", parts=(ToolCall(id="a", name="lookup", arguments="{}"),)),
        Message(role="tool", parts=(ToolResult(call_id="a", content="x" * 5000),)),
        Message(role="assistant", parts=(ToolCall(id="b", name="lookup", arguments="{}"),)),
    ]
    replaced = plan_tool_results(messages, keep, frozenset())
    assert [r.call_id for r in replaced] == (["a"] if keep == 0 else [])
    assert compacted(messages, replaced)[3] == messages[3]


def test_skillog_run_with_a_small_context_window_says_why_it_stopped(
    tmp_path, capsys, monkeypatch
) -> None:
    """`--context-window` is recorded; a read that cannot fit ends the session with
    context_exhausted and a message saying what to do, not a traceback or a 400."""
    from orchestrator.cli import main

    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.setenv("SKILLOG_CONFIG", str(tmp_path / "config.yaml"))
    skill = tmp_path / "skills" / "big"
    (skill / "references").mkdir(parents=True)
    (skill / "SKILL.md").write_text("---\nname: big\ndescription: Big reads.\n---\nRead.\n")
    (skill / "references" / "a.md").write_text("x" * BIG)
    (tmp_path / "turns.yaml").write_text(
        "turns:\n"
        "  - tool_calls: [{name: skills.load, arguments: {names: [big]}}]\n"
        "  - tool_calls: [{name: skills.read, arguments: {path: references/a.md}}]\n"
        "  - text: done\n"
    )
    db = tmp_path / "log.db"
    args = ["run", "read", "--model", f"scripted:{tmp_path / 'turns.yaml'}", "--db", str(db)]
    args += ["--skills", str(skill), "--project", str(tmp_path), "--context-window", "8000"]
    assert main(args) == 1  # not completed
    out, err = capsys.readouterr()
    assert "context_exhausted" in out + err and "--context-window" in out + err, out + err
    assert "Traceback" not in out + err
    assert main(["sessions", "--json", "--db", str(db)]) == 0
    row = json.loads(capsys.readouterr().out.splitlines()[0])
    assert row["end_reason"] == "context_exhausted"
    assert main(["replay", row["session"], "--redrive", "--db", str(db)]) == 0
    out = capsys.readouterr().out
    assert "every request reproduced byte for byte" in out
    assert "prefix reuse (bytes repeated from the previous request, in cache order)" in out
    assert main(["replay", row["session"], "--json", "--db", str(db)]) == 0
    reuse = json.loads(capsys.readouterr().out)["prefix_reuse"]
    assert set(reuse) == {"requests", "mean", "min", "breaks"}
    assert [b["where"] for b in reuse["breaks"]] == ["system"]  # the skill was loaded


def test_budgets_price_cached_tokens_at_their_price() -> None:
    from orchestrator._events import Budget
    from orchestrator._policy import over_budget

    # 1M input tokens at $3/M, of which 900k read from the cache at $0.30/M.
    prices = (("m", 3_000_000, 15_000_000),)
    plain = Budget(cost_micro_usd=2_000_000, prices=prices)
    cached = Budget(cost_micro_usd=2_000_000, prices=prices, cache_prices=(("m", 300_000, 0),))
    use = {"model": "m", "input_tokens": 1_000_000, "output_tokens": 0, "wall_ms": 0}
    assert over_budget(plain, **use, cached=(900_000, 0)) is not None  # $3.00 as if uncached
    assert over_budget(cached, **use, cached=(900_000, 0)) is None  # $0.30 + $0.27


async def test_replay_reports_prefix_reuse_with_its_breaks(kit, make_skill) -> None:
    """Between compactions every request repeats all of the previous one (growing
    history, same tools and system); a compaction, or loading a skill (the system
    prompt changes), is a break."""
    from replay._audit import audit_session
    from replay._html import render_html
    from replay._request import RecordedRequests
    from replay._reuse import prefix_reuse

    store = MemoryStore()
    agent = _reader(make_skill, _read_turns(30, files=3), files=3, context_window=WINDOW)
    session = await agent.run(store, "read")
    recording = await load_recording(store, session.id)
    recorded = RecordedRequests()
    assert (await replay_session(store, recording, recorded=recorded)).ok
    reuse = prefix_reuse(recording, recorded)
    # The requests after a compaction (one or more steps, recorded together).
    after = 0
    since = False
    for body in recording.bodies:
        since = since or isinstance(body, ContextCompacted)
        if isinstance(body, PromptRendered):
            after, since = after + since, False
    assert after > 1
    assert len(reuse.requests) == 31  # every request but the first
    assert [b.where for b in reuse.breaks] == ["system"] + ["messages"] * after
    assert [b.compacted for b in reuse.breaks] == [False] + [True] * after
    broken = {b.seq for b in reuse.breaks}
    pairs = zip(reuse.requests, reuse.requests[1:], strict=False)
    # Unbroken: the whole previous request is repeated, then what the turn added.
    assert all(b.reused == a.size for a, b in pairs if b.seq not in broken)
    assert all(r.reused < r.size for r in reuse.requests)
    assert reuse.mean is not None and reuse.min is not None and 0 < reuse.min < reuse.mean < 1
    audit = await audit_session(store, session.id)
    assert audit.reuse == reuse
    page = render_html(audit)
    assert 'id="prefix-reuse"' in page and f"mean {reuse.mean:.1%}" in page


async def test_a_streamed_session_records_the_same_log_as_one_that_did_not_stream(
    make_skill,
) -> None:
    """Deltas reach Agent.on_delta as the model answers and never the chain: the same
    session with and without an observer of deltas writes the same event bodies."""
    from orchestrator._events import CODEC
    from orchestrator._model import Delta
    from replay._compare import comparable

    skill = _big_skill(make_skill, files=1)
    turns = [
        {"text": "Loading the big skill first.", "tool_calls": [
            {"name": "skills.load", "arguments": {"names": ["big"]}}]},
        {"text": "All read; the parts say nothing more than their names."},
    ]  # fmt: skip
    seen: list[Delta] = []
    logs = []
    for on_delta in (None, seen.append):
        store = MemoryStore()
        agent = Agent(
            model=ScriptedModel(turns),
            model_name="test-model",
            skills=[skill],
            policy=PolicyConfig(approve=()),
            on_delta=on_delta,
            clock=iter(range(10**6)).__next__,
        )
        session = await agent.run(store, "read", session_id="s")
        # The bodies, less the measured durations (a clock around I/O, not a decision).
        logs.append([comparable(CODEC.decode(e)) async for e in store.read(session.id)])
    assert logs[0] == logs[1]
    text = "".join(d.text for d in seen if d.kind == "text")
    assert text == turns[0]["text"] + turns[1]["text"]
    assert len([d for d in seen if d.kind == "text"]) > 2  # in pieces, as they came
    assert [d.name for d in seen if d.call_id] == ["skills.load"]


async def test_skillog_run_shows_text_as_it_arrives_and_inert(make_skill) -> None:
    """What `skillog run` writes to a terminal while the model answers: the text as it
    streams, control characters made visible, a line break after each answer."""
    import io

    from orchestrator.cli._session import LiveText

    out = io.StringIO()
    live = LiveText(out)
    turns = [
        {"text": "Loading \x1b[31mred\x1b[0m.", "tool_calls": [
            {"name": "skills.load", "arguments": {"names": ["big"]}}]},
        {"text": "Done."},
    ]  # fmt: skip
    agent = Agent(
        model=ScriptedModel(turns),
        model_name="test-model",
        skills=[_big_skill(make_skill, files=1)],
        policy=PolicyConfig(approve=()),
        on_delta=live.delta,
        observers=[live.event],
    )
    await agent.run(MemoryStore(), "go")
    assert out.getvalue() == "Loading \\x1b[31mred\\x1b[0m.\nDone.\n"


async def test_otel_shows_each_request_after_a_compaction_as_it_was_sent(make_skill) -> None:
    """The chat spans' input messages (content on) follow the rewritten history: after a
    compaction a span carries the stubs, and as many messages as the request had."""
    from otel import map_session

    store = MemoryStore()
    agent = _reader(make_skill, _read_turns(12, files=3), files=3, context_window=WINDOW)
    session = await agent.run(store, "read")
    events = [e async for e in store.read(session.id)]
    blobs = {}
    for body in [CODEC.decode(e) for e in events]:
        if isinstance(body, PromptRendered):
            for digest in (*body.new_message_digests, body.tail_digest):
                blobs[digest] = await store.get_blob(digest)
    spans, _ = map_session(events, content=True, blobs=blobs.get, metrics=False)
    chats = [s for s in spans if s.name.startswith("chat")]
    prompts = [b for b in map(CODEC.decode, events) if isinstance(b, PromptRendered)]
    assert len(chats) == len(prompts)
    for span, prompt in zip(chats, prompts, strict=True):
        messages = json.loads(str(span.attributes["gen_ai.input.messages"]))
        assert len(messages) == prompt.message_count
    assert any(STUB_PREFIX in str(s.attributes["gen_ai.input.messages"]) for s in chats)
