"""Ranked full-text search over skills: SQLite FTS5 with bm25 (``skills.search``).

A model choosing among hundreds of skills cannot read every description; it asks.
Each skill is one document of four columns, weighted by how much a match there says
about the skill: its name, its description, its metadata values (tags, keywords) and
the headings of its ``SKILL.md`` body. The query is split into words, each quoted (so
no FTS5 syntax in it is ever interpreted) and joined with OR: bm25 rewards documents
matching more and rarer words, so natural-language queries work without operators.

The table lives in memory by default, built from the skills a session starts with. With
``path`` (the SQLite file that holds the skills index, beside the event log) it is the
table ``skills_search_v1`` of that file, kept across sessions and processes: each row
is keyed by the sha256 of its document, a session inserts only the documents the table
lacks, and searches only the rows whose key is one of its own skills' (so sessions with
other skills, or another version of one, share the file without seeing each other's);
rows no session of this process wants are pruned when they outnumber the wanted ones.
Search results are tool results: the runtime records them, and replay reads them from
the log, never from here.
"""

from __future__ import annotations

import hashlib
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


TABLE = "skills_search_v1"


def doc_key(d: SearchDoc) -> str:
    """The sha256 of what search sees of a skill: its row's key."""
    parts = (d.name, d.description, d.metadata, d.headings)
    return hashlib.sha256("\0".join(parts).encode("utf-8", "surrogatepass")).hexdigest()


class SkillSearch:
    """An FTS5 table of skills, in memory or (``path``) in the skills index's SQLite
    file; thread-safe (one lock around its connection)."""

    def __init__(self, docs: Iterable[SearchDoc] = (), *, path: str | None = None) -> None:
        self._conn = sqlite3.connect(path or ":memory:", check_same_thread=False, timeout=30)
        self._lock = threading.Lock()
        self._wanted: dict[str, str] = {}  # skill name -> its document's key
        self.inserted = 0  # rows this instance had to add (0 on a warm start)
        # porter: "formatting" finds "format"; unicode61 folds case and diacritics.
        with self._conn:
            self._conn.execute(
                f"CREATE VIRTUAL TABLE IF NOT EXISTS {TABLE} USING fts5(skill UNINDEXED, "
                "key UNINDEXED, name, description, metadata, headings, "
                "tokenize='porter unicode61')"
            )
        self.add(docs)

    def add(self, docs: Iterable[SearchDoc]) -> None:
        """Make ``docs`` searchable: insert the rows the table lacks, prune the rows no
        one here wants once they outnumber the wanted ones."""
        keyed = {doc_key(d): d for d in docs}
        with self._lock, self._conn:
            self._wanted.update((d.name, k) for k, d in keyed.items())
            have = {k for (k,) in self._conn.execute(f"SELECT key FROM {TABLE}")}
            missing = [(k, d) for k, d in keyed.items() if k not in have]
            self._conn.executemany(
                f"INSERT INTO {TABLE} (skill, key, name, description, metadata, headings) "
                "VALUES (?, ?, ?, ?, ?, ?)",
                # Hyphens split a name into words for matching ("pdf-tools": pdf, tools).
                [
                    (d.name, k, d.name.replace("-", " "), d.description, d.metadata, d.headings)
                    for k, d in missing
                ],
            )
            self.inserted += len(missing)
            if len(have) + len(missing) > 2 * len(self._wanted) + 100:
                wanted = set(self._wanted.values())
                stale = [(k,) for k in have if k not in wanted]
                self._conn.executemany(f"DELETE FROM {TABLE} WHERE key = ?", stale)

    def __len__(self) -> int:
        return len(self._wanted)

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
            f"SELECT skill, key, description, bm25({TABLE}, 0.0, 0.0, {w}) AS score "
            f"FROM {TABLE} WHERE {TABLE} MATCH ? ORDER BY score, skill"
        )
        hits: list[SearchHit] = []
        with self._lock:
            for name, key, description, _score in self._conn.execute(sql, [match]):
                if self._wanted.get(name) != key or (among is not None and name not in among):
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
