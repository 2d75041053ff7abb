"""Bounded installs: git clones without hooks or LFS, size limits, full stderr; a
source changing under the copy is a clear error with nothing left half-installed."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from orchestrator.skills import InstallError, SkillsConfig, _install, _materialize, install

needs_git = pytest.mark.skipif(shutil.which("git") is None, reason="git not installed")


@pytest.fixture
def env(tmp_path: Path) -> tuple[SkillsConfig, str]:
    return SkillsConfig(install_dir=str(tmp_path / "installed")), str(tmp_path / "skills.toml")


def git(*args: str, cwd: Path) -> None:
    subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@t", *args], cwd=cwd, check=True)


def make_repo(path: Path, files: dict[str, bytes]) -> str:
    path.mkdir(parents=True)
    (path / "SKILL.md").write_text("---\nname: big\ndescription: d\n---\n")
    for rel, data in files.items():
        (path / rel).parent.mkdir(parents=True, exist_ok=True)
        (path / rel).write_bytes(data)
    git("init", "-q", cwd=path)
    git("add", "-A", cwd=path)
    git("commit", "-qm", "x", cwd=path)
    return path.as_uri()


def installed(config: SkillsConfig) -> list[str]:
    root = Path(config.install_dir or "")
    return sorted(p.name for p in root.iterdir()) if root.exists() else []


@needs_git
def test_a_clone_over_the_size_limit_is_stopped_and_leaves_nothing(
    tmp_path: Path, env: tuple[SkillsConfig, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    config, config_file = env
    url = make_repo(tmp_path / "repo", {"assets/blob.bin": os.urandom(3 << 20)})
    monkeypatch.setattr(_install, "MAX_TOTAL_BYTES", 1 << 20)
    with pytest.raises(InstallError, match="git clone") as info:
        install(url, config=config, config_file=config_file)
    assert "1048576" in str(info.value) or "2097152" in str(info.value)
    assert installed(config) == []


@needs_git
def test_a_failed_clone_reports_all_of_gits_stderr(
    tmp_path: Path, env: tuple[SkillsConfig, str]
) -> None:
    config, config_file = env
    url = make_repo(tmp_path / "repo", {})
    with pytest.raises(InstallError) as info:
        install(url, config=config, config_file=config_file, ref="no-such-branch")
    message = str(info.value)
    assert "no-such-branch" in message and "exit 128" in message
    assert message.count("\n") >= 1  # the whole stderr, not only its last line


@needs_git
def test_hooks_and_lfs_filters_never_run(
    tmp_path: Path, env: tuple[SkillsConfig, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    config, config_file = env
    mark = tmp_path / "ran"
    url = make_repo(
        tmp_path / "repo",
        {".gitattributes": b"*.bin filter=lfs diff=lfs merge=lfs -text\n", "a.bin": b"x"},
    )
    home = tmp_path / "home"
    home.mkdir()
    (home / ".gitconfig").write_text(
        f'[filter "lfs"]\n\tsmudge = touch {mark}\n\trequired = true\n'
        f"[core]\n\thooksPath = {tmp_path / 'hooks'}\n"
    )
    (tmp_path / "hooks").mkdir()
    hook = tmp_path / "hooks" / "post-checkout"
    hook.write_text(f"#!/bin/sh\ntouch {mark}\n")
    hook.chmod(0o755)
    monkeypatch.setenv("HOME", str(home))
    install(url, config=config, config_file=config_file)
    assert not mark.exists()
    assert installed(config) == ["big"]


def test_a_file_vanishing_during_the_copy_is_a_clear_error(
    tmp_path: Path, env: tuple[SkillsConfig, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    config, config_file = env
    source = tmp_path / "big"
    source.mkdir()
    (source / "SKILL.md").write_text("---\nname: big\ndescription: d\n---\n")
    (source / "references").mkdir()
    (source / "references" / "a.md").write_text("a")
    real = _materialize.read_file

    def vanishing(path: str) -> bytes:
        if path.endswith("a.md"):
            os.unlink(path)
        return real(path)

    monkeypatch.setattr(_materialize, "read_file", vanishing)
    with pytest.raises(InstallError, match="try again"):
        install(str(source), config=config, config_file=config_file)
    assert installed(config) == []
