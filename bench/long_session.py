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
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import trio

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from runtime import TimedStore  # bench/runtime.py, beside this file

from eventlog import Event, open_sqlite_store
from orchestrator._context import tokens_of
from orchestrator._events import ContextCompacted, ModelResponded, PolicyConfig
from orchestrator._loop import Agent
from orchestrator._model import ModelRequest, ModelResponse, Usage, encode_canonical
from orchestrator.adapters import ScriptedModel
from orchestrator.skills import Skill, Tier, load_skill
from replay import load_recording, replay_session
from replay._request import RecordedRequests
from replay._reuse import common_prefix, prefix_reuse

FILES = 5
READ_PRICE, WRITE_PRICE = 0.1, 1.25  # of the input price


class CachingProvider:
    """A scripted model whose usage is what a prefix-caching provider would report."""

    def __init__(self, model: ScriptedModel) -> None:
        self.model = model
        self.provider = model.provider
        self._previous = b""
        self.spent = 0  # ns inside complete(): the provider's time, not the runtime's

    async def complete(self, request: ModelRequest) -> ModelResponse:
        start = time.perf_counter_ns()
        try:
            return await self._complete(request)
        finally:
            self.spent += time.perf_counter_ns() - start

    async def _complete(self, request: ModelRequest) -> ModelResponse:
        response = await self.model.complete(request)
        layout = (
            encode_canonical(request.tools)
            + request.system.encode()
            + b"".join(encode_canonical(m) + b"\n" for m in request.messages)
        )
        common = common_prefix(self._previous, layout)
        self._previous = layout
        total, read = tokens_of(len(layout)), common // 4
        usage = Usage(
            input_tokens=total,
            output_tokens=40,
            cache_read_input_tokens=read,
            cache_creation_input_tokens=total - read,
        )
        return ModelResponse(
            parts=response.parts, stop_reason=response.stop_reason, usage=usage, model="bench"
        )


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


def script(turns: int) -> list[dict[str, Any]]:
    load = {"tool_calls": [{"name": "skills.load", "arguments": {"names": ["reader"]}}]}
    reads = [
        {
            "tool_calls": [
                {"name": "skills.read", "arguments": {"path": f"references/part{i % FILES}.md"}}
            ]
        }
        for i in range(turns)
    ]
    return [load, *reads, {"text": "done"}]


async def run(db: Path, skill: Skill, turns: int, window: int) -> tuple[str, list[int]]:
    """Run the session; its id and the runtime's own time per turn (ns)."""
    marks: list[tuple[int, int]] = []
    timed: TimedStore | None = None
    model = CachingProvider(ScriptedModel(script(turns)))

    def observe(event: Event) -> None:
        if event.type == "prompt.rendered":
            waited = (timed.appending if timed else 0) + model.spent
            marks.append((time.perf_counter_ns(), waited))

    agent = Agent(
        model=model,
        model_name="bench",
        skills=[skill],
        max_turns=turns + 5,
        context_window=window,
        policy=PolicyConfig(approve=()),
        observers=[observe],
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


async def main(turns: int, window: int, read_bytes: int) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        skill = make_skill(Path(tmp), read_bytes)
        db = Path(tmp) / "long.db"
        session, own = await run(db, skill, turns, window)
        _, plain = await run(Path(tmp) / "plain.db", skill, turns, 100 * window * turns)
        async with open_sqlite_store(db) as store:
            recording = await load_recording(store, session)
            recorded = RecordedRequests()
            report = await replay_session(store, recording, recorded=recorded)
    bodies = recording.bodies
    compactions = [b for b in bodies if isinstance(b, ContextCompacted)]
    ended = bodies[-1]
    print(
        f"setup: {turns} turns, each reading {read_bytes:,} bytes, a {window:,}-token window, "
        "SQLite synchronous=FULL, a zero-latency scripted model with simulated cache usage"
    )
    print(
        f"session: {getattr(ended, 'reason', '?')} after {getattr(ended, 'turns', '?')} turns; "
        f"{len(compactions)} compactions ("
        + ", ".join(
            f"{step} {sum(1 for c in compactions if c.step == step)}"
            for step in ("tool_results", "skill_instructions", "drop_turns")
        )
        + ")"
    )
    reuse = prefix_reuse(recording, recorded)
    broken = {b.seq for b in reuse.breaks}
    between = [r.share for r in reuse.requests if r.seq not in broken]
    first = min((b.seq for b in reuse.breaks if b.compacted), default=0)
    steady = [r.share for r in reuse.requests if r.seq not in broken and r.seq > first]
    print(
        f"prefix_reuse between compactions: mean {statistics.mean(between):.3f}, min "
        f"{min(between):.3f} over {len(between)} requests (target mean >= 0.95); after the "
        f"first compaction (the history as long as the window allows): mean "
        f"{statistics.mean(steady or [0]):.3f}, min {min(steady or [0]):.3f}; over all: "
        f"mean {reuse.mean:.3f}, min {reuse.min:.3f}, {len(reuse.breaks)} breaks"
    )
    usages = [b.response.usage for b in bodies if isinstance(b, ModelResponded)]
    billed = sum(u.input_tokens for u in usages)
    cached = sum(
        u.input_tokens
        - u.cache_read_input_tokens
        - u.cache_creation_input_tokens
        + READ_PRICE * u.cache_read_input_tokens
        + WRITE_PRICE * u.cache_creation_input_tokens
        for u in usages
    )
    print(
        f"input tokens billed (from the recorded usage): {billed:,} without caching, "
        f"{cached:,.0f} token-equivalents with it: {billed / cached:.2f}x less"
    )
    a, b = statistics.median(own), statistics.median(plain)
    print(
        f"the runtime's own per-turn share: p50 {ms(a)} with compaction, {ms(b)} without "
        f"(same turns, a window that never fills): {ms(a - b)} difference (target <= 0.1 ms)"
    )
    print(
        f"replay: {'every request reproduced byte for byte' if report.ok else 'DIVERGES'} "
        f"({len(report.turns)} requests, {report.request_bytes:,} bytes re-rendered)"
    )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--turns", type=int, default=500)
    parser.add_argument("--window", type=int, default=32_000)
    parser.add_argument("--read-bytes", type=int, default=4096)
    args = parser.parse_args()
    trio.run(main, args.turns, args.window, args.read_bytes)
