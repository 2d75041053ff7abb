"""The path gate: every escape attempt is refused with a clear error, never followed."""

from __future__ import annotations

import os
import socket
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from eventlog import SkillogError
from orchestrator.scripts import _paths
from orchestrator.scripts._paths import (
    MAX_PATH_BYTES,
    PathRefusedError,
    check_relative_path,
    read_skill_file,
    resolve_in_root,
)


@pytest.fixture
def skill(tmp_path: Path) -> Path:
    """A skill directory next to (not containing) an outside directory with a secret."""
    root = tmp_path / "skill"
    (root / "references").mkdir(parents=True)
    (root / "scripts").mkdir()
    (root / "references" / "guide.md").write_text("# guide\n")
    (root / "SKILL.md").write_text("---\nname: skill\n---\n")
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret.txt").write_text("TOP SECRET")
    return root


REFUSED = [
    ("../x", "parent"),
    ("..", "parent"),
    ("scripts/../../x", "parent"),
    ("references/../SKILL.md", "parent"),
    ("/etc/passwd", "absolute"),
    ("", "empty"),
    ("a\x00b", "nul"),
    ("references\\guide.md", "backslash"),
    ("..\\..\\x", "backslash"),
    ("C:/x", "drive"),
    ("c:x", "drive"),
    ("~/x", "home"),
    ("~root/.ssh/id_rsa", "home"),
    ("a" * (MAX_PATH_BYTES + 1), "too_long"),
    ("é" * (MAX_PATH_BYTES // 2 + 1), "too_long"),  # short in characters, long in bytes
    ("a" * 10_000_000, "too_long"),
    ("references/" + "b" * 256, "too_long"),
    ("\uff0e\uff0e/x", "unicode"),  # full-width dots
    ("references\uff0fguide.md", "unicode"),  # full-width solidus
    ("\uff52eferences/guide.md", "unicode"),  # full-width r
    ("a\u00a0b.md", "unicode"),  # no-break space
    ("\ufb01le.md", "unicode"),  # fi ligature
    ("cafe\u0301.md", "unicode"),  # decomposed é
    ("\u2024\u2024/x", "unicode"),  # one-dot leaders
    ("a\u200bb.md", "control"),  # zero-width space
    ("a\u202ed.md", "control"),  # right-to-left override
    ("a\nb", "control"),
    ("a\x7f", "control"),
    ("a\u2028b", "control"),
    ("\ud800.md", "encoding"),  # lone surrogate (undecodable bytes via surrogateescape)
    ("a//b", "empty_segment"),
    ("references/", "empty_segment"),
    ("./SKILL.md", "dot_segment"),
    ("references/./guide.md", "dot_segment"),
    (None, "type"),
    (5, "type"),
    (b"references/guide.md", "type"),
    (["references", "guide.md"], "type"),
    (["a"] * 100_000, "type"),
]


@pytest.mark.parametrize(("rel", "rule"), REFUSED)
def test_precheck_refuses(rel: object, rule: str) -> None:
    with pytest.raises(PathRefusedError) as info:
        check_relative_path(rel)
    assert info.value.rule == rule
    assert isinstance(info.value, SkillogError)
    message = str(info.value)
    assert "references/guide.md" in message  # says what to do
    assert len(message) < 400  # a hostile megabyte path is not echoed back
    assert "\x00" not in message and "\n" not in message


@pytest.mark.parametrize(
    ("rel", "segments"),
    [
        ("references/guide.md", ("references", "guide.md")),
        ("SKILL.md", ("SKILL.md",)),
        (".", ()),
        ("café.md", ("café.md",)),  # composed é is NFKC-stable
        ("日本語/ファイル.md", ("日本語", "ファイル.md")),
        ("a b/c'd\"e.md", ("a b", "c'd\"e.md")),
        ("backup~", ("backup~",)),
        ("..hidden/...", ("..hidden", "...")),
        (".github/x", (".github", "x")),
    ],
)
def test_precheck_accepts(rel: str, segments: tuple[str, ...]) -> None:
    assert check_relative_path(rel) == segments


@given(st.text(max_size=60))
def test_precheck_never_crashes_and_accepts_only_contained_paths(rel: str) -> None:
    try:
        segments = check_relative_path(rel)
    except PathRefusedError:
        return
    assert "/".join(segments) == (rel if rel != "." else "")
    assert not {"", ".", ".."} & set(segments)
    # Whatever passes cannot leave a root lexically.
    assert os.path.normpath(os.path.join("/root-x", *segments)).startswith("/root-x")


def test_message_names_path_rule_and_remedy() -> None:
    with pytest.raises(PathRefusedError) as info:
        check_relative_path("../../etc/passwd")
    assert str(info.value) == (
        "refused path '../../etc/passwd': has a '..' segment (leaving the skill root); "
        "use a path relative to the skill root such as references/guide.md"
    )


def test_resolves_file_and_dir(skill: Path) -> None:
    assert resolve_in_root(skill, "references/guide.md") == skill / "references" / "guide.md"
    assert resolve_in_root(skill, ".", kind="dir") == skill
    assert resolve_in_root(str(skill), "scripts", kind="dir") == skill / "scripts"


def test_root_is_itself_resolved(skill: Path, tmp_path: Path) -> None:
    (tmp_path / "alias").symlink_to(skill)
    got = resolve_in_root(tmp_path / "alias", "references/guide.md")
    assert got == skill / "references" / "guide.md"


def refused(root: Path, rel: object, kind: _paths.PathKind = "file") -> str:
    with pytest.raises(PathRefusedError) as info:
        resolve_in_root(root, rel, kind=kind)
    return info.value.rule


def test_symlink_to_outside_file_is_refused(skill: Path) -> None:
    (skill / "references" / "leak.md").symlink_to(skill.parent / "outside" / "secret.txt")
    assert refused(skill, "references/leak.md") == "escape"


def test_relative_symlink_climbing_out_is_refused(skill: Path) -> None:
    (skill / "references" / "leak.md").symlink_to("../../outside/secret.txt")
    assert refused(skill, "references/leak.md") == "escape"


def test_symlink_to_missing_outside_target_is_an_escape_not_missing(skill: Path) -> None:
    (skill / "references" / "leak.md").symlink_to("/nonexistent/elsewhere")
    assert refused(skill, "references/leak.md") == "escape"


def test_symlinked_directory_to_outside_is_refused(skill: Path) -> None:
    (skill / "references" / "up").symlink_to(skill.parent / "outside")
    assert refused(skill, "references/up/secret.txt") == "escape"
    assert refused(skill, "references/up", kind="dir") == "escape"


def test_symlink_chain_leaving_the_root_is_refused(skill: Path) -> None:
    (skill / "references" / "c").symlink_to(skill.parent / "outside" / "secret.txt")
    (skill / "references" / "b").symlink_to("c")
    (skill / "references" / "a").symlink_to("b")
    assert refused(skill, "references/a") == "escape"


def test_symlink_chain_inside_the_root_is_followed(skill: Path) -> None:
    (skill / "references" / "b").symlink_to("guide.md")
    (skill / "a").symlink_to("references/b")
    assert resolve_in_root(skill, "a") == skill / "references" / "guide.md"


def test_absolute_symlink_into_the_root_is_followed(skill: Path) -> None:
    (skill / "abs").symlink_to(skill / "references" / "guide.md")
    assert resolve_in_root(skill, "abs") == skill / "references" / "guide.md"


def test_symlink_loop_is_refused(skill: Path) -> None:
    (skill / "loop1").symlink_to("loop2")
    (skill / "loop2").symlink_to("loop1")
    assert refused(skill, "loop1") in {"unresolvable", "escape"}


def test_fifo_is_refused_without_blocking(skill: Path) -> None:
    os.mkfifo(skill / "references" / "pipe")
    assert refused(skill, "references/pipe") == "kind"
    with pytest.raises(PathRefusedError, match="FIFO"):
        read_skill_file(skill, "references/pipe", max_bytes=10)


def test_socket_is_refused(skill: Path) -> None:
    with socket.socket(socket.AF_UNIX) as sock:
        sock.bind(str(skill / "sock"))
        with pytest.raises(PathRefusedError, match="socket"):
            resolve_in_root(skill, "sock")


def test_device_through_symlink_is_refused(skill: Path) -> None:
    (skill / "null").symlink_to("/dev/null")
    assert refused(skill, "null") == "escape"


def test_kind_mismatch_is_refused(skill: Path) -> None:
    with pytest.raises(PathRefusedError, match="is a directory, expected a regular file"):
        resolve_in_root(skill, "references")
    with pytest.raises(PathRefusedError, match="is a regular file, expected a directory"):
        resolve_in_root(skill, "SKILL.md", kind="dir")
    assert refused(skill, ".") == "kind"


def test_missing_path_and_missing_root(skill: Path, tmp_path: Path) -> None:
    assert refused(skill, "references/nope.md") == "missing"
    assert refused(skill, "nope/deeper.md") == "missing"
    assert refused(tmp_path / "no-such-skill", "SKILL.md") == "root"


def test_file_used_as_directory_is_refused(skill: Path) -> None:
    assert refused(skill, "SKILL.md/x") in {"unresolvable", "missing"}


def test_read_returns_bytes(skill: Path) -> None:
    assert read_skill_file(skill, "references/guide.md", max_bytes=100) == b"# guide\n"
    (skill / "references" / "b").symlink_to("guide.md")
    assert read_skill_file(skill, "references/b", max_bytes=8) == b"# guide\n"


def test_read_refuses_over_the_limit(skill: Path) -> None:
    (skill / "big.bin").write_bytes(b"x" * 1001)
    assert read_skill_file(skill, "big.bin", max_bytes=1001) == b"x" * 1001
    with pytest.raises(PathRefusedError, match="larger than the limit of 1000 bytes") as info:
        read_skill_file(skill, "big.bin", max_bytes=1000)
    assert info.value.rule == "too_large"


def test_read_refuses_hostile_paths_too(skill: Path) -> None:
    (skill / "leak").symlink_to(skill.parent / "outside" / "secret.txt")
    for rel in ("../outside/secret.txt", "leak", "/etc/passwd", "a\x00"):
        with pytest.raises(PathRefusedError):
            read_skill_file(skill, rel, max_bytes=100)


def test_read_rejects_bad_limit(skill: Path) -> None:
    with pytest.raises(ValueError, match="max_bytes"):
        read_skill_file(skill, "SKILL.md", max_bytes=-1)


def _swap_after_check(monkeypatch: pytest.MonkeyPatch, swap: object) -> None:
    """Make the check pass on the honest tree, then change the tree before the open."""
    real = _paths.resolve_in_root

    def checked_then_swapped(root: Path, rel: object, *, kind: _paths.PathKind = "file") -> Path:
        result = real(root, rel, kind=kind)
        assert callable(swap)
        swap()
        return result

    monkeypatch.setattr(_paths, "resolve_in_root", checked_then_swapped)


def test_read_is_safe_against_file_swapped_for_symlink(
    skill: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    target = skill / "references" / "guide.md"

    def swap() -> None:
        target.unlink()
        target.symlink_to(skill.parent / "outside" / "secret.txt")

    _swap_after_check(monkeypatch, swap)
    with pytest.raises(PathRefusedError) as info:
        read_skill_file(skill, "references/guide.md", max_bytes=100)
    assert info.value.rule == "changed"


def test_read_is_safe_against_directory_swapped_for_symlink(
    skill: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    outside = skill.parent / "outside"
    (outside / "guide.md").write_text("TOP SECRET")

    def swap() -> None:
        (skill / "references").rename(skill / "moved")
        (skill / "references").symlink_to(outside)

    _swap_after_check(monkeypatch, swap)
    with pytest.raises(PathRefusedError) as info:
        read_skill_file(skill, "references/guide.md", max_bytes=100)
    assert info.value.rule == "changed"


def test_read_is_safe_against_file_swapped_for_fifo(
    skill: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    target = skill / "references" / "guide.md"

    def swap() -> None:
        target.unlink()
        os.mkfifo(target)

    _swap_after_check(monkeypatch, swap)
    with pytest.raises(PathRefusedError, match="FIFO"):  # and it did not block on open
        read_skill_file(skill, "references/guide.md", max_bytes=100)
