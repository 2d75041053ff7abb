"""Helpers shared by the skills tests: write real skill directories to tmp_path."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

CORPUS = Path(__file__).resolve().parents[3].parent / "shared" / "corpus"


def write_skill(
    parent: Path,
    name: str,
    *,
    frontmatter: str | None = None,
    body: str = "# Body\n",
    files: dict[str, str | bytes] | None = None,
    description: str = "Does a test thing. Use in tests.",
) -> Path:
    """Create ``parent/name`` with a SKILL.md (and ``files``); return the directory."""
    root = parent / name
    root.mkdir(parents=True, exist_ok=True)
    if frontmatter is None:
        frontmatter = f"name: {name}\ndescription: {description}\n"
    (root / "SKILL.md").write_text(f"---\n{frontmatter}---\n{body}", encoding="utf-8")
    for rel, content in (files or {}).items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(content, bytes):
            path.write_bytes(content)
        else:
            path.write_text(content, encoding="utf-8")
    return root


def backdate(root: Path, seconds: int = 3600) -> None:
    """Set every file's and directory's mtime in the past, as for a tree at rest."""
    for dirpath, dirnames, names in os.walk(root, topdown=False):
        for n in [*names, *dirnames]:
            p = os.path.join(dirpath, n)
            st = os.stat(p, follow_symlinks=False)
            os.utime(
                p, ns=(st.st_atime_ns, st.st_mtime_ns - seconds * 10**9), follow_symlinks=False
            )


@pytest.fixture(name="write_skill")
def _write_skill_fixture() -> object:
    """The :func:`write_skill` helper (test modules cannot import conftest)."""
    return write_skill


@pytest.fixture(name="backdate")
def _backdate_fixture() -> object:
    """The :func:`backdate` helper."""
    return backdate


@pytest.fixture(name="corpus")
def _corpus() -> Path:
    if not CORPUS.is_dir():
        pytest.skip("shared corpus not present")
    return CORPUS


@pytest.fixture
def project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A project directory as the cwd, with home, config, log and data under tmp_path."""
    proj = tmp_path / "proj"
    proj.mkdir()
    monkeypatch.chdir(proj)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.setenv("SKILLOG_CONFIG", str(tmp_path / "config.yaml"))
    monkeypatch.setenv("SKILLOG_DB", str(tmp_path / "skillog.db"))
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "data"))
    return proj


@pytest.fixture
def data_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """$XDG_DATA_HOME under tmp_path: skills' environments are built there."""
    home = tmp_path / "data"
    monkeypatch.setenv("XDG_DATA_HOME", str(home))
    return home
