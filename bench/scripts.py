"""Script start overhead: the sandbox and the supervisor against a plain subprocess.

Runs the same trivial script N times each way, in one process, the ways interleaved
round-robin so machine noise hits them alike, and prints the medians and the ratios to
the plain subprocess:

- ``plain``: ``trio.run_process`` of the same interpreter argv, capturing its output;
- ``bwrap bare``: ``trio.run_process`` of the same argv wrapped by ``build_bwrap_argv``;
- ``run_script off``: :func:`run_script` without the sandbox (validation, path gate,
  scrubbed env, private tmp, supervision);
- ``run_script bwrap``: :func:`run_script` inside bubblewrap, with the default limits
  (prlimit, cgroups where the host has them, a size-capped /tmp).

Then N scripts at once (``--parallel``): N plain subprocesses side by side against N
sandboxed :func:`run_script` calls side by side, as scripts per second.

Usage: ``.venv/bin/python bench/scripts.py [--runs N] [--parallel N]``
"""

from __future__ import annotations

import argparse
import functools
import statistics
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

import trio

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from orchestrator.scripts._run import (
    SandboxPolicy,
    ScriptRequest,
    base_env,
    interpreter_command,
    run_script,
)
from orchestrator.scripts._sandbox import SKILL_MOUNT, SYSTEM_PATH, build_bwrap_argv, probe_sandbox

SCRIPTS = {"noop.sh": "exit 0\n", "noop.py": "pass\n"}
Way = Callable[[], Awaitable[object]]


async def plain(argv: list[str]) -> object:
    env = {"PATH": SYSTEM_PATH}
    return await trio.run_process(argv, capture_stdout=True, capture_stderr=True, env=env)


async def supervised(request: ScriptRequest) -> object:
    result = await run_script(request)
    assert result.exit_code == 0 and result.refused is None, result
    return result


def ways_for(root: Path, rel: str, have_bwrap: bool) -> dict[str, Way]:
    prefix = interpreter_command(rel, executable=False)

    def request(sandbox: SandboxPolicy) -> ScriptRequest:
        return ScriptRequest(root=str(root), path=rel, sandbox=sandbox)

    ways: dict[str, Way] = {
        "plain": functools.partial(plain, [*prefix, str(root / rel)]),
        "run_script off": functools.partial(supervised, request("off")),
    }
    probe = probe_sandbox()
    if have_bwrap and probe.bwrap is not None and probe.layout is not None:
        bare = build_bwrap_argv(
            bwrap=probe.bwrap,
            layout=probe.layout,
            skill_root=str(root),
            chdir=SKILL_MOUNT,
            command=[*prefix, f"{SKILL_MOUNT}/{rel}"],
            env=base_env("/tmp", {}),
            network=False,
            disable_userns=probe.disable_userns,
        )
        ways["bwrap bare"] = functools.partial(plain, bare)
        ways["run_script bwrap"] = functools.partial(supervised, request("required"))
    return ways


async def measure(ways: dict[str, Way], runs: int) -> dict[str, float]:
    samples: dict[str, list[int]] = {way: [] for way in ways}
    for way in ways.values():
        await way()  # warm-up: page cache, the sandbox probe
    for _ in range(runs):
        for name, way in ways.items():
            start = time.perf_counter_ns()
            await way()
            samples[name].append(time.perf_counter_ns() - start)
    return {name: statistics.median(s) / 1e6 for name, s in samples.items()}


async def throughput(ways: dict[str, Way], n: int, rounds: int) -> dict[str, float]:
    """Scripts per second with ``n`` at once, for the plain and the sandboxed way."""
    rates: dict[str, list[float]] = {}
    for _ in range(rounds):
        for name in ("plain", "run_script bwrap"):
            if name not in ways:
                continue
            start = time.perf_counter_ns()
            async with trio.open_nursery() as nursery:
                for _ in range(n):
                    nursery.start_soon(ways[name])
            rates.setdefault(name, []).append(n / ((time.perf_counter_ns() - start) / 1e9))
    return {name: statistics.median(r) for name, r in rates.items()}


async def bench(runs: int, parallel: int) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp) / "bench-skill"
        (root / "scripts").mkdir(parents=True)
        for name, text in SCRIPTS.items():
            (root / "scripts" / name).write_text(text)
        have_bwrap = probe_sandbox().available
        print(f"runs per figure: {runs} (interleaved); bubblewrap: {have_bwrap}")
        print(f"{'script':<8} {'way':<17} {'median ms':>10} {'x plain':>8}")
        for name in SCRIPTS:
            medians = await measure(ways_for(root, f"scripts/{name}", have_bwrap), runs)
            for way, ms in medians.items():
                print(f"{name:<8} {way:<17} {ms:>10.2f} {ms / medians['plain']:>8.2f}")
        if have_bwrap:
            rates = await throughput(ways_for(root, "scripts/noop.py", True), parallel, 5)
            print(f"\n{parallel} noop.py at once (median of 5 rounds), scripts per second:")
            for way, rate in rates.items():
                print(f"  {way:<17} {rate:>8.1f} {rate / rates['plain']:>6.2f}x plain")


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--runs", type=int, default=50, help="runs per figure (default 50)")
    parser.add_argument("--parallel", type=int, default=8, help="scripts at once (default 8)")
    args = parser.parse_args()
    trio.run(bench, args.runs, args.parallel)


if __name__ == "__main__":
    main()
