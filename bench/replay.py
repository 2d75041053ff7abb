"""Replay cost: a long session proved from its log alone.

    python bench/replay.py [--turns 250,500,1000]

Setup (issue 6): sessions recorded by the real runtime into SQLite files, 20 available
skills on disk, 3 of them active, a scripted model that calls skills.read every turn so
the history grows by two messages a turn. Each session is then replayed from the log
(chain verified, every event decoded and folded, every request re-rendered by the
composer and compared with its recorded hash and the recorded blobs).

Prints, for each length: the replay time, the total bytes of the requests re-rendered,
and the time per MB of requests. Target: 1,000 turns in <= 2 s; time linear in the
request bytes (the ms/MB column must not rise as the bytes grow quadratically).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import trio

# This folder holds bench/eventlog.py and bench/otel.py: the packages must win.
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from eventlog import open_sqlite_store
from orchestrator._loop import Agent
from orchestrator.adapters import ScriptedModel
from orchestrator.skills import Tier, load_skill
from replay import load_recording, replay_session, verify_recording

SKILLS = 20
ACTIVE = 3


def write_skills(root: Path) -> list[Path]:
    dirs = []
    for i in range(SKILLS):
        d = root / f"skill-{i:02d}"
        (d / "references").mkdir(parents=True)
        (d / "SKILL.md").write_text(
            f"---\nname: skill-{i:02d}\ndescription: Skill number {i} for benchmark tasks "
            f"of kind {i}.\n---\n# Skill {i}\n\n" + "Follow step by step.\n" * 20
        )
        (d / "references" / "guide.md").write_text(f"Guide {i}: " + "detail " * 40 + "\n")
        dirs.append(d)
    return dirs


def turns(n: int) -> list[dict[str, Any]]:
    names = [f"skill-{i:02d}" for i in range(ACTIVE)]
    script: list[dict[str, Any]] = [
        {"tool_calls": [{"name": "skills.load", "arguments": {"names": names}}]}
    ]
    for t in range(1, n - 1):
        skill = names[t % ACTIVE]
        script.append(
            {
                "text": f"Reading the guide of {skill} (turn {t}).",
                "tool_calls": [
                    {
                        "name": "skills.read",
                        "arguments": {"skill": skill, "path": "references/guide.md"},
                    }
                ],
            }
        )
    script.append({"text": "Done."})
    return script


async def record(db: Path, skills: list[Path], n: int) -> str:
    agent = Agent(
        model=ScriptedModel(turns(n)),
        model_name="bench",
        skills=[load_skill(d, tier=Tier.BUILTIN, source="bench") for d in skills],
        max_turns=n + 1,
    )
    async with open_sqlite_store(db, synchronous="NORMAL") as store:
        session = await agent.run(store, "Read every guide, one per turn.")
    return session.id


async def replay_once(db: Path, session: str) -> tuple[float, float, int, int]:
    """(total seconds, seconds in replay_session, request bytes, turns)."""
    start = time.perf_counter()
    async with open_sqlite_store(db, readonly=True) as store:
        recording = await load_recording(store, session)
        await verify_recording(store, session)
        mid = time.perf_counter()
        report = await replay_session(store, recording)
    end = time.perf_counter()
    assert report.ok, report.divergence
    return end - start, end - mid, report.request_bytes, len(report.turns)


async def main(lengths: list[int]) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        skills = write_skills(Path(tmp) / "skills")
        rows = []
        for n in lengths:
            db = Path(tmp) / f"s{n}.db"
            t0 = time.perf_counter()
            session = await record(db, skills, n)
            built = time.perf_counter() - t0
            best = min([await replay_once(db, session) for _ in range(3)])
            rows.append((n, built, *best))
    print(f"replay of sessions with {SKILLS} available skills, {ACTIVE} active (best of 3)")
    print(
        f"{'turns':>6} {'recorded in':>12} {'replay':>9} {'(prove)':>9} "
        f"{'request MB':>11} {'ms/MB':>7}"
    )
    base = rows[-1]
    for n, built, total, prove, nbytes, nturns in rows:
        assert nturns == n, (nturns, n)
        mb = nbytes / 1e6
        print(
            f"{n:>6} {built:>11.2f}s {total:>8.3f}s {prove:>8.3f}s {mb:>11.1f} "
            f"{1000 * total / mb:>7.1f}"
        )
    n, _, total, _, nbytes, _ = base
    print(
        f"\n{n} turns replayed in {total:.3f} s (target <= 2 s): {'ok' if total <= 2 else 'MISSED'}"
    )
    for m, _, t, _, b, _ in rows[:-1]:
        print(
            f"{m} -> {n} turns: request bytes x{nbytes / b:.2f}, replay time x{total / t:.2f}, "
            f"turns x{n / m:.2f}"
        )
    print(
        "replay time grows at most linearly in the re-rendered request bytes (ms/MB does "
        "not rise): history lines are hashed once and reused by every later request"
    )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--turns", default="250,500,1000")
    args = parser.parse_args()
    trio.run(main, [int(x) for x in args.turns.split(",")])
