"""Regenerate the golden logs in this folder from the current runtime code.

    .venv/bin/python tests/golden/regenerate.py

Each scenario runs the real runtime (real skills from ``skills/`` and
``orchestrator/demo``, real scripts, a real SQLite log) with a scripted model and a
fixed clock, and writes the session as a JSON Lines export (``<name>.jsonl``,
``eventlog.export_jsonl``: one event per line with the blobs it refers to).

CI replays and re-drives these files (tests/replay/test_golden.py). When a change to
the composer or the runtime makes them fail on purpose, regenerate them and review the
diff of the .jsonl files: it shows exactly which recorded bytes the change alters.
Times are fixed, so only what the code changed (and measured durations) differ.
"""

from __future__ import annotations

import sys
import tempfile
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import trio

from eventlog import EventStore, export_jsonl, open_sqlite_store
from orchestrator import ToolContext, decide_approval, pending_approvals
from orchestrator.cli._demo import TASK
from orchestrator.cli._demo import demo_agent as cli_demo_agent
from orchestrator._cancel import cancel_session
from orchestrator._effects import ApprovalDecision, ApprovalRequest
from orchestrator._events import PolicyConfig
from orchestrator._host_tools import HostTool
from orchestrator._loop import Agent, RetryPolicy
from orchestrator.adapters import ScriptedModel
from orchestrator.skills import Tier, load_skill

HERE = Path(__file__).parent
SKILLS = HERE / "skills"
T0 = 1_767_225_600_000_000_000  # 2026-01-01T00:00:00Z


def fixed_clock(start: int = T0, step: int = 1_000_000) -> Callable[[], int]:
    """A clock that advances one millisecond per reading, from ``start``."""
    now = start

    def clock() -> int:
        nonlocal now
        now += step
        return now

    return clock


def lookup(term: str) -> str:
    """Look a term up in the glossary."""
    return f"{term}: a word in the glossary"


async def approve_reads_only(request: ApprovalRequest) -> ApprovalDecision:
    """Approves nothing that runs: the golden approver for the denied script."""
    return ApprovalDecision(approved=False, decided_by="golden approver (scripts denied)")


def call(name: str, **arguments: Any) -> dict[str, Any]:
    return {"name": name, "arguments": arguments}


def demo_agent() -> tuple[Agent, str]:
    """The session of ``skillog demo`` (load, read, script, allowed-tools denial)."""
    return cli_demo_agent(sandbox="preferred", clock=fixed_clock()), TASK


LIFECYCLE_TURNS: list[dict[str, Any]] = [
    {"error": {"kind": "rate_limited", "message": "slow down", "retry_after_ms": 5}},
    {"text": "beta is active; I also need alpha.",
     "tool_calls": [call("skills.load", names=["alpha"], mode="add")],
     "usage": {"input_tokens": 812, "output_tokens": 24}},
    {"tool_calls": [call("skills.read", skill="alpha", path="references/guide.md"),
                    call("skills.read", skill="alpha", path="assets/pixel.png")]},
    {"text": "Now the data check.", "tool_calls": [call("skills.load", names=["gamma"])]},
    {"tool_calls": [call("skills.run_script", path="scripts/check.py", args=["data.csv"]),
                    call("lookup", term="beta")]},
    {"tool_calls": [call("skills.load", names=["gamma"], mode="add")]},
    {"tool_calls": [call("skills.unload", all=True)]},
    {"tool_calls": [call("skills.load", names=["delta", "missing-skill"])]},
    {"tool_calls": [call("skills.load", names=["delta"])]},
    {"tool_calls": [call("skills.run_script", path="scripts/setup.sh")]},
    {"tool_calls": [call("lookup", term="alpha")]},
    {"text": "Done: 2 rows are invalid; delta's setup was not approved.",
     "usage": {"input_tokens": 2301, "output_tokens": 17}},
]


def lifecycle_agent() -> tuple[Agent, str]:
    """Load/replace/unload, a user /skill activation, a binary read, a failing script,
    a denied approval, an unknown skill, host tool calls and a retried model error."""
    tiers = {"alpha": Tier.BUILTIN, "beta": Tier.ORG, "gamma": Tier.BUILTIN,
             "delta": Tier.THIRD_PARTY}
    skills = [
        load_skill(SKILLS / name, tier=tier, source=f"golden:{tier}")
        for name, tier in tiers.items()
    ]
    agent = Agent(
        model=ScriptedModel(LIFECYCLE_TURNS),
        model_name="golden-script",
        name="skillog-golden",
        skills=skills,
        host_tools=[HostTool.from_function(lookup)],
        policy=PolicyConfig(sandbox="preferred"),
        approver=approve_reads_only,
        max_turns=20,
        retry=RetryPolicy(base_ms=1, max_ms=5),
        clock=fixed_clock(),
    )
    return agent, "/beta\nWrite an alpha report on data.csv, then check the data."


def send_email(to: str, subject: str, context: ToolContext) -> str:
    """Send an email (an effect outside the session: at most once)."""
    return f"sent {subject!r} to {to} (key {context.idempotency_key})"


APPROVAL_TURNS: list[dict[str, Any]] = [
    {"tool_calls": [call("skills.load", names=["delta"])]},
    {"text": "Both need a person's approval.",
     "tool_calls": [call("skills.run_script", path="scripts/setup.sh"),
                    call("send_email", to="team@example.com", subject="Setup done")]},
    {"text": "Setup ran and the team was told."},
]


def approvals_agent() -> tuple[Agent, str]:
    """Write-ahead approvals: two calls of one turn wait for a person, the session
    suspends, the decisions are recorded from outside, and a resume continues."""
    agent = Agent(
        model=ScriptedModel(APPROVAL_TURNS),
        model_name="golden-script",
        name="skillog-golden",
        skills=[load_skill(SKILLS / "delta", tier=Tier.THIRD_PARTY, source="golden:third")],
        host_tools=[HostTool.from_function(send_email)],
        policy=PolicyConfig(sandbox="preferred", approve_host_tools=("send_email",)),
        clock=fixed_clock(),
    )
    return agent, "Set delta up, then email the team."


async def decide_then_resume(agent: Agent, store: EventStore, session_id: str) -> None:
    """A reviewer approves both pending calls from another 'process'; then resume."""
    clock = fixed_clock(T0 + 10**12)
    for pending in await pending_approvals(store, session_id):
        await decide_approval(
            store, session_id, pending.call_id, approved=True,
            decided_by="golden reviewer", reason="looks fine", clock=clock,
        )
    agent.clock = fixed_clock(T0 + 2 * 10**12)
    agent.model = ScriptedModel(APPROVAL_TURNS[2:])
    await agent.resume(store, session_id)


async def deny_one_then_cancel(agent: Agent, store: EventStore, session_id: str) -> None:
    """A reviewer denies the email from another 'process'; then an operator cancels
    the suspended session: the script's approval is denied, both calls get an error
    result, the session ends (``closes``: the cancel's three events before its end)."""
    await decide_approval(
        store, session_id, "call_1_1", approved=False, decided_by="golden reviewer",
        reason="not yet", clock=fixed_clock(T0 + 10**12),
    )  # fmt: skip
    await cancel_session(
        store, session_id, by="golden operator", reason="wrong day",
        clock=fixed_clock(T0 + 2 * 10**12),
    )  # fmt: skip


Continue = Callable[[Agent, EventStore, str], Awaitable[None]]
SCENARIOS: dict[str, tuple[Callable[[], tuple[Agent, str]], Continue | None]] = {
    "demo": (demo_agent, None),
    "lifecycle": (lifecycle_agent, None),
    "approvals": (approvals_agent, decide_then_resume),
    "cancelled": (approvals_agent, deny_one_then_cancel),
}


async def record(name: str, out_dir: Path) -> Path:
    """Run scenario ``name`` into a fresh SQLite log; write ``<name>.jsonl``."""
    make, then = SCENARIOS[name]
    agent, task = make()
    target = out_dir / f"{name}.jsonl"
    with tempfile.TemporaryDirectory() as tmp:
        try:
            async with open_sqlite_store(Path(tmp) / "golden.db") as store:
                await agent.run(store, task, session_id=f"golden-{name}")
                if then is not None:
                    await then(agent, store, f"golden-{name}")
                with target.open("wb") as f:
                    await export_jsonl(store, f, streams=[f"golden-{name}"])
        finally:
            agent.close()
    return target


async def regenerate(out_dir: Path = HERE) -> list[Path]:
    return [await record(name, out_dir) for name in SCENARIOS]


if __name__ == "__main__":
    for path in trio.run(regenerate, Path(sys.argv[1]) if len(sys.argv) > 1 else HERE):
        print(f"wrote {path}")
