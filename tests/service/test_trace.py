"""The session as a trace (``GET /api/sessions/{id}/trace``): the audit timeline's rows
with tokens, cached tokens and cost at the budget's prices, each request's diff against
the previous one, what the script printed; the scripted model's path shown by name."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from orchestrator import Budget
from orchestrator._events import PolicyConfig
from orchestrator.runtime import budget_cost

from .conftest import Service, running_service
from .test_api import wait_for


@pytest.fixture
async def service(
    tmp_path: Path, service_env: tuple[Path, dict[str, str]]
) -> AsyncIterator[Service]:
    config, tokens = service_env
    script = str(tmp_path / "turns.yaml")  # the scripted model's name in its session
    priced = Budget(cost_micro_usd=10**9, prices=((script, 3_000_000, 15_000_000),))
    presets = {"default": PolicyConfig(), "priced": PolicyConfig(approve=(), budget=priced)}
    async with running_service(tmp_path, config, tokens, policies=presets) as service:
        yield service


async def test_trace_rows_diffs_and_script_output(service: Service, tmp_path: Path) -> None:
    async with service.client("sam") as client:
        made = await client.post("/api/sessions", json={"task": "trace me", "policy": "priced"})
        session = made.json()["session_id"]
        await wait_for(service, session, "ended")
        plain = (await client.post("/api/sessions", json={"task": "no prices"})).json()
        await wait_for(service, plain["session_id"], "awaiting_approval")
        got = await client.get(f"/api/sessions/{session}/trace")
        assert got.status_code == 200, got.text
        trace = got.json()
        unpriced = (await client.get(f"/api/sessions/{plain['session_id']}/trace")).json()
        head = (await client.get(f"/api/sessions/{session}")).json()["seq"]
        later = (await client.get(f"/api/sessions/{session}/trace?from_seq={head + 1}")).json()
        missing = await client.get("/api/sessions/nope/trace")
    assert str(tmp_path / "turns.yaml") not in got.text
    models = [r for r in trace["rows"] if r["kind"] == "model"]
    assert len(models) == 3
    for row in models:
        details = row["details"]
        assert details["cost_micro_usd"] == 0  # priced, and the scripted model used no tokens
        assert details["cache_read_tokens"] == 0 and details["cache_write_tokens"] == 0
        assert details["model"] == "turns.yaml"
    assert [r["details"]["cost_micro_usd"] for r in unpriced["rows"] if r["kind"] == "model"] == [
        None
    ] * 2
    # The same rows as the audit report's timeline: one function computes both.
    assert [r["kind"] for r in trace["rows"]][:3] == ["session", "user", "prompt"]
    prompts = trace["prompts"]
    assert [p["turn"] for p in prompts] == [1, 2, 3]
    first, second, third = (p["diff"] for p in prompts)
    assert first.startswith("--- the previous request\n+++ this request\n")
    assert "+    <active_skills>" in second  # the skill loaded in turn 1
    assert third == ""  # the tail did not change: only messages were added
    (output,) = trace["outputs"]
    assert output["stdout"] == "hi ['<i>x</i>']\n" and not output["truncated"]
    assert later == {"session_id": session, "rows": [], "prompts": [], "outputs": []}
    assert missing.status_code == 404


def test_budget_cost_prices_cached_tokens_apart() -> None:
    budget = Budget(prices=(("m", 3_000_000, 15_000_000),))
    # 1,000 input (200 of them read from the cache), 100 output: all input at 3 USD/M.
    assert budget_cost(budget, "m", 1_000, 100, (200, 0)) == 4_500
    assert budget_cost(budget, "other", 1_000, 100) is None
    cached = Budget(prices=budget.prices, cache_prices=(("m", 300_000, 3_750_000),))
    # 800 uncached at 3, 200 read at 0.3, 100 output at 15 (micro-USD per million).
    assert budget_cost(cached, "m", 1_000, 100, (200, 0)) == 3_960
