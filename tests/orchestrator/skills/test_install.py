"""Install from a folder, a ZIP and a real git repository; rollback; update; remove."""

from __future__ import annotations

import os
import shutil
import subprocess
import zipfile
from collections.abc import Callable
from pathlib import Path

import pytest

from orchestrator.skills import (
    InstallError,
    SkillsConfig,
    SkillValidationError,
    Tier,
    build_catalog,
    default_sources,
    load_config,
    skill_hash,
)
from orchestrator.skills._install import install, remove, update

WriteSkill = Callable[..., Path]


@pytest.fixture
def env(tmp_path: Path) -> tuple[SkillsConfig, str]:
    return SkillsConfig(install_dir=str(tmp_path / "installed")), str(tmp_path / "config.yaml")


def snapshot_dir(path: Path) -> list[str]:
    return sorted(str(p.relative_to(path)) for p in path.rglob("*")) if path.exists() else []


def git(*args: str, cwd: Path) -> str:
    done = subprocess.run(
        [
            "git",
            "-c",
            "user.name=t",
            "-c",
            "user.email=t@t",
            "-c",
            "init.defaultBranch=main",
            *args,
        ],
        cwd=cwd,
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    )
    return done.stdout


def test_install_folder_records_provenance_and_appears_in_catalog(
    tmp_path: Path, write_skill: WriteSkill, env: tuple[SkillsConfig, str]
) -> None:
    config, config_file = env
    src = write_skill(tmp_path / "src", "local-skill", files={"scripts/x.sh": "#!/bin/sh\n"})
    (src / "scripts/x.sh").chmod(0o755)
    record = install(str(src), config=config, config_file=config_file, clock=lambda: 123)
    assert (record.kind, record.tier, record.installed_at, record.origin) == (
        "folder",
        Tier.USER,
        123,
        str(src),
    )
    installed = Path(config.install_dir or "") / "local-skill"
    assert skill_hash(installed) == skill_hash(src) == record.hash
    saved = load_config(config_file)
    assert saved.installed == (record,)
    sources = default_sources(saved, project=None, home=str(tmp_path / "h"), env={})
    entry = build_catalog(sources, config=saved).entry("local-skill")
    assert entry.provenance is not None and entry.provenance.installed_at == 123
    assert entry.tier is Tier.USER and entry.source == "installed"
    with pytest.raises(InstallError, match="already installed"):
        install(str(src), config=saved, config_file=config_file)


def test_install_zip_and_name_mismatch(tmp_path: Path, env: tuple[SkillsConfig, str]) -> None:
    config, config_file = env
    good = tmp_path / "good.zip"
    with zipfile.ZipFile(good, "w") as z:
        z.writestr("zipped/SKILL.md", "---\nname: zipped\ndescription: d\n---\n")
    record = install(str(good), config=config, config_file=config_file)
    assert (record.kind, record.tier) == ("zip", Tier.THIRD_PARTY)
    bad = tmp_path / "bad.zip"
    with zipfile.ZipFile(bad, "w") as z:
        z.writestr("folder/SKILL.md", "---\nname: other\ndescription: d\n---\n")
    before = snapshot_dir(tmp_path / "installed")
    with pytest.raises(SkillValidationError, match="name-matches-dir"):
        install(str(bad), config=load_config(config_file), config_file=config_file)
    assert snapshot_dir(tmp_path / "installed") == before  # rolled back, no staging left
    assert len(load_config(config_file).installed) == 1


@pytest.mark.skipif(shutil.which("git") is None, reason="git not installed")
def test_install_from_git_with_ref_and_update(
    tmp_path: Path, env: tuple[SkillsConfig, str]
) -> None:
    config, config_file = env
    repo = tmp_path / "some-repo"
    repo.mkdir()
    git("init", "-q", cwd=repo)
    (repo / "SKILL.md").write_text("---\nname: git-skill\ndescription: v1\n---\n")
    git("add", ".", cwd=repo)
    git("commit", "-qm", "v1", cwd=repo)
    git("tag", "v1", cwd=repo)
    (repo / "SKILL.md").write_text("---\nname: git-skill\ndescription: v2\n---\n")
    git("commit", "-qam", "v2", cwd=repo)
    url = repo.as_uri()
    record = install(url, config=config, config_file=config_file, ref="v1")
    installed = tmp_path / "installed" / "git-skill"
    assert (record.kind, record.ref, record.origin) == ("git", "v1", url)
    assert "v1" in (installed / "SKILL.md").read_text() and not (installed / ".git").exists()
    # Update follows the recorded ref; a failing update restores the old copy.
    git("tag", "-f", "v1", cwd=repo)
    new = update("git-skill", config=load_config(config_file), config_file=config_file)
    assert "v2" in (installed / "SKILL.md").read_text() and new.hash != record.hash
    (repo / "SKILL.md").write_text("---\nname: git-skill\n---\n")  # invalid: no description
    git("commit", "-qam", "broken", cwd=repo)
    git("tag", "-f", "v1", cwd=repo)
    with pytest.raises(SkillValidationError):
        update("git-skill", config=load_config(config_file), config_file=config_file)
    assert "v2" in (installed / "SKILL.md").read_text()
    assert load_config(config_file).installed[0].hash == new.hash
    removed = remove("git-skill", config=load_config(config_file), config_file=config_file)
    assert removed.name == "git-skill" and not installed.exists()
    assert load_config(config_file).installed == ()


@pytest.mark.skipif(shutil.which("git") is None, reason="git not installed")
def test_git_failures_roll_back(
    tmp_path: Path, env: tuple[SkillsConfig, str], write_skill: WriteSkill
) -> None:
    config, config_file = env
    with pytest.raises(InstallError, match="git clone"):
        install((tmp_path / "missing").as_uri() + ".git", config=config, config_file=config_file)
    with pytest.raises(InstallError, match="'-'"):
        install("-uhttps://x.git", config=config, config_file=config_file)
    with pytest.raises(InstallError, match="git clone"):
        install("ext::sh -c touch% /tmp/pwned.git", config=config, config_file=config_file)
    repo = tmp_path / "multi"
    write_skill(repo / "skills", "one")
    write_skill(repo / "skills", "two")
    git("init", "-q", cwd=repo)
    git("add", ".", cwd=repo)
    git("commit", "-qm", "x", cwd=repo)
    with pytest.raises(InstallError, match="skills found: one, two"):
        install(repo.as_uri(), config=config, config_file=config_file)
    record = install(repo.as_uri(), config=config, config_file=config_file, name="two")
    assert record.name == "two"
    assert sorted(os.listdir(tmp_path / "installed")) == ["two"]
    assert not os.path.exists(config_file) or len(load_config(config_file).installed) == 1


def test_bad_sources(tmp_path: Path, env: tuple[SkillsConfig, str]) -> None:
    config, config_file = env
    with pytest.raises(InstallError, match="not a folder"):
        install(str(tmp_path / "nope"), config=config, config_file=config_file)
    with pytest.raises(InstallError, match="--ref only applies"):
        install(str(tmp_path), config=config, config_file=config_file, ref="main")
    with pytest.raises(InstallError, match="no installed skill"):
        remove("ghost", config=config, config_file=config_file)
