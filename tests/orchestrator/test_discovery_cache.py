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
