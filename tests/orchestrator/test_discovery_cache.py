"""A long-running process (serve, worker) indexes its skills once and again only when
the configuration or a source's folder changes, not on every submission."""

from __future__ import annotations

import argparse
import os
from pathlib import Path

import pytest

from orchestrator.cli._session import DiscoveryCache


def write(root: Path, name: str) -> None:
    (root / name).mkdir(parents=True)
    (root / name / "SKILL.md").write_text(f"---\nname: {name}\ndescription: d {name}.\n---\nB\n")


def test_indexed_once_then_again_only_after_a_change(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    proj = tmp_path / "proj"
    source = proj / ".agents/skills"
    write(source, "alpha")
    config = tmp_path / "config.yaml"
    config.write_text("skills: {}\n")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.setenv("SKILLOG_CONFIG", str(config))
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "data"))
    args = argparse.Namespace(
        skills=[], tier="user", project=str(proj), db=str(tmp_path / "log.db")
    )
    cache = DiscoveryCache(args)
    first = cache.get()
    assert [s.name for s in first.skills] == ["alpha"]
    for _ in range(20):  # twenty submissions: one index run
        assert cache.get() is first
    assert cache.scans == 1

    write(source, "beta")  # a skill added: its source folder changed
    assert [s.name for s in cache.get().skills] == ["alpha", "beta"]
    assert cache.scans == 2 and cache.get() is cache.get()

    config.write_text("skills: {disabled: [alpha]}\n")  # the configuration changed
    os.utime(config, ns=(1, 1))
    assert [s.name for s in cache.get().skills] == ["beta"]
    assert cache.scans == 3


def test_a_skill_added_deep_in_a_source_is_seen_at_one_stat_per_listed_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``plugins/*/skills/<name>``: the new skill changes ``plugins/<p>/skills``'s mtime,
    not the source's; the check stats every folder the search listed (600 skills in 20
    plugins: 42 folders), never a skill's own."""
    proj = tmp_path / "proj"
    source = proj / ".agents/skills"
    for p in range(20):
        for i in range(30):
            write(source / "plugins" / f"p{p}" / "skills", f"s{p}-{i}")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.setenv("SKILLOG_CONFIG", str(tmp_path / "config.yaml"))
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "data"))
    args = argparse.Namespace(
        skills=[], tier="user", project=str(proj), db=str(tmp_path / "log.db")
    )
    cache = DiscoveryCache(args)
    first = cache.get()
    assert len(first.skills) == 600 and cache.scans == 1
    # source, plugins, p0..p19, p0/skills..p19/skills: every skill's parent, no skill.
    assert len(first.catalog.listed) == 42
    stats: list[str] = []
    real_stat = os.stat

    def counting(path: object, *a: object, **kw: object) -> os.stat_result:
        stats.append(str(path))
        return real_stat(path, *a, **kw)  # type: ignore[arg-type]

    with monkeypatch.context() as m:
        m.setattr(os, "stat", counting)
        assert cache.get() is first  # one session's check: a stat per folder, no scan
    assert len(stats) <= 42 + 8 and cache.scans == 1  # + config, the other sources

    before = os.stat(source / "plugins" / "p7" / "skills").st_mtime_ns
    write(source / "plugins" / "p7" / "skills", "late")
    os.utime(source / "plugins" / "p7" / "skills", ns=(before + 10**9, before + 10**9))
    names = [s.name for s in cache.get().skills]
    assert "late" in names and len(names) == 601 and cache.scans == 2
