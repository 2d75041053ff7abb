"""``skillog skills`` through the real CLI entry point."""

from __future__ import annotations

import json
import re
import shlex
import zipfile
from collections.abc import Callable
from pathlib import Path

import pytest

from orchestrator.cli import main

WriteSkill = Callable[..., Path]


def test_list_show_enable_disable(
    project: Path, write_skill: WriteSkill, capsys: pytest.CaptureFixture[str]
) -> None:
    write_skill(project / ".claude/skills", "alpha")
    write_skill(
        project / ".agents/skills",
        "needs",
        frontmatter="name: needs\ndescription: d\nmetadata:\n  requires: no-such-cmd-q\n",
    )
    write_skill(project / ".agents/skills", "broken", frontmatter="name: broken\n")
    assert main(["skills", "list"]) == 0
    out = capsys.readouterr().out
    assert "✓ alpha  [project:.claude/skills, user]" in out
    assert "✗ needs" in out and "missing commands: no-such-cmd-q" in out
    assert "rejected:" in out and "(description-required)" in out
    assert main(["skills", "disable", "alpha"]) == 0
    assert main(["skills", "list", "--json"]) == 0
    data = json.loads(capsys.readouterr().out.split("\n", 1)[1])
    alpha = next(e for e in data["entries"] if e["name"] == "alpha")
    assert alpha["status"] == "disabled" and len(alpha["hash"]) == 64
    assert data["catalog_tokens"] is None  # no skill is visible
    assert main(["skills", "enable", "alpha"]) == 0
    capsys.readouterr()
    assert main(["skills", "list", "--json"]) == 0
    tokens = json.loads(capsys.readouterr().out)["catalog_tokens"]
    assert set(tokens) == {"full", "compact", "names", "search"}  # per catalog mode
    assert tokens["names"] <= tokens["full"] and all(n > 0 for n in tokens.values())
    assert main(["skills", "show", "alpha"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("✓ alpha (enabled)") and out.endswith("# Body\n")
    assert main(["skills", "show", "ghost"]) == 2
    assert "no skill named 'ghost'" in capsys.readouterr().err


def test_validate_exit_codes_and_messages(
    project: Path, write_skill: WriteSkill, capsys: pytest.CaptureFixture[str]
) -> None:
    good = write_skill(project, "good")
    bad = write_skill(project, "bad", frontmatter="name: Bad\ndescription: d\nx: 1\n")
    assert main(["skills", "validate", str(good), str(good / "SKILL.md")]) == 0
    valid = capsys.readouterr().out.splitlines()[0]
    assert re.fullmatch(rf"{good}: valid skill good sha256:[0-9a-f]{{64}}", valid), valid
    assert main(["skills", "validate", str(good), str(bad)]) == 1
    lines = capsys.readouterr().out.splitlines()
    assert f"{bad}/SKILL.md: x: 'x' is not a frontmatter field" in "\n".join(lines)
    assert any(line.endswith("(name-lowercase)") for line in lines)
    # Lenient mode loads it: every finding above is cosmetic per the client guide.
    assert main(["skills", "validate", "--lenient", str(bad)]) == 0


def test_validate_lenient_passes_cosmetic(
    project: Path, write_skill: WriteSkill, capsys: pytest.CaptureFixture[str]
) -> None:
    skill = write_skill(
        project, "cosmetic", frontmatter="name: cosmetic\ndescription: d\nextra: 1\n"
    )
    assert main(["skills", "validate", str(skill)]) == 1
    assert main(["skills", "validate", "--lenient", str(skill)]) == 0
    assert "warning:" in capsys.readouterr().out


def test_corpus_through_the_cli(corpus: Path, capsys: pytest.CaptureFixture[str]) -> None:
    paths = sorted(str(p.parent) for p in corpus.rglob("SKILL.md"))
    assert main(["skills", "validate", *paths]) == 1
    out = capsys.readouterr().out
    assert out.count("valid skill") == 25 and "claude-api/SKILL.md: description:" in out


def test_install_materialize_remove(
    project: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    archive = tmp_path / "zipped.zip"
    with zipfile.ZipFile(archive, "w") as z:
        z.writestr("zipped/SKILL.md", "---\nname: zipped\ndescription: from a zip\n---\nZ\n")
    assert main(["skills", "install", str(archive), "--tier", "org"]) == 0
    assert "installed zipped (org)" in capsys.readouterr().out
    assert main(["skills", "list"]) == 0
    assert "✓ zipped  [installed, org]" in capsys.readouterr().out
    assert main(["skills", "materialize", "--to", str(tmp_path / "out")]) == 0
    assert (tmp_path / "out/zipped/SKILL.md").read_text().endswith("Z\n")
    assert main(["skills", "remove", "zipped"]) == 0
    assert main(["skills", "remove", "zipped"]) == 2
    assert "no installed skill" in capsys.readouterr().err
    assert main(["skills", "install", str(tmp_path / "nope")]) == 2


def test_bad_config_and_db_are_clean_errors(
    project: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "config.yaml").write_text("skills:\n  max_depth: deep\n")
    assert main(["skills", "list"]) == 2
    assert "config.yaml" in capsys.readouterr().err
    (tmp_path / "config.yaml").write_text("skills: {}\n")
    (tmp_path / "skillog.db").write_bytes(b"garbage" * 1000)
    assert main(["skills", "list"]) == 2
    assert "skills index" in capsys.readouterr().err


def test_run_with_a_folder_of_skills_and_lenient_config(
    project: Path, tmp_path: Path, write_skill: WriteSkill, capsys: pytest.CaptureFixture[str]
) -> None:
    """`run --skills FOLDER` loads every skill in it, with no false "skipped" warning;
    a skill loaded leniently (config lenient: true) also activates leniently."""
    folder = tmp_path / "my-skills"
    write_skill(folder, "alpha")
    write_skill(folder, "beta", frontmatter="name: beta\ndescription: d\nextra: 1\n")
    (tmp_path / "config.yaml").write_text("skills:\n  lenient: true\n")
    script = tmp_path / "turns.yaml"
    load = "  - tool_calls: [{name: skills.load, arguments: {names: [%s]}}]\n"
    script.write_text("turns:\n" + load % "alpha, beta" + "  - text: done\n")
    assert main(shlex.split(f"run go --model scripted:{script} --skills {folder}")) == 0
    out, err = capsys.readouterr()
    assert err == ""
    assert "✓ alpha activated" in out and "✓ beta activated" in out
    # A single skill directory still works, and a missing one says it does not exist.
    script.write_text("turns:\n" + load % "alpha")
    command = f"run go --model scripted:{script} --skills {folder}/alpha --skills {tmp_path}/nope"
    assert main(shlex.split(command)) == 0
    out, err = capsys.readouterr()
    assert "✓ alpha activated" in out
    assert f"skipped {tmp_path}/nope: {tmp_path}/nope: file: does not exist" in err


def skills(command: str) -> int:
    """``skillog skills ...`` exactly as typed on a shell."""
    return main(["skills", *shlex.split(command)])


def test_enable_disable_a_name_no_source_has_exits_2(
    project: Path, tmp_path: Path, write_skill: WriteSkill, capsys: pytest.CaptureFixture[str]
) -> None:
    write_skill(project / ".agents/skills", "alpha")
    write_skill(project / ".agents/skills", "broken", frontmatter="name: broken\n")
    config = tmp_path / "config.yaml"
    for action in ("disable", "enable"):
        assert skills(f"{action} nosuch") == 2
        err = capsys.readouterr().err
        assert err.startswith("skillog skills: error: no skill named 'nosuch'"), err
        assert skills(f"{action} broken") == 2
        assert "was rejected" in capsys.readouterr().err
    assert not config.exists()  # nothing was written
    # A stale name (its skill deleted) can still be enabled, to clean the config up.
    config.write_text("skills:\n  disabled: [gone]\n")
    assert skills("enable gone") == 0
    assert "gone" not in config.read_text()
    # Enabling a skill a deny pattern hides says so.
    config.write_text("skills:\n  deny: ['al*']\n")
    assert skills("enable alpha") == 0
    assert "alpha is still disabled: matches the deny pattern 'al*'" in capsys.readouterr().err


def test_show_of_a_rejected_skill_says_why(
    project: Path, write_skill: WriteSkill, capsys: pytest.CaptureFixture[str]
) -> None:
    write_skill(project / ".agents/skills", "broken", frontmatter="name: broken\n")
    assert skills("show broken") == 1
    out = capsys.readouterr().out
    assert out.startswith("✗ broken (rejected: 1 problem)\nsource: project:.agents/skills\n")
    assert "the required field 'description' is missing (description-required)" in out


def test_list_and_show_print_lenient_warnings(
    project: Path, tmp_path: Path, write_skill: WriteSkill, capsys: pytest.CaptureFixture[str]
) -> None:
    write_skill(
        project / ".agents/skills", "loose", frontmatter="name: loose\ndescription: d\nx: 1\n"
    )
    (tmp_path / "config.yaml").write_text("skills:\n  lenient: true\n")
    assert skills("list") == 0
    out = capsys.readouterr().out
    assert "✓ loose  [project:.agents/skills, user]" in out
    assert "    warning: " in out and "'x' is not a frontmatter field" in out
    assert "(unknown-field)" in out
    assert skills("show loose") == 0
    assert "\nwarning: " in capsys.readouterr().out


def test_validate_json_is_one_object_per_path(tmp_path, capsys) -> None:  # type: ignore[no-untyped-def]
    import json

    from orchestrator.cli import main

    good = tmp_path / "good"
    good.mkdir()
    (good / "SKILL.md").write_text("---\nname: good\ndescription: Good.\n---\nBody.\n")
    code = main(["skills", "validate", str(good), str(tmp_path / "missing"), "--json"])
    assert code == 1
    rows = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [(r["valid"], r["name"]) for r in rows] == [(True, "good"), (False, None)]
    assert rows[0]["hash"].startswith("sha256:") and "skill-dir-missing" in rows[1]["problems"][0]
    assert set(rows[0]) == {"path", "valid", "name", "hash", "problems", "warnings"}


def test_every_action_that_prints_data_takes_json(
    project: Path, tmp_path: Path, write_skill: WriteSkill, capsys: pytest.CaptureFixture[str]
) -> None:
    write_skill(project / ".agents/skills", "alpha")
    write_skill(project / ".agents/skills", "broken", frontmatter="name: broken\n")

    def data(command: str, code: int = 0) -> object:
        assert skills(f"{command} --json") == code
        out, err = capsys.readouterr()
        assert err == ""
        return json.loads(out)

    shown = data("show alpha")
    assert isinstance(shown, dict) and shown["name"] == "alpha" and shown["body"] == "# Body\n"
    rejected = data("show broken", code=1)
    assert isinstance(rejected, dict) and rejected["rejected"][0]["problems"][0]["rule"] == (
        "description-required"
    )
    assert data("disable alpha") == {"name": "alpha", "enabled": False, "note": None}
    (tmp_path / "config.yaml").write_text("skills:\n  deny: ['al*']\n")
    note = "matches the deny pattern 'al*'"
    assert data("enable alpha") == {"name": "alpha", "enabled": True, "note": note}
    (tmp_path / "config.yaml").write_text("")
    out = tmp_path / "out"
    assert data(f"materialize --to {out} alpha") == {"written": [str(out / "alpha")]}
    installed = data(f"install {project / '.agents/skills/alpha'} --name alpha")
    assert isinstance(installed, dict) and installed["kind"] == "folder"
    assert len(installed["hash"]) == 64 and installed["tier"] == "user"
    assert data("remove alpha") == installed


def test_show_says_which_mcp_tools_allowed_tools_unlock(
    project: Path, write_skill: WriteSkill, capsys: pytest.CaptureFixture[str]
) -> None:
    (project.parent / "config.yaml").write_text("mcp:\n  servers:\n    github: {command: gh-mcp}\n")
    write_skill(
        project / ".claude/skills",
        "triage",
        frontmatter="name: triage\ndescription: d\n"
        "allowed-tools: Read mcp__github__create_issue mcp__docs mcp__github__list_*\n",
    )
    assert main(["skills", "show", "triage"]) == 0
    out = capsys.readouterr().out
    assert "MCP tools its allowed-tools unlock:\n" in out
    assert "  mcp__github__create_issue: the tool create_issue of MCP server github\n" in out
    assert "  mcp__docs: every tool of MCP server docs (not a configured server)\n" in out
    assert "mcp__github__list_*: the tools of MCP server github starting with 'list_'" in out


def test_search_ranks_and_list_counts_tokens_per_mode(
    project: Path, write_skill: WriteSkill, capsys: pytest.CaptureFixture[str]
) -> None:
    write_skill(
        project / ".claude/skills",
        "pdf-forms",
        frontmatter="name: pdf-forms\ndescription: Fill in PDF forms.\n",
    )
    write_skill(
        project / ".claude/skills",
        "charts",
        frontmatter="name: charts\ndescription: Draw charts.\nmetadata:\n  tags: plots\n",
    )
    assert main(["skills", "search", "fill", "a", "pdf", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["query"] == "fill a pdf" and [r["name"] for r in data["results"]] == ["pdf-forms"]
    assert main(["skills", "search", "plots"]) == 0
    assert capsys.readouterr().out.startswith("1. charts\n    Draw charts.")
    assert main(["skills", "search", "nothing-like-it"]) == 0
    assert capsys.readouterr().out == "no matching skills\n"
    assert main(["skills", "search", "x", "--limit", "0"]) == 2
    assert "--limit must be 1 to 100" in capsys.readouterr().err
    assert main(["skills", "list"]) == 0
    line = capsys.readouterr().out.splitlines()[-1]
    counts = dict(re.findall(r"(full|compact|names|search) (\d+)", line))
    assert line.startswith("catalog tokens by catalog_mode (2 visible skills)")
    assert int(counts["full"]) > int(counts["names"]) >= int(counts["search"]) > 0


def test_show_prints_license_compatibility_allowed_tools_and_requires(
    project: Path, write_skill: WriteSkill, capsys: pytest.CaptureFixture[str]
) -> None:
    write_skill(
        project / ".claude/skills",
        "full",
        frontmatter="name: full\ndescription: d\nlicense: MIT\ncompatibility: Linux only\n"
        "allowed-tools: Read Bash(python3:*)\nmetadata:\n  requires: sh\n",
    )
    assert main(["skills", "show", "full"]) == 0
    out = capsys.readouterr().out
    for line in (
        "license: MIT",
        "compatibility: Linux only",
        "allowed-tools: Read Bash(python3:*)",
        "requires: sh",
    ):
        assert f"\n{line}\n" in out
