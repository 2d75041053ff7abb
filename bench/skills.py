"""Benchmark the skills domain against the alternatives, in one run.

Generates N skills (a ~2 KB SKILL.md plus three resource files each) in a temporary
directory and prints:

- cold indexing (discover, parse, validate, hash, write the SQLite index) vs the
  reference validator skills-ref's ``read_properties`` + ``validate`` over the same tree
  (target: at least 5x faster);
- a warm start with nothing changed vs the cold index (target: at most 10%), next to
  the floor of any warm start that notices in-place edits: one ``os.stat`` of every
  file and directory of every skill, with no other work;
- skill hashing throughput vs plain sha256 of every file (target: at least 80%).

Usage: ``.venv/bin/python bench/skills.py [N]`` (default 10000; use 500 for a smoke run).
Figures are wall-clock medians of ``--repeat`` runs on this machine; only the ratios
measured in the same run mean anything.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from orchestrator.skills import SkillIndex, SkillSource, Tier, build_catalog, skill_hash

WORDS = [
    "alpha",
    "beta",
    "gamma",
    "delta",
    "extract",
    "merge",
    "fill",
    "forms",
    "tables",
    "report",
    "chart",
    "data",
]


def generate(root: Path, n: int) -> list[Path]:
    """Write ``n`` skills under ``root``; return their directories."""
    dirs = []
    past = time.time_ns() - 3600 * 10**9  # a tree not being edited right now
    for i in range(n):
        name = f"skill-{i:05d}"
        d = root / name
        (d / "scripts").mkdir(parents=True)
        (d / "references").mkdir()
        (d / "assets").mkdir()
        text = " ".join(WORDS[(i + k) % len(WORDS)] for k in range(300))
        (d / "SKILL.md").write_text(
            f"---\nname: {name}\ndescription: Generated skill {i}. Use when benchmarking "
            f"{WORDS[i % len(WORDS)]} work.\nlicense: MIT\nmetadata:\n  author: bench\n"
            f'  version: "1.{i}"\n---\n# Skill {i}\n\n{text}\n'
        )
        (d / "scripts" / "run.sh").write_text("#!/bin/sh\n" + f"echo {text[:900]}\n")
        (d / "scripts" / "run.sh").chmod(0o755)
        (d / "references" / "REFERENCE.md").write_text((text + "\n") * 3)
        rows = ",".join(str(k) for k in range(250))
        (d / "assets" / "data.json").write_text('{"rows": [' + rows + "]}\n")
        for f in ("SKILL.md", "scripts/run.sh", "references/REFERENCE.md", "assets/data.json"):
            os.utime(d / f, ns=(past, past))
        for sub in ("scripts", "references", "assets", ""):
            os.utime(d / sub, ns=(past, past))
        dirs.append(d)
    return dirs


def timed(fn: Callable[[], object], repeat: int) -> float:
    runs = []
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        runs.append(time.perf_counter() - t)
    return statistics.median(runs)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("n", nargs="?", type=int, default=10_000, help="number of skills")
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    try:
        from skills_ref.parser import read_properties
        from skills_ref.validator import validate
    except ImportError:
        sys.exit("skills-ref is not installed (pip install skills-ref); it is the baseline")

    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp) / "skills"
        t = time.perf_counter()
        dirs = generate(root, args.n)
        print(f"generated {args.n} skills ({4 * args.n} files) in {time.perf_counter() - t:.1f}s")
        sources = [SkillSource(path=str(root), tier=Tier.USER, label="bench")]
        limits = {"max_dirs": args.n * 2 + 10}
        from orchestrator.skills import SkillsConfig

        config = SkillsConfig(conventional=False, **limits)  # type: ignore[arg-type]
        db_count = [0]

        def cold() -> None:
            db_count[0] += 1
            index = SkillIndex(os.path.join(tmp, f"cold{db_count[0]}.db"))
            cat = build_catalog(sources, config=config, index=index)
            index.close()
            assert len(cat.entries) == args.n, (len(cat.entries), cat.rejected[:1])

        warm_db = os.path.join(tmp, "warm.db")
        index = SkillIndex(warm_db)
        build_catalog(sources, config=config, index=index)

        def warm() -> None:
            cat = build_catalog(sources, config=config, index=index)
            assert len(cat.entries) == args.n

        def reference() -> None:
            for d in dirs:
                read_properties(d)
                assert validate(d) == []

        known = [str(p) for d in dirs for p in (d, *d.rglob("*"))]

        def stat_floor() -> None:
            for p in known:
                os.stat(p)

        def ours_hash() -> None:
            for d in dirs:
                skill_hash(d)

        def plain_hash() -> None:
            for dirpath, _, names in os.walk(root):
                for n in names:
                    with open(os.path.join(dirpath, n), "rb") as f:
                        hashlib.sha256(f.read()).hexdigest()

        t_cold = timed(cold, args.repeat)
        t_warm = timed(warm, args.repeat)
        t_floor = timed(stat_floor, args.repeat)
        t_ref = timed(reference, 1 if args.n > 2000 else args.repeat)
        t_plain = timed(plain_hash, args.repeat)
        t_hash = timed(ours_hash, args.repeat)
        t_plain = min(t_plain, timed(plain_hash, args.repeat))  # fairness: both warm caches
        total_bytes = sum(f.stat().st_size for d in dirs for f in d.rglob("*") if f.is_file())

    n = args.n
    print(f"\n{'measure':44} {'seconds':>9} {'per skill':>11}")
    rows = [
        ("cold index (discover+parse+validate+hash+db)", t_cold),
        ("skills-ref read_properties + validate", t_ref),
        ("warm start, nothing changed", t_warm),
        (f"stat floor: os.stat of {len(known) // n} paths/skill", t_floor),
        ("skill_hash of every skill", t_hash),
        ("plain sha256 of every file", t_plain),
    ]
    for label, secs in rows:
        print(f"{label:44} {secs:9.3f} {secs / n * 1e6:9.1f}µs")
    mb = total_bytes / 1e6
    print(f"\nhashing throughput: ours {mb / t_hash:.0f} MB/s, plain {mb / t_plain:.0f} MB/s")
    checks = [
        ("cold index vs skills-ref", t_ref / t_cold, "x faster", t_ref / t_cold >= 5, ">= 5x"),
        ("warm start / cold index", 100 * t_warm / t_cold, "%", t_warm / t_cold <= 0.10, "<= 10%"),
        ("  stat floor / cold index", 100 * t_floor / t_cold, "%", None, ""),
        (
            "hash throughput / plain sha256",
            100 * t_plain / t_hash,
            "%",
            t_plain / t_hash >= 0.8,
            ">= 80%",
        ),
    ]
    print()
    for label, value, unit, ok, target in checks:
        verdict = "" if ok is None else f"target {target:7} {'PASS' if ok else 'MISS'}"
        print(f"{label:34} {value:7.1f}{unit:9} {verdict}".rstrip())


if __name__ == "__main__":
    main()
