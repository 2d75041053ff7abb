"""Discovery, precedence and shadowing, filters, requires, and the catalog API."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

import msgspec
import pytest

from orchestrator.skills import (
    CatalogRecord,
    CommandChecker,
    DuplicateSkillError,
    InlineSkill,
    SkillChangedError,
    SkillNotFoundError,
    SkillsConfig,
    SkillSource,
    Status,
    Tier,
    build_catalog,
    build_catalog_async,
    default_sources,
    find_skill_dirs,
)

WriteSkill = Callable[..., Path]


def sources_for(tmp_path: Path, **config: object) -> tuple[list[SkillSource], SkillsConfig]:
    cfg = SkillsConfig(install_dir=str(tmp_path / "installed"), **config)  # type: ignore[arg-type]
    return default_sources(
        cfg, project=str(tmp_path / "proj"), home=str(tmp_path / "home"), env={}
    ), cfg


def test_conventional_locations_and_precedence(tmp_path: Path, write_skill: WriteSkill) -> None:
    home, proj = tmp_path / "home", tmp_path / "proj"
    write_skill(home / ".claude/skills", "shared", description="user claude")
    write_skill(home / ".agents/skills", "shared", description="user agents")
    write_skill(proj / ".claude/skills", "shared", description="project claude")
    write_skill(proj / ".agents/skills", "only-project")
    write_skill(home / ".claude/skills", "only-user")
    sources, cfg = sources_for(tmp_path)
    assert [s.label for s in sources] == [
        "project:.agents/skills",
        "project:.claude/skills",
        "user:~/.agents/skills",
        "user:~/.claude/skills",
        "installed",
    ]
    cat = build_catalog(sources, config=cfg)
    assert [e.name for e in cat.visible()] == ["only-project", "only-user", "shared"]
    shared = cat.entry("shared")
    assert (shared.description, shared.source, shared.id) == (
        "project claude",
        "project:.claude/skills",
        "project:.claude/skills/shared",
    )
    # Shadowed skills are reported, never silently dropped, and say who won.
    assert [(s.source, s.by) for s in cat.shadowed] == [
        ("user:~/.agents/skills", "project:.claude/skills/shared"),
        ("user:~/.claude/skills", "project:.claude/skills/shared"),
    ]
    assert cat.get("shared").body == "# Body\n"
    assert all("/" not in s.label.split(":", 1)[0] for s in sources)


def test_nested_layouts_hidden_categories_and_skipped_dirs(
    tmp_path: Path, write_skill: WriteSkill
) -> None:
    root = tmp_path / "src"
    write_skill(root / "plugins/p1/skills", "alpha")
    write_skill(root / "skills/.curated", "beta")
    write_skill(root / "node_modules/x", "hidden-in-modules")
    write_skill(root / ".git/x", "hidden-in-git")
    write_skill(root / "alpha-outer", "inner", files={"examples/nested/SKILL.md": "not a skill"})
    dirs, notes = find_skill_dirs(str(root), max_depth=6, max_dirs=100)
    assert [os.path.relpath(d, root) for d in dirs] == [
        "alpha-outer/inner",
        "plugins/p1/skills/alpha",
        "skills/.curated/beta",
    ]
    assert notes == []


def test_discovery_bounds_are_reported(tmp_path: Path, write_skill: WriteSkill) -> None:
    root = tmp_path / "src"
    write_skill(root / "a/b/c/d/e/f/g", "deep")
    for i in range(30):
        (root / f"wide{i:02}").mkdir(parents=True)
    dirs, notes = find_skill_dirs(str(root), max_depth=3, max_dirs=1000)
    assert dirs == [] and "max_depth" in notes[0]
    dirs, notes = find_skill_dirs(str(root), max_depth=10, max_dirs=10)
    assert dirs == [] and "max_dirs" in notes[0]


def test_symlink_loops_terminate(tmp_path: Path, write_skill: WriteSkill) -> None:
    root = tmp_path / "src"
    write_skill(root, "real")
    (root / "loop").symlink_to(root)
    (root / "linked").symlink_to(root / "real")  # symlinked skill dirs are common
    dirs, _ = find_skill_dirs(str(root), max_depth=6, max_dirs=100)
    # The same directory reached twice (loop, link) is searched once.
    assert len(dirs) == 1


def test_symlinked_folders_leaving_the_source_are_not_followed_unless_configured(
    tmp_path: Path, write_skill: WriteSkill
) -> None:
    outside = tmp_path / "elsewhere"
    write_skill(outside, "stray")
    write_skill(outside / "more", "deeper")
    root = tmp_path / "src"
    write_skill(root, "real")
    (root / "stray").symlink_to(outside / "stray")  # a skill folder outside the source
    (root / "category").symlink_to(outside / "more")  # a folder of skills outside it
    source = SkillSource(path=str(root), tier=Tier.USER, label="src")
    cat = build_catalog([source])
    assert [e.name for e in cat.entries] == ["real"]
    assert sorted(n.split(":")[1].strip() for n in cat.record.notes) == ["category", "stray"]
    assert "skills.follow_external_symlinks: true" in cat.record.notes[0]
    cat = build_catalog([source], config=SkillsConfig(follow_external_symlinks=True))
    assert [e.name for e in cat.entries] == ["deeper", "real", "stray"]
    assert cat.record.notes == ()


def test_rejected_are_reported_with_problems(tmp_path: Path, write_skill: WriteSkill) -> None:
    write_skill(tmp_path / "proj/.agents/skills", "bad-one", frontmatter="name: other\n")
    sources, cfg = sources_for(tmp_path)
    cat = build_catalog(sources, config=cfg)
    assert cat.entries == ()
    [rej] = cat.rejected
    assert rej.source == "project:.agents/skills"
    assert {p.rule for p in rej.problems} == {"name-matches-dir", "description-required"}
    lenient = build_catalog(sources, config=msgspec.structs.replace(cfg, lenient=True))
    assert lenient.rejected[0].problems[0].rule == "description-required"


def test_filters_enable_disable_and_requires(tmp_path: Path, write_skill: WriteSkill) -> None:
    base = tmp_path / "proj/.agents/skills"
    for name in ("pdf-tools", "pdf-old", "code-review", "gh"):
        write_skill(base, name)
    write_skill(
        base,
        "needs-tools",
        frontmatter=(
            "name: needs-tools\ndescription: d\nmetadata:\n  requires: sh no-such-cmd-xyz\n"
        ),
    )
    write_skill(
        base,
        "bad-requires",
        frontmatter="name: bad-requires\ndescription: d\nmetadata:\n  requires: ../x\n",
    )
    sources, cfg = sources_for(
        tmp_path, allow=("pdf-*", "needs-*", "bad-*", "gh"), deny=("*-old",), disabled=("gh",)
    )
    cat = build_catalog(sources, config=cfg, checker=CommandChecker(timeout_s=5))
    status = {e.name: (e.status, e.reason) for e in cat.entries}
    assert status["pdf-tools"] == (Status.ENABLED, None)
    assert (
        status["pdf-old"][0] is Status.DISABLED and "deny pattern '*-old'" in status["pdf-old"][1]
    )
    assert (
        status["code-review"][0] is Status.DISABLED and "allow patterns" in status["code-review"][1]
    )
    assert status["gh"][0] is Status.DISABLED and "enable" in status["gh"][1]
    assert status["needs-tools"] == (Status.UNAVAILABLE, "missing commands: no-such-cmd-xyz")
    assert "bare command names" in status["bad-requires"][1]
    assert [e.name for e in cat.visible()] == ["pdf-tools"]
    with pytest.raises(SkillNotFoundError, match="missing commands"):
        cat.get("needs-tools")
    with pytest.raises(SkillNotFoundError, match="no skill named"):
        cat.get("nope")


def test_inline_refs_and_duplicates(tmp_path: Path, write_skill: WriteSkill) -> None:
    write_skill(tmp_path / "proj/.agents/skills", "review")
    ref = write_skill(tmp_path / "elsewhere", "reffed")
    sources, cfg = sources_for(tmp_path)
    tool = object()
    inline = InlineSkill(name="review", description="inline wins", body="B", tools=(tool,))
    cat = build_catalog(sources, config=cfg, inline=[inline], refs=[str(ref)])
    assert cat.entry("review").source == "inline" and cat.get("review").body == "B"
    assert cat.inline("review") is inline and cat.shadowed[0].by == "inline/review"
    assert cat.entry("reffed").source == "ref"
    with pytest.raises(DuplicateSkillError, match="inline skill 'review'"):
        build_catalog([], inline=[inline, InlineSkill(name="review", description="x", body="")])
    dup_ref = write_skill(tmp_path / "third", "review")
    with pytest.raises(DuplicateSkillError, match=str(dup_ref)):
        build_catalog([], inline=[inline], refs=[str(dup_ref)])


def test_get_refuses_a_skill_changed_since_build(tmp_path: Path, write_skill: WriteSkill) -> None:
    root = write_skill(tmp_path / "proj/.agents/skills", "moving")
    sources, cfg = sources_for(tmp_path)
    cat = build_catalog(sources, config=cfg)
    (root / "SKILL.md").write_text("---\nname: moving\ndescription: new\n---\n")
    with pytest.raises(SkillChangedError, match="rebuild the catalog"):
        cat.get("moving")


async def test_record_is_loggable_and_deterministic(
    tmp_path: Path, write_skill: WriteSkill
) -> None:
    for n in ("b-skill", "a-skill"):
        write_skill(tmp_path / "proj/.agents/skills", n)
    write_skill(tmp_path / "proj/.agents/skills", "bad", frontmatter="name: bad\n")
    sources, cfg = sources_for(tmp_path)
    one = await build_catalog_async(sources, config=cfg)
    two = build_catalog(sources, config=cfg)
    data = msgspec.json.encode(one.record)
    assert data == msgspec.json.encode(two.record) and b"." not in data.split(b'"hash"')[0][:0]
    assert msgspec.json.decode(data, type=CatalogRecord) == one.record
    assert [e.name for e in one.visible()] == ["a-skill", "b-skill"]


def test_builtin_and_org_sources_and_tiers(tmp_path: Path, write_skill: WriteSkill) -> None:
    write_skill(tmp_path / "builtin", "same", description="builtin")
    write_skill(tmp_path / "org", "same", description="org")
    write_skill(tmp_path / "org", "org-only")
    cfg = SkillsConfig(
        dirs=({"path": str(tmp_path / "org"), "tier": "org"},), install_dir=str(tmp_path / "i")
    )  # type: ignore[arg-type]
    cfg = msgspec.convert(msgspec.to_builtins(cfg), SkillsConfig)
    sources = default_sources(
        cfg, project=None, home=str(tmp_path / "h"), builtin=[str(tmp_path / "builtin")], env={}
    )
    cat = build_catalog(sources, config=cfg)
    assert cat.entry("same").tier is Tier.BUILTIN and cat.entry("org-only").tier is Tier.ORG


def test_plugin_precedence_lets_installed_and_project_skills_win(
    tmp_path: Path, write_skill: WriteSkill
) -> None:
    """Seed 003 PRI (plugin > project > user > bundled) as an option; the trust order
    stays the default. Tiers do not move with precedence: the winner keeps its own."""
    for where, desc in (
        (tmp_path / "builtin", "builtin"),
        (tmp_path / "org", "org"),
        (tmp_path / "home/.agents/skills", "user"),
        (tmp_path / "proj/.agents/skills", "project"),
        (tmp_path / "i", "installed"),
    ):
        write_skill(where, "same", description=desc)
    write_skill(tmp_path / "builtin", "bundled-only")
    org = ({"path": str(tmp_path / "org"), "tier": "org"},)

    def catalog(precedence: str):  # type: ignore[no-untyped-def]
        cfg = msgspec.convert(
            {"dirs": org, "install_dir": str(tmp_path / "i"), "precedence": precedence},
            SkillsConfig,
        )
        sources = default_sources(
            cfg,
            project=str(tmp_path / "proj"),
            home=str(tmp_path / "home"),
            builtin=[str(tmp_path / "builtin")],
            env={},
        )
        return [s.scope for s in sources], build_catalog(sources, config=cfg)

    scopes, trust = catalog("trust")
    assert scopes[0] == "builtin" and scopes[-1] == "installed"
    assert trust.entry("same").description == "builtin"
    scopes, plugin = catalog("plugin")
    assert scopes[0] == "installed" and scopes[-2:] == ["org", "builtin"]
    same = plugin.entry("same")
    assert same.description == "installed" and same.tier is Tier.THIRD_PARTY
    assert {s.source for s in plugin.shadowed if s.name == "same"} >= {"builtin:0"}
    assert plugin.entry("bundled-only").tier is Tier.BUILTIN
    with pytest.raises(msgspec.ValidationError):
        msgspec.convert({"precedence": "newest"}, SkillsConfig)


def test_a_broken_skill_md_is_rejected_with_its_one_reason(
    tmp_path: Path, write_skill: WriteSkill
) -> None:
    """A FIFO or a bad symlink named SKILL.md makes a rejected skill, never a folder that
    is silently searched further (and never a hang on the FIFO)."""
    base = tmp_path / "proj/.agents/skills"
    for name, make in (
        ("fifo", lambda p: os.mkfifo(p)),
        ("escape", lambda p: p.symlink_to("/etc/hostname")),
        ("dangling", lambda p: p.symlink_to("nowhere")),
    ):
        (base / name).mkdir(parents=True)
        make(base / name / "SKILL.md")
        write_skill(base / name, "nested")  # would be found if the folder were searched
    sources, cfg = sources_for(tmp_path)
    cat = build_catalog(sources, config=cfg)
    assert cat.entries == ()
    assert {os.path.basename(r.path): [p.rule for p in r.problems] for r in cat.rejected} == {
        "fifo": ["tree-special-file"],
        "escape": ["symlink-escape"],
        "dangling": ["symlink-dangling"],
    }
