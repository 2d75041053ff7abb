"""Benchmark choosing among many skills: search quality, search latency, catalog size,
and what a runtime's start costs.

Prints, in one run:

- top-1 and top-5 accuracy of ``skills.search`` (FTS5, bm25) on the labelled set of
  ``bench/search_set.py`` (26 public skills + 600 generated, 126 queries), next to a
  baseline that ranks by the count of query words in the name and description;
- search latency (median and p95 of the labelled queries) at 10,000 skills, and the
  time to build the search table for them;
- the catalog's estimated tokens in each catalog mode (full, compact, names, search);
- a runtime's start over the 626 skill directories: the old path (walk, read and hash
  every skill, then read and hash each again for the session) vs the persistent
  index, cold and warm.

Usage: ``.venv/bin/python bench/search.py`` (needs ``../shared/corpus``, else the set
is the generated skills only). Figures are wall-clock on this machine; only ratios in
the same run mean anything.
"""

from __future__ import annotations

import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.append(str(Path(__file__).resolve().parent))  # search_set, after the packages

from search_set import CORPUS_QUERIES, generated_queries, generated_skills

from orchestrator._context import tokens_of
from orchestrator._effects import skill_info
from orchestrator._prompt import catalog_block
from orchestrator.skills import (
    Catalog,
    SkillIndex,
    SkillsConfig,
    SkillSearch,
    SkillSource,
    Tier,
    build_catalog,
    search_doc,
)
from orchestrator.skills._search import query_words

CORPUS = Path(__file__).resolve().parents[2] / "shared" / "corpus"
if not CORPUS.is_dir():
    CORPUS = Path("/work/shared/corpus")


def write_skills(root: Path) -> list[str]:
    """The corpus skills (SKILL.md and markdown references) and the generated ones."""
    names = []
    for skill_md in sorted(CORPUS.glob("**/SKILL.md")) if CORPUS.is_dir() else []:
        d = root / skill_md.parent.name
        for f in skill_md.parent.rglob("*.md"):
            target = d / f.relative_to(skill_md.parent)
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(f.read_bytes())
        names.append(d.name)
    for name, description, tags in generated_skills():
        d = root / name
        (d / "references").mkdir(parents=True)
        subject, task = tags.split()
        (d / "SKILL.md").write_text(
            f"---\nname: {name}\ndescription: {description}\n"
            f"metadata:\n  tags: {tags}\n---\n\n# {task.title()} {subject}\n\n"
            "## Steps\n\nRead the input, do the work, check the result.\n\n"
            "## Troubleshooting\n\nSee references/notes.md.\n"
        )
        (d / "references" / "notes.md").write_text(f"Notes for {name}.\n" * 20)
        names.append(name)
    past = time.time_ns() - 3600 * 10**9  # not being edited now (the index's racy rule)
    for dirpath, dirnames, filenames in os.walk(root):
        for entry in [*dirnames, *filenames, "."]:
            os.utime(os.path.join(dirpath, entry), ns=(past, past))
    return names


def timed(fn: Callable[[], object]) -> tuple[float, object]:
    t = time.perf_counter()
    out = fn()
    return time.perf_counter() - t, out


def accuracy(
    rank: Callable[[str], list[str]], labelled: Sequence[tuple[str, str]]
) -> tuple[float, float, list[str]]:
    top1 = top5 = 0
    misses = []
    for query, expected in labelled:
        got = rank(query)
        top1 += bool(got) and got[0] == expected
        top5 += expected in got[:5]
        if expected not in got[:5]:
            misses.append(f"{query!r}: wanted {expected}, got {got[:3]}")
    n = len(labelled)
    return top1 / n, top5 / n, misses


def word_count_baseline(docs: list[tuple[str, str]]) -> Callable[[str], list[str]]:
    """Rank by how many query words occur in the name and description (ties by name)."""
    words_of = {n: set(query_words(n.replace("-", " ") + " " + d)) for n, d in docs}

    def rank(query: str) -> list[str]:
        q = set(query_words(query))
        scored = sorted(((-len(q & w), n) for n, w in words_of.items() if q & w))
        return [n for _, n in scored[:5]]

    return rank


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp) / "skills"
        root.mkdir()
        write_skills(root)
        source = SkillSource(path=str(root), tier=Tier.USER, label="bench")
        config = SkillsConfig(lenient=True, conventional=False)
        db = str(Path(tmp) / "index.db")

        def old_start() -> Catalog:
            catalog = build_catalog([source], config=config)
            [catalog.get(e.name) for e in catalog.visible()]
            return catalog

        def index_start() -> Catalog:
            index = SkillIndex(db)
            try:
                catalog = build_catalog([source], config=config, index=index)
            finally:
                index.close()
            [catalog.indexed(e.name) for e in catalog.visible()]
            return catalog

        t_old, _ = timed(old_start)
        t_cold, _ = timed(index_start)
        warm = [timed(index_start) for _ in range(3)]
        t_warm = statistics.median(t for t, _ in warm)
        catalog = warm[0][1]
        assert isinstance(catalog, Catalog)
        skills = [catalog.indexed(e.name) for e in catalog.visible()]
        n = len(skills)
        print(f"runtime start over {n} skills (discover + the session's skills):")
        print(f"  old path (walk, read, hash; then read and hash again): {t_old * 1000:8.1f} ms")
        print(f"  persistent index, cold:                               {t_cold * 1000:8.1f} ms")
        print(
            f"  persistent index, warm:                               {t_warm * 1000:8.1f} ms"
            f"  ({t_old / t_warm:.1f}x faster than the old path)"
        )

        docs = [
            search_doc(s.name, s.description, s.properties.metadata, s.headings) for s in skills
        ]
        index = SkillSearch(docs)
        corpus = CORPUS_QUERIES if CORPUS.is_dir() else []
        labelled = corpus + generated_queries()
        print(f"\nsearch quality: {len(labelled)} labelled queries over {n} skills")
        fts_rank = lambda q: [h.name for h in index.search(q, limit=5)]  # noqa: E731
        base_rank = word_count_baseline([(s.name, s.description) for s in skills])
        for part, queries in (
            ("all", labelled),
            ("public skills", corpus),
            ("generated", generated_queries()),
        ):
            if not queries:
                continue
            fts = accuracy(fts_rank, queries)
            base = accuracy(base_rank, queries)
            print(
                f"  {part:14} ({len(queries):3} queries): skills.search top-1 {fts[0]:6.1%} "
                f"top-5 {fts[1]:6.1%}   word-count baseline top-1 {base[0]:6.1%} "
                f"top-5 {base[1]:6.1%}"
            )
        for miss in accuracy(fts_rank, labelled)[2][:5]:
            print(f"  miss: {miss}")

        infos = tuple(skill_info(s, False) for s in skills)
        print(f"\ncatalog tokens ({n} skills, estimate: UTF-8 bytes / 4):")
        full = tokens_of(len(catalog_block(infos, False, "full").encode()))
        for mode in ("full", "compact", "names", "search"):
            tokens = tokens_of(len(catalog_block(infos, False, mode).encode()))
            print(f"  {mode:8} {tokens:8d}  ({tokens / full:.1%} of full)")

    big = [*docs]
    i = 0
    while len(big) < 10_000:
        d = docs[i % len(docs)]
        big.append(search_doc(f"{d.name}-v{i}", d.description, {"tags": d.metadata}, []))
        i += 1
    t_build, _ = timed(lambda: SkillSearch(big))
    big_index = SkillSearch(big)
    times = []
    for query, _ in labelled:
        t, _ = timed(lambda q=query: big_index.search(q, limit=5))  # type: ignore[misc]
        times.append(t * 1000)
    times.sort()
    print(f"\nsearch latency at {len(big)} skills ({len(times)} queries):")
    print(f"  build the table: {t_build * 1000:.1f} ms")
    print(
        f"  median {statistics.median(times):.2f} ms  "
        f"p95 {times[int(len(times) * 0.95)]:.2f} ms  max {times[-1]:.2f} ms"
    )


if __name__ == "__main__":
    main()
