"""Indexing runs recorded in the log, through the library and the CLI."""

from __future__ import annotations

from pathlib import Path

import pytest
import trio

from eventlog import MemoryStore, open_sqlite_store
from orchestrator._events import CODEC, CatalogIndexed
from orchestrator._index_log import INDEX_STREAM, record_index_run
from orchestrator._verdict import verdict
from orchestrator.cli import main
from orchestrator.skills import SkillSource, Tier, build_catalog


def write(root: Path, name: str, description: str = "Does things.") -> None:
    (root / name).mkdir(parents=True)
    (root / name / "SKILL.md").write_text(
        f"---\nname: {name}\ndescription: {description}\n---\nx\n"
    )


async def test_runs_chain_in_their_own_stream(tmp_path: Path) -> None:
    write(tmp_path, "good")
    write(tmp_path, "Bad_Name")
    catalog = build_catalog([SkillSource(path=str(tmp_path), tier=Tier.USER, label="t")])
    store = MemoryStore()
    first = await record_index_run(store, catalog, clock=lambda: 1)
    again = await record_index_run(store, catalog, clock=lambda: 2)
    assert again == first  # the same result is not recorded twice
    write(tmp_path, "other")
    changed = build_catalog([SkillSource(path=str(tmp_path), tier=Tier.USER, label="t")])
    second = await record_index_run(store, changed, clock=lambda: 3)
    assert (first.stream, first.seq, second.seq) == (INDEX_STREAM, 0, 1)
    body = CODEC.decode(second)
    assert isinstance(body, CatalogIndexed)
    assert [e.name for e in body.record.entries] == ["good", "other"]
    assert body.record.entries[0].hash == catalog.entries[0].hash
    (rejected,) = body.record.rejected
    assert rejected.path.endswith("Bad_Name") and rejected.problems
    assert (await verdict(store)).ok


def test_cli_list_record(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    project = tmp_path / "project"
    write(project / ".agents" / "skills", "notes")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    db = tmp_path / "s.db"
    args = ["skills", "--config", str(tmp_path / "none.yaml"), "--db", str(db)]
    assert main([*args, "--project", str(project), "list", "--record"]) == 0

    async def check() -> None:
        async with open_sqlite_store(db) as store:
            events = [e async for e in store.read(INDEX_STREAM)]
        (event,) = events
        body = CODEC.decode(event)
        assert isinstance(body, CatalogIndexed) and body.record.entries[0].name == "notes"

    import trio

    trio.run(check)


def test_every_session_that_indexes_records_its_indexing_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """`skillog run` and `skillog resume` index the sources: each records what it found
    when that differs from the last run recorded."""

    project = tmp_path / "project"
    write(project / ".agents" / "skills", "notes")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.setenv("SKILLOG_CONFIG", str(tmp_path / "none.yaml"))
    monkeypatch.chdir(project)
    script = tmp_path / "turns.yaml"
    script.write_text("turns:\n  - text: done\n")
    db = str(tmp_path / "s.db")
    assert main(["run", "hi", "--model", f"scripted:{script}", "--db", db]) == 0

    async def runs() -> tuple[str, int]:
        async with open_sqlite_store(db) as store:
            events = [CODEC.decode(e) async for e in store.read(INDEX_STREAM)]
            sessions = [
                s
                for s in await store.streams()
                if s.stream != INDEX_STREAM and not s.stream.startswith("lease/")
            ]
        assert all(isinstance(b, CatalogIndexed) for b in events)
        assert [e.name for e in events[0].record.entries] == ["notes"]  # type: ignore[attr-defined]
        return min(sessions, key=lambda s: s.first_recorded_at).stream, len(events)

    def resume_a_fork(session: str) -> None:
        # An ended session is not resumed (it says so); a fork of it, before its end, is.
        capsys.readouterr()
        assert main(["replay", session, "--fork-at", "1", "--db", db]) == 0
        fork = capsys.readouterr().out.strip()
        assert main(["resume", fork, "--db", db]) == 0

    session, count = trio.run(runs)
    assert count == 1
    resume_a_fork(session)
    assert trio.run(runs)[1] == 1  # the sources did not change: nothing new to record
    write(project / ".agents" / "skills", "more")
    resume_a_fork(session)
    assert trio.run(runs)[1] == 2


async def test_many_sessions_indexing_at_once_all_start(tmp_path: Path) -> None:
    """A service starts dozens of sessions a second, each recording its indexing run:
    none may fail on the race for the index stream's next seq."""
    write(tmp_path, "good")
    catalogs = [
        build_catalog([SkillSource(path=str(tmp_path), tier=Tier.USER, label=f"t{i % 3}")])
        for i in range(30)
    ]
    store = MemoryStore()
    async with trio.open_nursery() as nursery:
        for catalog in catalogs:
            nursery.start_soon(record_index_run, store, catalog)
    assert 1 <= len([e async for e in store.read(INDEX_STREAM)]) <= 30


async def test_an_unchanged_run_costs_one_head_read_and_another_processs_run_is_seen(
    tmp_path: Path,
) -> None:
    """Every submission to a service records its indexing run: when the index stream's
    head is the run this process last saw (same seq and hash), nothing else is read;
    a run another process recorded in between moves the head, and ours is recorded
    again after it."""
    write(tmp_path, "good")
    catalog = build_catalog([SkillSource(path=str(tmp_path), tier=Tier.USER, label="t")])
    write(tmp_path, "other")
    changed = build_catalog([SkillSource(path=str(tmp_path), tier=Tier.USER, label="t")])
    db = tmp_path / "log.db"
    async with open_sqlite_store(db) as store, open_sqlite_store(db) as other:
        reads: list[str] = []
        read = store.read

        def counted(stream: str, **kw: int):  # type: ignore[no-untyped-def]
            reads.append(stream)
            return read(stream, **kw)

        store.read = counted  # type: ignore[method-assign]
        first = await record_index_run(store, catalog, clock=lambda: 1)
        for t in range(2, 6):
            assert await record_index_run(store, catalog, clock=lambda t=t: t) == first
        assert reads == []  # the head was the run this store appended: nothing read
        theirs = await record_index_run(other, changed, clock=lambda: 6)
        ours = await record_index_run(store, catalog, clock=lambda: 7)
        assert reads == [INDEX_STREAM]  # the head moved: the event there is read once
        assert (first.seq, theirs.seq, ours.seq) == (0, 1, 2)
        assert await record_index_run(store, catalog, clock=lambda: 8) == ours
        assert reads == [INDEX_STREAM]
