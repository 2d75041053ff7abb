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
from replay import audit_session, load_recording, render_html, replay_session, verify_recording

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


async def report_once(db: Path, session: str, out: Path) -> tuple[float, float, int]:
    """``skillog replay --html``'s work: (total seconds, seconds rendering, page bytes)."""
    start = time.perf_counter()
    async with open_sqlite_store(db, readonly=True) as store:
        audit = await audit_session(store, session)
    mid = time.perf_counter()
    page = render_html(audit)
    await trio.Path(out).write_text(page, encoding="utf-8")
    end = time.perf_counter()
    assert audit.ok, audit.checks
    return end - start, end - mid, len(page.encode())


def browser_load(page: Path) -> tuple[float, float] | None:
    """Seconds for Debian's Chromium to load the page (to the load event) and to open
    the last prompt (its diff and bytes rebuilt in the page); None without Chromium."""
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        return None
    if not Path("/usr/bin/chromium").exists():
        return None
    with sync_playwright() as p:
        browser = p.chromium.launch(
            executable_path="/usr/bin/chromium", args=["--headless", "--no-sandbox"]
        )
        try:
            tab = browser.new_page()
            errors: list[str] = []
            tab.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
            start = time.perf_counter()
            tab.goto(page.as_uri(), wait_until="load")
            loaded = time.perf_counter() - start
            last = tab.locator("details.prompt").last
            start = time.perf_counter()
            last.locator("summary").click()
            last.locator("pre.bytes").wait_for()
            opened = time.perf_counter() - start
            assert not errors, errors
        finally:
            browser.close()
    return loaded, opened


async def main(lengths: list[int]) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        skills = write_skills(Path(tmp) / "skills")
        rows = []
        reports: list[tuple[int, tuple[float, float, int]]] = []
        for n in lengths:
            db = Path(tmp) / f"s{n}.db"
            t0 = time.perf_counter()
            session = await record(db, skills, n)
            built = time.perf_counter() - t0
            best = min([await replay_once(db, session) for _ in range(3)])
            rows.append((n, built, *best))
            page = Path(tmp) / f"s{n}.html"
            reports.append((n, min([await report_once(db, session, page) for _ in range(3)])))
        loaded = await trio.to_thread.run_sync(browser_load, page)
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
    print("\naudit report (skillog replay --html: every check, timeline, prompts; best of 3)")
    print(f"{'turns':>6} {'report':>9} {'(render)':>9} {'page MB':>8} {'KB/turn':>8}")
    for n, (total, render, size) in reports:
        print(f"{n:>6} {total:>8.3f}s {render:>8.3f}s {size / 1e6:>8.2f} {size / 1e3 / n:>8.1f}")
    n, (total, _, size) = reports[-1]
    verdict = "ok" if total < 2 and size < 5e6 else "MISSED"
    print(
        f"{n} turns: report in {total:.3f} s (target < 2 s), {size / 1e6:.2f} MB "
        f"(target < 5 MB): {verdict}"
    )
    if len(reports) > 1:
        m, (_, _, small) = reports[0]
        print(
            f"{m} -> {n} turns: page bytes x{size / small:.2f}, request bytes "
            f"x{rows[-1][4] / rows[0][4]:.2f} (the page stores each message once: it grows "
            "with the turns, not with the sum of the requests)"
        )
    if loaded is None:
        print("Chromium not available: page load not measured")
    else:
        print(
            f"Chromium loads the {n}-turn page in {loaded[0]:.3f} s and opens its last "
            f"prompt (diff and bytes rebuilt in the page) in {loaded[1]:.3f} s"
        )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--turns", default="250,500,1000")
    args = parser.parse_args()
    trio.run(main, [int(x) for x in args.turns.split(",")])
