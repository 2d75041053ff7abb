"""``skillog demo``: a complete scripted session on the bundled example skills.

The model is scripted (orchestrator/demo/turns.yaml), everything else is real: the
skills are parsed, hashed and snapshotted, the script runs in the bubblewrap sandbox,
the allowlist denies a tool call, every step is appended durably to the SQLite log,
and the log is verified at the end.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path
from typing import Literal

import trio

from eventlog import describe_db, visible

from .._catalog import open_log
from .._events import PolicyConfig
from .._host_tools import HostTool
from .._loop import Agent
from .._session import Clock
from .._transcript import transcript
from .._verdict import verdict
from ..scripts import sandbox_available
from ..skills import Tier, load_skill
from ._session import add_db, read_bodies

DEMO = Path(__file__).parent.parent / "demo"
TASK = (
    "Summarize the sample sales CSV (assets/sales.csv of the csv-insights skill) by region, "
    "then email the report to team@example.com."
)


def send_report(to: str, subject: str) -> str:
    """Email the latest report to a recipient."""
    return f"queued report {subject!r} for {to}"


def demo_agent(*, sandbox: Literal["required", "preferred"], clock: Clock = time.time_ns) -> Agent:
    """The demo's agent: the bundled skills, the scripted turns, ``send_report``."""
    from ..adapters import ScriptedModel

    skills = [
        load_skill(path, tier=Tier.BUILTIN, source="builtin:demo")
        for path in sorted((DEMO / "skills").iterdir())
    ]
    return Agent(
        model=ScriptedModel.from_file(DEMO / "turns.yaml"),
        model_name="demo-script",
        name="skillog-demo",
        skills=skills,
        host_tools=[HostTool.from_function(send_report)],
        policy=PolicyConfig(sandbox=sandbox),
        max_turns=10,
        clock=clock,
    )


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_db(parser)


def run(args: argparse.Namespace) -> int:
    return trio.run(_demo, args)


async def _demo(args: argparse.Namespace) -> int:
    sandboxed = sandbox_available()
    agent = demo_agent(sandbox="required" if sandboxed else "preferred")
    skills = agent.skills
    try:
        async with open_log(args.db) as store:
            session = await agent.run(store, TASK)
            bodies = await read_bodies(store, session.id)
            report = await verdict(store)
    finally:
        agent.close()
    print(f"skillog demo: session {session.id} in {describe_db(args.db)}")
    if not sandboxed:
        print("note: bubblewrap is not installed, so the script ran without a sandbox")
    print()
    for line in transcript(bodies):
        print(visible(line))
    print()
    print(f"{len(bodies)} events recorded; {len(skills)} skills available")
    if not report.ok:
        print(f"log verification FAILED: {visible(str(report.fault))}")
        return 1
    print(
        f"log verified: {report.events} events in {report.streams} session(s) and "
        f"{report.blobs} blobs, every hash chain and blob intact, every event in the "
        "session grammar"
    )
    print(f"next: skillog replay {session.id} --db {describe_db(args.db)}")
    return 0
