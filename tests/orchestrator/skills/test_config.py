"""The skills configuration file: unknown keys, and rewrites that keep the user's text."""

from __future__ import annotations

import shlex
from collections.abc import Callable
from pathlib import Path

import pytest
import yaml
from hypothesis import given
from hypothesis import strategies as st

from orchestrator.cli import main
from orchestrator.skills import ConfigError, SkillsConfig, load_config, save_config
from orchestrator.skills._config_edit import set_skills_keys

WriteSkill = Callable[..., Path]

HAND_WRITTEN = """\
# My skillog configuration.
skills:
  # Org skills first.
  dirs:
    - {path: /srv/org-skills, tier: org}   # mounted read-only
  deny: ["*-deprecated"]
  disabled:
    - gh        # too chatty
    # - pdf     (kept for later)
    - slack
  lenient: false  # strict, as the spec says

# end of file
"""


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("skills:\n  lenent: true\n", "unknown key 'skills.lenent'; did you mean 'lenient'?"),
        ("skill:\n  lenient: true\n", "unknown key 'skill'; did you mean 'skills'?"),
        (
            "skills:\n  dirs:\n    - {path: /x, teir: org}\n",
            "unknown key 'skills.dirs[0].teir'; did you mean 'tier'?",
        ),
        (
            "skills:\n  installed:\n    - {name: a, origin: o, kind: git, hsh: x}\n",
            "unknown key 'skills.installed[0].hsh'; did you mean 'hash'?",
        ),
        ("skills:\n  zzz: 1\n", "unknown key 'skills.zzz'; valid: dirs, allow, deny"),
    ],
)
def test_unknown_keys_name_the_nearest_valid_one(tmp_path: Path, text: str, message: str) -> None:
    path = tmp_path / "config.yaml"
    path.write_text(text)
    with pytest.raises(ConfigError) as info:
        load_config(str(path))
    assert message in str(info.value) and str(path) in str(info.value)


def test_an_unknown_key_through_the_cli_exits_2(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    config = tmp_path / "config.yaml"
    config.write_text("skills:\n  max_dept: 3\n")
    monkeypatch.chdir(tmp_path)
    assert main(shlex.split(f"skills --config {config} --no-index list")) == 2
    err = capsys.readouterr().err
    assert err.startswith("skillog skills: error: ") and "did you mean 'max_depth'?" in err


def test_enable_disable_keep_comments_and_order(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, write_skill: WriteSkill
) -> None:
    for name in ("gh", "slack", "pdf"):
        write_skill(tmp_path / "proj/.agents/skills", name)
    monkeypatch.chdir(tmp_path / "proj")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    config = tmp_path / "config.yaml"
    config.write_text(HAND_WRITTEN)

    def skills(command: str) -> int:
        return main(["skills", "--config", str(config), "--no-index", *shlex.split(command)])

    assert skills("disable pdf") == 0
    assert config.read_text() == HAND_WRITTEN.replace("    - slack\n", "    - slack\n    - pdf\n")
    assert skills("enable gh") == 0
    assert config.read_text() == HAND_WRITTEN.replace("    - gh        # too chatty\n", "").replace(
        "    - slack\n", "    - slack\n    - pdf\n"
    )
    assert skills("enable slack") == 0
    assert skills("enable pdf") == 0
    after = config.read_text()
    assert "  disabled: []\n" in after and "# - pdf     (kept for later)" not in after
    assert after.startswith("# My skillog configuration.\nskills:\n  # Org skills first.\n")
    assert after.endswith("  lenient: false  # strict, as the spec says\n\n# end of file\n")
    assert load_config(str(config)).disabled == ()


def test_install_and_remove_keep_comments(tmp_path: Path, write_skill: WriteSkill) -> None:
    config = tmp_path / "config.yaml"
    config.write_text(f"skills:\n  install_dir: {tmp_path}/installed  # here\n  # the end\n")
    source = write_skill(tmp_path / "src", "tool")
    assert main(["skills", "--config", str(config), "--no-index", "install", str(source)]) == 0
    text = config.read_text()
    assert text.startswith(f"skills:\n  install_dir: {tmp_path}/installed  # here\n  installed:\n")
    assert text.endswith("  # the end\n")
    assert [r.name for r in load_config(str(config)).installed] == ["tool"]
    assert main(["skills", "--config", str(config), "--no-index", "remove", "tool"]) == 0
    assert config.read_text() == (
        f"skills:\n  install_dir: {tmp_path}/installed  # here\n  installed: []\n  # the end\n"
    )


@pytest.mark.parametrize(
    "text",
    [
        "",
        "# only a comment\n",
        "{}  # nothing\n",
        "skills:\n",
        "skills: ~  # none yet\n",
        "skills: {lenient: true}\n",
        "skills:\n  lenient: true",  # no final newline
        "skills:\n  disabled: [a, b]  # flow\n",
        "skills:\n  disabled:\n  - a\n  -\n    b\n  - |\n    c\n",
        "skills:\n  disabled:\n",
    ],
)
def test_every_layout_reads_back_as_written(tmp_path: Path, text: str) -> None:
    path = tmp_path / "config.yaml"
    path.write_text(text)
    for disabled in (("x",), ("b", "x"), ()):
        config = SkillsConfig(disabled=disabled, max_depth=3)
        save_config(str(path), config)
        assert load_config(str(path)) == config
    if "#" in text:
        assert text.split("#", 1)[1].split("\n")[0] in path.read_text()


names = st.lists(st.sampled_from(["a", "b", "c", "d", "e", "f"]), unique=True, max_size=5)


@given(before=names, after=names, flow=st.booleans())
def test_list_edits_keep_every_kept_line(before: list[str], after: list[str], flow: bool) -> None:
    """Whatever the change, the new list is exact; an item kept in the same order
    relative to the others kept keeps its line, comment included."""
    if flow or not before:
        text = f"skills:\n  disabled: [{', '.join(before)}]\n  lenient: true\n"
    else:
        text = "skills:\n  disabled:\n" + "".join(f"    - {n}  # {n}!\n" for n in before)
        text += "  lenient: true\n"
    edited = set_skills_keys(text, {"disabled": after})
    assert yaml.safe_load(edited) == {"skills": {"disabled": after, "lenient": True}}
    if not flow:
        kept = [n for n in before if n in after]
        if kept == [n for n in after if n in before]:
            for n in kept:
                assert f"- {n}  # {n}!\n" in edited


def test_a_layout_the_editor_gets_wrong_still_writes_the_right_data(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("orchestrator.skills._config.set_skills_keys", lambda text, changes: "{")
    path = tmp_path / "config.yaml"
    path.write_text("skills:\n  lenient: true  # kept if it can be\n")
    config = SkillsConfig(lenient=True, disabled=("x",))
    save_config(str(path), config)
    assert load_config(str(path)) == config


def test_the_log_section_names_trusted_keys_and_survives_a_skills_rewrite(tmp_path: Path) -> None:
    from orchestrator.skills._config import load_log_config, trusted_keys_default

    path = tmp_path / "config.yaml"
    path.write_text("# keys\nlog:\n  trusted_keys: keys/auditors\nskills:\n  lenient: true\n")
    save_config(str(path), SkillsConfig(lenient=False, deny=("evil-*",)))
    assert load_config(str(path)).deny == ("evil-*",)
    assert load_log_config(str(path)).trusted_keys == "keys/auditors"
    env = {"SKILLOG_CONFIG": str(path)}
    assert trusted_keys_default(env) == str(tmp_path / "keys" / "auditors")
    assert trusted_keys_default({**env, "SKILLOG_TRUSTED_KEYS": "/k"}) == "/k"
    path.write_text("log:\n  trusted_key: x\n")
    with pytest.raises(ConfigError, match=r"unknown key 'log\.trusted_key'; did you mean"):
        load_log_config(str(path))


def test_an_unchanged_file_is_parsed_once_and_any_edit_is_seen(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A long-running process reads the configuration for every agent it builds: the
    text decides whether to parse again, so an edit is seen on the next read even when
    the file keeps its size and its mtime (a stat key would miss it)."""
    import os

    from orchestrator.skills import _config, load_model_config

    parsed: list[str] = []
    parse = _config._parse
    monkeypatch.setattr(_config, "_parse", lambda p, t: parsed.append(t) or parse(p, t))
    path = tmp_path / "config.yaml"
    path.write_text("model:\n  context_window: 1000\n")
    stat = path.stat()
    assert [load_model_config(str(path)).context_window for _ in range(5)] == [1000] * 5
    assert load_config(str(path)) == SkillsConfig()
    assert len(parsed) == 1
    path.write_text("model:\n  context_window: 2000\n")  # same size
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns))  # and the same mtime
    assert load_model_config(str(path)).context_window == 2000
    assert len(parsed) == 2
    path.write_text("model:\n  context_window: 1000\n")  # back: parsed once already
    assert load_model_config(str(path)).context_window == 1000
    assert len(parsed) == 2
