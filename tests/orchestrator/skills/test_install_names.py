"""Seed 003 CLI2/E3 and seed 004 EV1: ``install --name`` installs under another name, a
name conflict is renamed, skipped or replaced (asked on a terminal, by flag otherwise),
and every install, update and remove is a ``skills.installed`` event in the log."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest
import trio

from eventlog import open_sqlite_store
from orchestrator import CODEC, INSTALL_STREAM, SkillsInstalled, verdict
from orchestrator.cli import main
from orchestrator.skills import (
    ConfigError,
    InstallError,
    NameConflictError,
    SkillsConfig,
    Tier,
    load_config,
    load_skill,
)
from orchestrator.skills._install import install

WriteSkill = Callable[..., Path]


def installed(tmp_path: Path) -> dict[str, str]:
    config = load_config(str(tmp_path / "config.yaml"))
    return {r.name: r.hash for r in config.installed}


def events(db: Path) -> list[SkillsInstalled]:
    async def read() -> list[SkillsInstalled]:
        async with open_sqlite_store(db, readonly=True) as store:
            assert (await verdict(store)).ok
            out = [CODEC.decode(e) async for e in store.read(INSTALL_STREAM)]
        assert all(isinstance(e, SkillsInstalled) for e in out)
        return out  # type: ignore[return-value]

    return trio.run(read)


def test_name_renames_and_conflicts_rename_skip_or_replace(
    project: Path, tmp_path: Path, write_skill: WriteSkill, capsys: pytest.CaptureFixture[str]
) -> None:
    src = write_skill(tmp_path / "src", "tables", body="# v1\n")
    assert main(["skills", "install", str(src), "--name", "my-tables"]) == 0
    assert "installed my-tables (user)" in capsys.readouterr().out
    copy = next((tmp_path / "data").rglob("my-tables/SKILL.md"))
    assert (
        "name: my-tables" in copy.read_text() and "name: tables" in (src / "SKILL.md").read_text()
    )
    assert load_skill(copy.parent, tier=Tier.USER, source="t").name == "my-tables"

    assert main(["skills", "install", str(src)]) == 0  # as itself: no conflict
    # Again: a conflict, and no terminal to ask: the error names both ways out.
    assert main(["skills", "install", str(src)]) == 2
    err = capsys.readouterr().err
    assert "already installed" in err and "--on-conflict rename" in err and "--name tables-2" in err
    assert main(["skills", "install", str(src), "--on-conflict", "skip"]) == 0
    assert "skipped: tables is already installed" in capsys.readouterr().out
    assert main(["skills", "install", str(src), "--on-conflict", "rename", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["name"] == "tables-2"
    old = installed(tmp_path)["tables"]
    (src / "SKILL.md").write_text((src / "SKILL.md").read_text().replace("# v1", "# v2"))
    assert main(["skills", "install", str(src), "--on-conflict", "replace"]) == 0
    assert installed(tmp_path)["tables"] != old
    assert sorted(installed(tmp_path)) == ["my-tables", "tables", "tables-2"]
    assert main(["skills", "update", "my-tables"]) == 0  # re-renamed from its origin
    assert main(["skills", "remove", "tables-2"]) == 0

    got = [(e.action, e.name, e.previous_hash is not None) for e in events(tmp_path / "skillog.db")]
    assert got == [
        ("install", "my-tables", False),
        ("install", "tables", False),
        ("install", "tables-2", False),
        ("install", "tables", True),
        ("update", "my-tables", True),
        ("remove", "tables-2", False),
    ]
    # The install stream is not a session: no reader lists it as one.
    assert main(["sessions", "--db", str(tmp_path / "skillog.db")]) in (0, 1)
    assert "skills-installed" not in capsys.readouterr().out


def test_on_a_terminal_the_conflict_is_asked(
    project: Path,
    tmp_path: Path,
    write_skill: WriteSkill,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    src = write_skill(tmp_path / "src", "tables")
    assert main(["skills", "install", str(src)]) == 0
    monkeypatch.setattr("sys.stdin.isatty", lambda: True)
    answers = iter(["r"])
    monkeypatch.setattr("builtins.input", lambda prompt: next(answers))
    assert main(["skills", "install", str(src)]) == 0
    assert "installed tables-2" in capsys.readouterr().out
    answers = iter(["s"])
    assert main(["skills", "install", str(src)]) == 0
    assert "skipped" in capsys.readouterr().out
    answers = iter(["c"])
    assert main(["skills", "install", str(src)]) == 2
    assert sorted(installed(tmp_path)) == ["tables", "tables-2"]


def test_a_bad_new_name_or_a_failed_replace_leaves_everything_as_it_was(
    tmp_path: Path, write_skill: WriteSkill
) -> None:
    config = SkillsConfig(install_dir=str(tmp_path / "installed"))
    cfg = str(tmp_path / "config.yaml")
    src = write_skill(tmp_path / "src", "tables")
    with pytest.raises(InstallError, match="must be lowercase"):
        install(str(src), config=config, config_file=cfg, name="Bad-Name")
    assert not (tmp_path / "installed" / "Bad-Name").exists()
    first = install(str(src), config=config, config_file=cfg)
    config = load_config(cfg)
    with pytest.raises(NameConflictError) as caught:
        install(str(src), config=config, config_file=cfg)
    assert caught.value.suggestion == "tables-2"
    before = sorted(p.name for p in (tmp_path / "installed").iterdir())
    # The replacing install fails when it saves the configuration (a directory here).
    with pytest.raises(ConfigError):
        install(str(src), config=config, config_file=str(tmp_path), on_conflict="replace")
    assert sorted(p.name for p in (tmp_path / "installed").iterdir()) == before
    assert load_config(cfg).installed == (first,)
