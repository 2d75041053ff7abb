"""The agent loop: concurrency, retries, bad model output, bounds, cancellation."""

from __future__ import annotations

import trio

from eventlog import Event as StoredEvent
from orchestrator._events import (
    ModelFailed,
    PromptRendered,
    SessionEnded,
    ToolCalled,
    ToolCompleted,
    ToolInterrupted,
)
from orchestrator._host_tools import HostTool
from orchestrator._loop import Agent, RetryPolicy
from orchestrator._model import ModelError, ModelRequest, ModelResponse, TextPart
from orchestrator._verdict import verdict
from orchestrator.adapters import ScriptedModel


async def nap(n: int) -> str:
    """Sleep for 100 ms."""
    await trio.sleep(0.1)
    return f"slept {n}"


async def test_independent_tool_calls_run_concurrently(kit, store, autojump_clock) -> None:
    calls = [kit.call("nap", n=i) for i in range(8)]
    agent = kit.agent([kit.turn(*calls)], host_tools=[HostTool.from_function(nap)])
    start = trio.current_time()
    session = await agent.run(store, "nap")
    elapsed = trio.current_time() - start
    assert 0.1 <= elapsed < 0.2  # ~100 ms of (virtual) time, not 800
    bodies = await kit.bodies(store, session.id)
    # Each outcome is committed as its call finishes; the intents, all durable before
    # any call ran, are in call order, and so are the results the model reads next.
    called = kit.of_type(bodies, ToolCalled)
    done = kit.of_type(bodies, ToolCompleted)
    assert sorted(d.call_id for d in done) == sorted(c.call_id for c in called)
    assert max(bodies.index(c) for c in called) < min(bodies.index(d) for d in done)
    results = session.state.messages[-2].parts
    assert [r.content for r in results] == [f"slept {i}" for i in range(8)]  # type: ignore[union-attr]


async def test_rate_limits_are_retried_with_the_providers_hint(kit, store, autojump_clock) -> None:
    model = ScriptedModel(
        [
            {"error": {"kind": "rate_limited", "retry_after_ms": 7000}},
            {"error": {"kind": "http", "status": 503}},
            {"text": "fine"},
        ]
    )
    agent = Agent(model=model, model_name="m", retry=RetryPolicy(base_ms=100))
    start = trio.current_time()
    session = await agent.run(store, "hi")
    bodies = await kit.bodies(store, session.id)
    failures = kit.of_type(bodies, ModelFailed)
    assert [(f.kind, f.attempt, f.will_retry, f.retry_after_ms) for f in failures] == [
        ("rate_limited", 1, True, 7000),
        ("http", 2, True, None),
    ]
    assert trio.current_time() - start >= 7.2  # 7 s hint, then 200 ms backoff
    assert bodies[-1].reason == "completed"  # type: ignore[attr-defined]


async def test_permanent_model_errors_end_the_session(kit, store) -> None:
    model = ScriptedModel([{"error": {"kind": "http", "status": 400, "message": "bad request"}}])
    session = await Agent(model=model, model_name="m").run(store, "hi")
    end = (await kit.bodies(store, session.id))[-1]
    assert (
        isinstance(end, SessionEnded)
        and end.reason == "error"
        and "bad request" in (end.error or "")
    )


async def test_hung_model_times_out_and_gives_up(kit, store, autojump_clock) -> None:
    class Hang:
        provider = "test"

        async def complete(self, request: ModelRequest) -> ModelResponse:
            await trio.sleep_forever()
            raise AssertionError

    retry = RetryPolicy(max_attempts=2, timeout_s=5)
    session = await Agent(model=Hang(), model_name="m", retry=retry).run(store, "hi")
    bodies = await kit.bodies(store, session.id)
    assert [f.kind for f in kit.of_type(bodies, ModelFailed)] == ["timeout", "timeout"]
    assert bodies[-1].reason == "error"  # type: ignore[attr-defined]


async def test_malformed_responses_are_retried_then_end_the_session(kit, store) -> None:
    model = ScriptedModel([{"empty": True}] * 4)
    session = await Agent(model=model, model_name="m").run(store, "hi")
    bodies = await kit.bodies(store, session.id)
    assert [f.kind for f in kit.of_type(bodies, ModelFailed)] == ["malformed"] * 4
    assert bodies[-1].reason == "error"  # type: ignore[attr-defined]


async def test_repeated_call_ids_are_malformed(kit, store) -> None:
    twice = {"tool_calls": [{"name": "x", "id": "c1"}, {"name": "y", "id": "c1"}]}
    session = await Agent(model=ScriptedModel([twice, {"text": "ok"}]), model_name="m").run(
        store, "hi"
    )
    bodies = await kit.bodies(store, session.id)
    assert "repeated" in kit.of_type(bodies, ModelFailed)[0].message
    assert bodies[-1].reason == "completed"  # type: ignore[attr-defined]


async def test_turn_bound(kit, store, make_skill) -> None:
    loop = [kit.turn(kit.call("skills.unload", all=True))] * 10
    agent = kit.agent(loop, [make_skill("a")], max_turns=3)
    session = await agent.run(store, "hi")
    end = (await kit.bodies(store, session.id))[-1]
    assert isinstance(end, SessionEnded) and end.reason == "max_turns" and end.turns == 3


async def test_cancellation_leaves_a_resumable_log(kit, store, autojump_clock) -> None:
    gate = trio.Event()

    async def slow() -> str:
        """Wait for the gate."""
        await gate.wait()
        return "opened"

    def agent(turns: list[dict[str, object]], effect: str) -> Agent:
        tool = HostTool.from_function(slow, effect=effect)  # type: ignore[arg-type]
        return Agent(model=ScriptedModel(turns), model_name="m", host_tools=[tool])

    turns = [kit.turn(kit.call("slow")), {"text": "finished"}]
    sessions = (("s1", "idempotent"), ("s2", "at-most-once"))
    for session_id, effect in sessions:
        seen: list[StoredEvent] = []
        running = agent(turns, effect)
        running.observers = [seen.append]
        with trio.move_on_after(10):
            await running.run(store, "hi", session_id=session_id)
        assert (await verdict(store)).ok
        # Cancelled mid-call: the intent is in the log, the outcome is not.
        assert [e.type for e in seen][-1] == "tool.called"
    gate.set()
    for session_id, effect in sessions:
        resumed = await agent(turns[1:], effect).resume(store, session_id)
        assert resumed.state.status == "ended"
        assert (await verdict(store)).ok
    # An idempotent call runs again; an at-most-once one may have happened, so it does not.
    again = kit.of_type(await kit.bodies(store, "s1"), ToolCompleted)
    assert [c.content for c in again] == ["opened"]
    bodies = await kit.bodies(store, "s2")
    assert not kit.of_type(bodies, ToolCompleted)
    (interrupted,) = kit.of_type(bodies, ToolInterrupted)
    assert "may or may not have taken effect" in interrupted.content
    assert bodies[-1].reason == "completed"  # type: ignore[attr-defined]


async def test_observers_see_every_event_in_order(kit, store) -> None:
    seen: list[StoredEvent] = []
    agent = Agent(model=ScriptedModel([{"text": "hi"}]), model_name="m", observers=[seen.append])
    session = await agent.run(store, "hello")
    assert [e.seq for e in seen] == list(range(len(seen)))
    assert [e.hash for e in seen] == [e.hash async for e in store.read(session.id)]


async def test_enormous_responses_are_refused(kit, store) -> None:
    class Huge:
        provider = "test"
        calls = 0

        async def complete(self, request: ModelRequest) -> ModelResponse:
            self.calls += 1
            text = "x" * (2 << 20) if self.calls == 1 else "short"
            return ModelResponse(parts=(TextPart(text=text),), stop_reason="end_turn")

    session = await Agent(model=Huge(), model_name="m").run(store, "hi")
    bodies = await kit.bodies(store, session.id)
    assert "over" in kit.of_type(bodies, ModelFailed)[0].message
    assert bodies[-1].reason == "completed"  # type: ignore[attr-defined]


def test_model_error_defaults() -> None:
    e = ModelError("x")
    assert e.kind == "other" and not e.retryable and e.retry_after_ms is None


async def test_budgets_end_the_session_before_the_next_model_call(kit, store) -> None:
    from orchestrator import Budget, PolicyConfig

    usage = {"input_tokens": 3000, "output_tokens": 100}
    turns = [
        {"tool_calls": [{"id": f"c{i}", "name": "skills.unload", "arguments": {"all": True}}],
         "usage": usage}
        for i in range(5)
    ]  # fmt: skip
    cases = {
        "tokens": Budget(input_tokens=5000),
        "cost": Budget(cost_micro_usd=20_000, prices=(("m", 3_000_000, 15_000_000),)),
    }
    for name, budget in cases.items():
        agent = Agent(
            model=ScriptedModel(turns),
            model_name="m",
            skills=[],
            policy=PolicyConfig(budget=budget),
        )
        session = await agent.run(store, "go", session_id=name)
        end = (await kit.bodies(store, name))[-1]
        assert isinstance(end, SessionEnded) and end.reason == "budget_exceeded"
        assert end.error is not None and end.error.startswith(f"budget_exceeded: {name}")
        assert session.state.turn == 2  # checked before the third call: 6000 tokens, 21 mUSD


def test_two_skills_or_tools_with_one_name_are_an_error(make_skill) -> None:
    import pytest

    from orchestrator import AgentConfigError

    first = make_skill("same")
    with pytest.raises(AgentConfigError, match="two skills are named 'same'"):
        Agent(model=ScriptedModel([]), model_name="m", skills=[first, first])
    tool = HostTool.from_function(nap)
    with pytest.raises(AgentConfigError, match="two host tools are named 'nap'"):
        Agent(model=ScriptedModel([]), model_name="m", host_tools=[tool, tool])


async def test_a_prompts_tail_blob_is_committed_once_per_session(kit, store, make_skill) -> None:
    """The tail (system prompt and tools) stays the same turn after turn: the first
    prompt commits its blob, the later ones name it without sending it again, and the
    log still verifies and replays."""
    sent: list[list[bytes]] = []
    append = store.append

    async def counting(stream: str, events: object, **kwargs: object) -> object:
        sent.append(list(kwargs.get("blobs", ())))  # type: ignore[call-overload]
        return await append(stream, events, **kwargs)  # type: ignore[arg-type]

    store.append = counting  # type: ignore[method-assign]
    turns = [kit.turn(kit.call("skills.unload", all=True))] * 4 + [{"text": "done"}]
    session = await kit.agent(turns, [make_skill("a")]).run(store, "hi")
    prompts = kit.of_type(await kit.bodies(store, session.id), PromptRendered)
    assert len(prompts) == 5 and len({p.tail_digest for p in prompts}) == 1
    tail = await store.get_blob(prompts[0].tail_digest)
    assert sum(blobs.count(tail) for blobs in sent) == 1
    assert (await verdict(store)).ok
