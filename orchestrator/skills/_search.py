"""Ranked full-text search over skills: SQLite FTS5 with bm25 (``skills.search``).

A model choosing among hundreds of skills cannot read every description; it asks.
Each skill is one document of four columns, weighted by how much a match there says
about the skill: its name, its description, its metadata values (tags, keywords) and
the headings of its ``SKILL.md`` body. The query is split into words, each quoted (so
no FTS5 syntax in it is ever interpreted) and joined with OR: bm25 rewards documents
matching more and rarer words, so natural-language queries work without operators.

The table lives in its own SQLite connection (in memory by default): built once from
the skills a session starts with, it costs a few milliseconds per thousand skills, and
it depends on nothing but what the catalog already holds. Search results are tool
results: the runtime records them, and replay reads them from the log, never from here.
"""

from __future__ import annotations

import re
import sqlite3
import threading
import unicodedata
from collections.abc import Collection, Iterable, Sequence
from dataclasses import dataclass

WEIGHTS = (8.0, 4.0, 2.0, 1.0)
"""bm25 column weights: name, description, metadata, headings (bench/search.py)."""

MAX_QUERY_WORDS = 32
_STOP = """a an and are as at be by can do does for from get give how i in into is it me my
of on or out please should so some that the this to use want what when which with you your"""
STOPWORDS = frozenset(_STOP.split())
"""Words too common to say what a skill does: matching them only adds noise and time
(a query of nothing but these searches them after all)."""
_WORD = re.compile(r"\w+", re.UNICODE)
_HEADING = re.compile(r"^\s{0,3}#{1,6}\s+(.+?)\s*#*\s*$")


@dataclass(frozen=True)
class SearchDoc:
    """What search sees of one skill."""

    name: str
    description: str
    metadata: str = ""
    headings: str = ""


@dataclass(frozen=True)
class SearchHit:
    """One result: the skill's name and description, and its rank (1 = best)."""

    name: str
    description: str
    rank: int


def headings(body: str, limit: int = 64) -> tuple[str, ...]:
    """The markdown ATX headings of ``body`` outside fenced code blocks, in order."""
    out: list[str] = []
    fence: str | None = None
    for line in body.splitlines():
        stripped = line.lstrip()
        if stripped.startswith(("```", "~~~")):
            marker = stripped[:3]
            fence = None if fence == marker else (fence or marker)
            continue
        if fence is None:
            m = _HEADING.match(line)
            if m:
                out.append(m.group(1))
                if len(out) >= limit:
                    break
    return tuple(out)


def query_words(query: str) -> list[str]:
    """The words of ``query`` (NFKC, lowercased, at most ``MAX_QUERY_WORDS``)."""
    words = list(dict.fromkeys(_WORD.findall(unicodedata.normalize("NFKC", query).lower())))
    content = [w for w in words if w not in STOPWORDS]
    return (content or words)[:MAX_QUERY_WORDS]


class SkillSearch:
    """An FTS5 table of skills; thread-safe (one lock around its connection)."""

    def __init__(self, docs: Iterable[SearchDoc] = ()) -> None:
        self._conn = sqlite3.connect(":memory:", check_same_thread=False)
        self._lock = threading.Lock()
        # porter: "formatting" finds "format"; unicode61 folds case and diacritics.
        self._conn.execute(
            "CREATE VIRTUAL TABLE skills_fts USING fts5(skill UNINDEXED, "
            "name, description, metadata, headings, tokenize='porter unicode61')"
        )
        self.add(docs)

    def add(self, docs: Iterable[SearchDoc]) -> None:
        with self._lock, self._conn:
            self._conn.executemany(
                "INSERT INTO skills_fts (skill, name, description, metadata, headings) "
                "VALUES (?, ?, ?, ?, ?)",
                # Hyphens split a name into words for matching ("pdf-tools": pdf, tools).
                [
                    (d.name, d.name.replace("-", " "), d.description, d.metadata, d.headings)
                    for d in docs
                ],
            )

    def __len__(self) -> int:
        with self._lock:
            return int(self._conn.execute("SELECT count(*) FROM skills_fts").fetchone()[0])

    def search(
        self, query: str, *, limit: int = 5, among: Collection[str] | None = None
    ) -> list[SearchHit]:
        """The best ``limit`` skills for ``query``, best first, ties by name; only
        those named in ``among`` when given (the session's visible catalog)."""
        words = query_words(query)
        if not words or limit < 1:
            return []
        match = " OR ".join('"' + w.replace('"', '""') + '"' for w in words)
        w = ", ".join(str(x) for x in WEIGHTS)
        sql = (
            f"SELECT skill, description, bm25(skills_fts, 0.0, {w}) AS score FROM skills_fts "
            "WHERE skills_fts MATCH ? ORDER BY score, skill"
        )
        hits: list[SearchHit] = []
        with self._lock:
            for name, description, _score in self._conn.execute(sql, [match]):
                if among is not None and name not in among:
                    continue
                hits.append(SearchHit(name=name, description=description, rank=len(hits) + 1))
                if len(hits) >= limit:
                    break
        return hits

    def close(self) -> None:
        self._conn.close()


def search_doc(
    name: str, description: str, metadata: dict[str, str], heads: Sequence[str]
) -> SearchDoc:
    """The document of one skill (metadata values; ``requires`` names no topic)."""
    meta = " ".join(v for k, v in sorted(metadata.items()) if k not in ("requires", "version"))
    return SearchDoc(
        name=name,
        description=description,
        metadata=meta,
        headings=" \n".join(heads),
    )
