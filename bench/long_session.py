"""A long session under a small context window: compaction, prefix reuse, caching.

    python bench/long_session.py [--turns 500] [--window 32000] [--read-bytes 4096]

Setup (issue 26): a scripted session of N turns, each reading a reference file of
``--read-bytes`` bytes (five files, in turn), under a ``--window``-token context window,
on a durable SQLite log. The model is a zero-latency scripted model behind a simulated
provider that reports usage as a caching provider would: input tokens are a quarter of
the request's bytes, and the part that repeats the previous request's start (in cache
order: tools, system, messages) is reported as read from the cache, the rest as written
to it. Prints, from one run:
  - whether the session completed, its turns and compactions;
  - prefix_reuse (as `skillog replay` reports it): mean and minimum over the requests
    between compactions, and over all;
  - the input tokens billed with and without caching, from the recorded usage (reads at
    0.1x and writes at 1.25x the input price, Anthropic's multipliers), and their ratio;
  - the runtime's own per-turn share (each turn less the time it awaited its durable
    appends, as bench/runtime.py measures it, and the simulated provider's time)
    against the same session without compaction (a window large enough for
    everything): target within 0.1 ms;
  - that the session replays byte for byte.
"""

from __future__ import annotations

import argparse
import itertools
import re
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Literal

import trio

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from runtime import TimedStore  # bench/runtime.py, beside this file

from eventlog import Event, open_sqlite_store
from orchestrator._context import tokens_of
from orchestrator._events import ContextCompacted, ContextPolicy, ModelResponded, PolicyConfig
from orchestrator._loop import Agent
from orchestrator._model import ModelRequest, ModelResponse, Usage, encode_canonical
from orchestrator.adapters import ScriptedModel
from orchestrator.skills import Skill, Tier, load_skill
from replay import load_recording, replay_session
from replay._request import RecordedRequests
from replay._reuse import common_prefix, prefix_reuse

FILES = 5
READ_PRICE, WRITE_PRICE = 0.1, 1.25  # of the input price


ACTIVE = re.compile(r"\n\n<active_skills>.*</active_skills>\Z", re.S)


Layout = Literal["one-block", "split", "results"]
LAYOUTS: dict[Layout, str] = {
    "one-block": "system prompt as one cached block (before this branch)",
    "split": "breakpoint before the active skills' block (the Anthropic adapter now)",
    "results": "instructions in the skills.load results only (instructions_mode results)",
}


class CachingProvider:
    """A scripted model whose usage is what a prompt-caching provider would report.

    Caching as Anthropic's works, at breakpoints: a request reads from the cache the
    longest of its breakpoint prefixes that the previous request wrote (at one of its
    own breakpoints) and that is byte for byte the same, and writes the rest. The
    breakpoints are the adapter's (``layout``): after the system prompt (``split``
    and ``results``: also before its active skills' block; ``one-block``: not), after
    the previous request's end and after the last message. ``results`` is the session
    run in instructions mode ``results`` (the composer leaves the instructions of
    skills loaded by ``skills.load`` out of the system prompt)."""

    def __init__(self, model: ScriptedModel, *, layout: Layout = "split") -> None:
        self.model = model
        self.provider = model.provider
        self.layout = layout
        self._previous = b""
        self._written: set[int] = set()
        self.spent = 0  # ns inside complete(): the provider's time, not the runtime's

    async def complete(self, request: ModelRequest) -> ModelResponse:
        start = time.perf_counter_ns()
        try:
            return await self._complete(request)
        finally:
            self.spent += time.perf_counter_ns() - start

    async def _complete(self, request: ModelRequest) -> ModelResponse:
        response = await self.model.complete(request)
        system = request.system
        tools = encode_canonical(request.tools)
        lines = [encode_canonical(m) + b"\n" for m in request.messages]
        layout = tools + system.encode() + b"".join(lines)
        marks = {len(tools) + len(system.encode())}
        active = ACTIVE.search(system)
        if self.layout != "one-block" and active is not None:
            marks.add(len(tools) + active.start())
        ends = list(itertools.accumulate(lines, lambda n, line: n + len(line), initial=max(marks)))
        marks.update(ends[-3:])  # the previous request's end (and the last answer's), this one's
        common = common_prefix(self._previous, layout)
        read = max((m for m in marks if m <= common and m in self._written), default=0)
        self._previous, self._written = layout, marks
        total, read = tokens_of(len(layout)), read // 4
        usage = Usage(
            input_tokens=total,
            output_tokens=40,
            cache_read_input_tokens=read,
            cache_creation_input_tokens=total - read,
        )
        return ModelResponse(
            parts=response.parts, stop_reason=response.stop_reason, usage=usage, model="bench"
        )


def make_helper(root: Path) -> Skill:
    """A second skill the session loads and unloads (``--skill-every``): 2 KB of
    instructions, the size of a typical SKILL.md body."""
    d = root / "helper"
    d.mkdir(parents=True)
    (d / "SKILL.md").write_text(
        "---\nname: helper\ndescription: Helps now and then.\n---\n" + "Help well.\n" * 200
    )
    return load_skill(d, tier=Tier.BUILTIN, source="bench")


def make_skill(root: Path, read_bytes: int) -> Skill:
    d = root / "reader"
    (d / "references").mkdir(parents=True)
    (d / "SKILL.md").write_text(
        "---\nname: reader\ndescription: Reads long references.\n---\n" + "Read.\n" * 40
    )
    for i in range(FILES):
        (d / "references" / f"part{i}.md").write_text(
            f"part {i}\n" + "lorem ipsum " * (read_bytes // 12)
        )
    return load_skill(d, tier=Tier.BUILTIN, source="bench")


def script(turns: int, skill_every: int = 0) -> list[dict[str, Any]]:
    """Load the reader, then ``turns`` reads; with ``skill_every``, the helper skill is
    loaded every that many turns and unloaded half way to the next load (each a turn
    of its own)."""
    load = {"tool_calls": [{"name": "skills.load", "arguments": {"names": ["reader"]}}]}
    out = [load]
    for i in range(turns):
        if skill_every and i % skill_every == skill_every - 1:
            args = {"names": ["helper"], "mode": "add"}
            out.append({"tool_calls": [{"name": "skills.load", "arguments": args}]})
        if skill_every and i % skill_every == skill_every // 2:
            args = {"names": ["helper"]}
            out.append({"tool_calls": [{"name": "skills.unload", "arguments": args}]})
        path = f"references/part{i % FILES}.md"
        out.append({"tool_calls": [{"name": "skills.read", "arguments": {"path": path}}]})
    return [*out, {"text": "done"}]


async def run(
    db: Path,
    skills: list[Skill],
    turns: int,
    window: int,
    *,
    context: ContextPolicy | None = None,
    skill_every: int = 0,
    layout: Layout = "split",
) -> tuple[str, list[int]]:
    """Run the session; its id and the runtime's own time per turn (ns)."""
    marks: list[tuple[int, int]] = []
    timed: TimedStore | None = None
    turns_script = script(turns, skill_every)
    model = CachingProvider(ScriptedModel(turns_script), layout=layout)

    def observe(event: Event) -> None:
        if event.type == "prompt.rendered":
            waited = (timed.appending if timed else 0) + model.spent
            marks.append((time.perf_counter_ns(), waited))

    agent = Agent(
        model=model,
        model_name="bench",
        skills=skills,
        max_turns=len(turns_script) + 5,
        context_window=window,
        policy=PolicyConfig(approve=(), context=context or ContextPolicy()),
        observers=[observe],
        instructions_mode="results" if layout == "results" else "system",
    )
    async with open_sqlite_store(db) as store:
        timed = TimedStore(store)
        session = await agent.run(timed, "read every part")  # type: ignore[arg-type]
    agent.close()
    # Each turn less the time it awaited durable appends and the (simulated) provider.
    own = [(b[0] - a[0]) - (b[1] - a[1]) for a, b in itertools.pairwise(marks)][1:]
    return session.id, own


def ms(ns: float) -> str:
    return f"{ns / 1e6:.3f} ms"


class Measured:
    """What one recorded session shows: its compactions, prefix reuse (between
    compactions, after the first, over all), where the bytes not reused went, and the
    input tokens billed with and without caching."""

    def __init__(self, recording: Any, recorded: RecordedRequests) -> None:
        bodies = recording.bodies
        self.compactions = [b for b in bodies if isinstance(b, ContextCompacted)]
        # The size of the request each compaction left (its last step's estimate), as a
        # share of the budget: the compaction aims at compact_to_percent.
        self.left = [
            b.tokens_after / b.budget
            for b, after in itertools.pairwise(bodies)
            if isinstance(b, ContextCompacted) and not isinstance(after, ContextCompacted)
        ] or [0.0]
        self.ended = bodies[-1]
        self.reuse = reuse = prefix_reuse(recording, recorded)
        broken = {b.seq for b in reuse.breaks}
        whole = [r for r in reuse.requests if r.seq not in broken]
        self.between = [r.share for r in whole]
        first = min((b.seq for b in reuse.breaks if b.compacted), default=0)
        self.steady = [r.share for r in whole if r.seq > first] or [0.0]
        # Between compactions each request repeats the whole previous one (that is what
        # not being a break means): every byte not reused was appended by the turn.
        sizes = {r.seq: r.size for r in reuse.requests}
        # Checked, not assumed: such a request's reused bytes are the previous request.
        previous = {b.seq: a.size for a, b in itertools.pairwise(reuse.requests)}
        self.whole = sum(1 for r in whole if r.reused == previous.get(r.seq))
        self.between_count = len(whole)
        self.appended = sum(r.size - r.reused for r in whole)
        self.mean_size = statistics.mean(sizes[r.seq] for r in whole)
        self.mean_added = self.appended / len(whole)
        usages = [b.response.usage for b in bodies if isinstance(b, ModelResponded)]
        self.hits = statistics.mean(
            u.cache_read_input_tokens / u.input_tokens for u in usages if u.input_tokens
        )
        self.billed = sum(u.input_tokens for u in usages)
        self.cached = sum(
            u.input_tokens
            - u.cache_read_input_tokens
            - u.cache_creation_input_tokens
            + READ_PRICE * u.cache_read_input_tokens
            + WRITE_PRICE * u.cache_creation_input_tokens
            for u in usages
        )

    def steps(self) -> str:
        return ", ".join(
            f"{step} {sum(1 for c in self.compactions if c.step == step)}"
            for step in ("tool_results", "skill_instructions", "drop_turns")
        )

    def line(self) -> str:
        breaks: dict[str, int] = {}
        for b in self.reuse.breaks:
            key = "compaction" if b.compacted else b.where
            breaks[key] = breaks.get(key, 0) + 1
        return (
            f"reuse between compactions {statistics.mean(self.between):.3f} (after the first "
            f"{statistics.mean(self.steady):.3f}), over all {self.reuse.mean:.3f}; "
            f"{len(self.compactions)} compactions; breaks {breaks}; "
            f"input read from the cache {self.hits:.3f} a request; "
            f"billed {self.billed / self.cached:.2f}x less with caching "
            f"({self.billed:,} tokens, {self.cached:,.0f} token-equivalents); "
            f"left by a compaction: {statistics.mean(self.left):.0%} of the budget on average "
            f"({min(self.left):.0%}-{max(self.left):.0%}); mean request {self.mean_size:,.0f} B"
        )


async def measured(db: Path, session: str) -> tuple[Measured, Any]:
    async with open_sqlite_store(db) as store:
        recording = await load_recording(store, session)
        recorded = RecordedRequests()
        report = await replay_session(store, recording, recorded=recorded)
    return Measured(recording, recorded), report


async def main(turns: int, window: int, read_bytes: int, sweep: bool, skill_every: int) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        skill = make_skill(Path(tmp), read_bytes)
        db = Path(tmp) / "long.db"
        session, own = await run(db, [skill], turns, window)
        _, plain = await run(Path(tmp) / "plain.db", [skill], turns, 100 * window * turns)
        m, report = await measured(db, session)
        print(
            f"setup: {turns} turns, each reading {read_bytes:,} bytes, a {window:,}-token "
            "window, SQLite synchronous=FULL, a zero-latency scripted model with simulated "
            "cache usage"
        )
        ended = m.ended
        print(
            f"session: {getattr(ended, 'reason', '?')} after {getattr(ended, 'turns', '?')} "
            f"turns; {len(m.compactions)} compactions ({m.steps()})"
        )
        reuse = m.reuse
        print(
            f"prefix_reuse between compactions: mean {statistics.mean(m.between):.3f}, min "
            f"{min(m.between):.3f} over {len(m.between)} requests (target mean >= 0.95); "
            f"after the first compaction (the history as long as the window allows): mean "
            f"{statistics.mean(m.steady):.3f}, min {min(m.steady):.3f}; over all: "
            f"mean {reuse.mean:.3f}, min {reuse.min:.3f}, {len(reuse.breaks)} breaks"
        )
        print(
            f"why: between compactions no byte of a previous request changes (checked: "
            f"{m.whole} of {m.between_count} requests repeat the whole previous one); the "
            f"{m.appended:,} bytes not reused are all appended by the turns (the answer and "
            f"its tool results, {m.mean_added:,.0f} bytes a turn) to requests of "
            f"{m.mean_size:,.0f} bytes on average: 1 - added/size bounds the share at "
            f"{1 - m.mean_added / m.mean_size:.3f}"
        )
        print(
            f"input tokens billed (from the recorded usage): {m.billed:,} without caching, "
            f"{m.cached:,.0f} token-equivalents with it: {m.billed / m.cached:.2f}x less"
        )
        a, b = statistics.median(own), statistics.median(plain)
        print(
            f"the runtime's own per-turn share: p50 {ms(a)} with compaction, {ms(b)} without "
            f"(same turns, a window that never fills): {ms(a - b)} difference "
            "(target <= 0.1 ms)"
        )
        print(
            f"replay: {'every request reproduced byte for byte' if report.ok else 'DIVERGES'} "
            f"({len(report.turns)} requests, {report.request_bytes:,} bytes re-rendered)"
        )
        path = Path(tmp) / "results.db"
        sid, _ = await run(path, [skill], turns, window, layout="results")
        print(f"instructions_mode system: {m.line()}")
        print(f"instructions_mode results: {(await measured(path, sid))[0].line()}")
        if sweep:
            print("compaction thresholds (compact_at_percent/compact_to_percent of the budget):")
            for at, to in ((80, 60), (85, 65), (90, 70), (90, 75), (95, 80)):
                path = Path(tmp) / f"sweep-{at}-{to}.db"
                policy = ContextPolicy(compact_at_percent=at, compact_to_percent=to)
                sid, _ = await run(path, [skill], turns, window, context=policy)
                print(f"  {at}/{to}: {(await measured(path, sid))[0].line()}")
        if skill_every:
            helper = make_helper(Path(tmp))
            print(
                f"skill activation (the helper skill loaded every {skill_every} turns, "
                "unloaded half way):"
            )
            for layout, label in LAYOUTS.items():
                path = Path(tmp) / f"skills-{layout}.db"
                sid, _ = await run(
                    path, [skill, helper], turns, window, skill_every=skill_every, layout=layout
                )
                print(f"  {label}: {(await measured(path, sid))[0].line()}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--turns", type=int, default=500)
    parser.add_argument("--window", type=int, default=32_000)
    parser.add_argument("--read-bytes", type=int, default=4096)
    parser.add_argument(
        "--sweep", action="store_true", help="also run the compaction thresholds' sweep"
    )
    parser.add_argument(
        "--skill-every",
        type=int,
        default=0,
        metavar="N",
        help="also compare the two ways of showing a skill loaded every N turns",
    )
    args = parser.parse_args()
    trio.run(main, args.turns, args.window, args.read_bytes, args.sweep, args.skill_every)
