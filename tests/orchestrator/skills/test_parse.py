"""Validation rules: the specification's, the reference validator's cases, hostile bytes."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from orchestrator.skills import (
    ParsedSkillMd,
    SkillValidationError,
    Tier,
    load_skill,
    parse_skill_md,
)

WriteSkill = Callable[..., Path]


def rules(text: str | bytes, *, dir_name: str | None = "my-skill", strict: bool = True) -> set[str]:
    with pytest.raises(SkillValidationError) as info:
        parse_skill_md(text, path="x/SKILL.md", dir_name=dir_name, strict=strict)
    assert all(p.file == "x/SKILL.md" for p in info.value.problems)
    return {p.rule for p in info.value.problems}


def md(front: str, body: str = "Body\n") -> str:
    return f"---\n{front}---\n{body}"


def lenient(front: str, dir_name: str = "my-skill") -> ParsedSkillMd:
    return parse_skill_md(md(front), path="x", dir_name=dir_name, strict=False)


def test_valid_minimal_and_all_fields() -> None:
    parsed = parse_skill_md(
        md(
            "name: my-skill\ndescription: A test skill\nlicense: MIT\n"
            "compatibility: Requires git\nallowed-tools: Bash(git:*) Read\n"
            "metadata:\n  author: Test\n  version: 1.10\n"
        ),
        path="x",
        dir_name="my-skill",
    )
    p = parsed.properties
    assert (p.name, p.description, p.license, p.compatibility) == (
        "my-skill",
        "A test skill",
        "MIT",
        "Requires git",
    )
    assert p.allowed_tools == "Bash(git:*) Read"
    # Scalars stay the text written: 1.10 is not the float 1.1.
    assert p.metadata == {"author": "Test", "version": "1.10"}
    assert parsed.body == "Body\n"
    assert parsed.warnings == ()


@pytest.mark.parametrize(
    ("name", "dir_name", "rule"),
    [
        ("MySkill", "MySkill", "name-lowercase"),
        ("НАВЫК", "НАВЫК", "name-lowercase"),
        ("a" * 70, "a" * 70, "name-max-length"),
        ("-my-skill", "-my-skill", "name-hyphen-edge"),
        ("my-skill-", "my-skill-", "name-hyphen-edge"),
        ("my--skill", "my--skill", "name-consecutive-hyphens"),
        ("my_skill", "my_skill", "name-characters"),
        ("correct-name", "wrong-name", "name-matches-dir"),
        ('"../etc"', "x", "name-unsafe"),
        ('""', "x", "name-empty"),
        ("[a, b]", "x", "name-type"),
    ],
)
def test_name_rules(name: str, dir_name: str, rule: str) -> None:
    assert rule in rules(md(f"name: {name}\ndescription: d\n"), dir_name=dir_name)


@pytest.mark.parametrize("name", ["技能", "мой-навык", "навык", "a" * 64, "x1-2y", "pdf"])
def test_i18n_and_boundary_names_are_valid(name: str) -> None:
    parsed = parse_skill_md(md(f"name: {name}\ndescription: d\n"), path="x", dir_name=name)
    assert parsed.properties.name == name


def test_nfkc_name_matches_composed_directory() -> None:
    parsed = parse_skill_md(md("name: cafe\u0301\ndescription: d\n"), path="x", dir_name="café")
    assert parsed.properties.name == "café"


def test_missing_required_fields_reported_together() -> None:
    assert rules(md("license: MIT\n")) == {"name-required", "description-required"}


@pytest.mark.parametrize(
    ("front", "rule"),
    [
        ("description: ''\n", "description-empty"),
        ("description:\n", "description-empty"),
        (f"description: {'x' * 1025}\n", "description-max-length"),
        ("description: [a]\n", "description-type"),
        (f"description: d\ncompatibility: {'x' * 501}\n", "compatibility-max-length"),
        ("description: d\ncompatibility: ''\n", "compatibility-empty"),
        ("description: d\nlicense: {a: b}\n", "license-type"),
        ("description: d\nmetadata: [a]\n", "metadata-type"),
        ("description: d\nmetadata:\n  a: [1, 2]\n", "metadata-value-type"),
        ("description: d\nallowed-tools: [Read, Bash]\n", "allowed-tools-type"),
        ("description: d\nunknown_field: x\n", "unknown-field"),
    ],
)
def test_field_rules(front: str, rule: str) -> None:
    assert rule in rules(md("name: my-skill\n" + front))


def test_boundaries_pass() -> None:
    parse_skill_md(
        md(f"name: my-skill\ndescription: {'x' * 1024}\ncompatibility: {'y' * 500}\n"),
        path="x",
        dir_name="my-skill",
    )


def test_all_problems_of_a_file_at_once_with_actionable_messages() -> None:
    with pytest.raises(SkillValidationError) as info:
        parse_skill_md(
            md("name: My--Skill\nextra: 1\ncompatibility: ''\n"), path="a/SKILL.md", dir_name="x"
        )
    found = {(p.field, p.rule) for p in info.value.problems}
    assert found >= {
        ("extra", "unknown-field"),
        ("description", "description-required"),
        ("name", "name-lowercase"),
        ("name", "name-consecutive-hyphens"),
        ("name", "name-matches-dir"),
        ("compatibility", "compatibility-empty"),
    }
    text = str(info.value)
    assert (
        "a/SKILL.md: name: the name 'My--Skill' must be lowercase: 'my--skill' (name-lowercase)"
        in text
    )


@pytest.mark.parametrize(
    ("text", "rule"),
    [
        ("# No frontmatter", "frontmatter-missing"),
        ("", "frontmatter-missing"),
        ("---", "frontmatter-unclosed"),
        ("---\nname: my-skill\ndescription: d\n", "frontmatter-unclosed"),
        ("---\nname: [invalid\ndescription: x\n---\n", "yaml-syntax"),
        ("---\n- just\n- a list\n---\n", "frontmatter-not-mapping"),
        ("---\nplain text\n---\n", "frontmatter-not-mapping"),
        ("---\na: &x [1]\nb: *x\n---\n", "yaml-alias"),
        ("---\nname: !!python/object:os.system x\n---\n", "yaml-tag"),
        ("---\nname: a\nname: b\n---\n", "yaml-duplicate-key"),
        ("---\n? [a]\n: b\n---\n", "yaml-complex-key"),
        ("---\nname: x\n...\nb: c\n--- \n", "yaml-syntax"),
        ("---\na: " + "[" * 40 + "]" * 40 + "\n---\n", "yaml-depth"),
        ("---\na: " + "[" * 200_000 + "\n---\n", "yaml-depth"),
        ("---\na: b\x00\n---\n", "skill-md-binary"),
        ("---\na: \x07\n---\n", "yaml-syntax"),
    ],
)
def test_malformed_files(text: str, rule: str) -> None:
    assert rule in rules(text.encode() if "\x00" in text else text)


def test_billion_laughs_is_refused_quickly() -> None:
    lines = ['a: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]']
    for i in range(1, 10):
        prev, cur = chr(ord("a") + i - 1), chr(ord("a") + i)
        lines.append(f"{cur}: &{cur} [{', '.join(['*' + prev] * 9)}]")
    assert rules("---\n" + "\n".join(lines) + "\n---\n") == {"yaml-alias"}


def test_invalid_utf8_and_binary_and_huge() -> None:
    assert rules(b"---\nname: \xff\xfe\n---\n") == {"skill-md-utf8"}
    assert rules(bytes(range(256)) * 10) == {"skill-md-binary"}
    assert rules(b"---\n" + b"a" * (1024 * 1024 + 1)) == {"skill-md-too-large"}


def test_yaml_syntax_error_names_the_file_line() -> None:
    with pytest.raises(SkillValidationError) as info:
        parse_skill_md("---\nname: x\ndescription: [broken\n---\n", path="x", dir_name="x")
    assert "line 3" in info.value.problems[0].message or "line 4" in info.value.problems[0].message


def test_dashes_inside_values_do_not_close_the_frontmatter() -> None:
    text = (
        "---\nname: my-skill\ndescription: before --- after\n"
        "compatibility: |\n  block\n  ---\n  still block\nlicense: MIT---x\n---\n---\nbody\n"
    )
    parsed = parse_skill_md(text, path="x", dir_name="my-skill")
    assert parsed.properties.description == "before --- after"
    assert parsed.properties.compatibility == "block\n---\nstill block"
    assert parsed.body == "---\nbody\n"


def test_body_is_exactly_as_on_disk_crlf_and_bom() -> None:
    body = "\n  # Title  \r\n\ttrailing   \n\n"
    parsed = parse_skill_md(
        "\ufeff---\r\nname: my-skill\r\ndescription: d\r\n---\r\n" + body,
        path="x",
        dir_name="my-skill",
    )
    assert parsed.body == body
    assert (
        parse_skill_md(
            md("name: my-skill\ndescription: d\n", ""), path="x", dir_name="my-skill"
        ).body
        == ""
    )
    assert (
        parse_skill_md(
            "---\nname: my-skill\ndescription: d\n---", path="x", dir_name="my-skill"
        ).body
        == ""
    )


def test_lenient_warns_and_loads_cosmetic_issues() -> None:
    parsed = lenient(
        f"name: Other_Name\ndescription: {'x' * 1100}\nextra: 1\n"
        "allowed-tools: [Read, Bash]\nmetadata:\n  a: [1]\n  b: ok\n"
    )
    assert parsed.properties.name == "Other_Name"
    assert parsed.properties.allowed_tools == "Read Bash"
    assert parsed.properties.metadata == {"b": "ok"}
    assert {w.rule for w in parsed.warnings} == {
        "name-lowercase",
        "name-characters",
        "name-matches-dir",
        "description-max-length",
        "unknown-field",
        "allowed-tools-type",
        "metadata-value-type",
    }


@pytest.mark.parametrize(
    "front",
    [
        "name: my-skill\n",
        "name: my-skill\ndescription: ''\n",
        'name: "../x"\ndescription: d\n',
        "name: [\n",
    ],
)
def test_lenient_still_skips_what_the_guide_says_to_skip(front: str) -> None:
    rules(md(front), strict=False)


def test_lenient_quotes_values_with_colons() -> None:
    text = md("name: my-skill\ndescription: Use this skill when: the user asks about PDFs\n")
    assert rules(text) == {"yaml-syntax"}
    parsed = parse_skill_md(text, path="x", dir_name="my-skill", strict=False)
    assert parsed.properties.description == "Use this skill when: the user asks about PDFs"
    assert [w.rule for w in parsed.warnings] == ["yaml-lenient-fix"]


# --- load_skill: the directory edge ----------------------------------------------------


def test_load_skill(tmp_path: Path, write_skill: WriteSkill) -> None:
    root = write_skill(tmp_path, "my-skill", files={"scripts/run.sh": "echo hi\n"})
    skill = load_skill(root, tier=Tier.USER, source="test")
    assert (skill.name, skill.root, skill.location) == (
        "my-skill",
        str(root),
        str(root / "SKILL.md"),
    )
    assert skill.body == "# Body\n" and len(skill.hash) == 64


def test_load_accepts_lowercase_skill_md_and_prefers_uppercase(tmp_path: Path) -> None:
    root = tmp_path / "my-skill"
    root.mkdir()
    (root / "skill.md").write_text(md("name: my-skill\ndescription: lower\n"))
    assert load_skill(root, tier=Tier.USER, source="t").description == "lower"
    (root / "SKILL.md").write_text(md("name: my-skill\ndescription: upper\n"))
    if len(os.listdir(root)) == 2:  # case-sensitive filesystem
        assert load_skill(root, tier=Tier.USER, source="t").description == "upper"


def load_rules(root: Path) -> set[str]:
    with pytest.raises(SkillValidationError) as info:
        load_skill(root, tier=Tier.USER, source="t")
    return {p.rule for p in info.value.problems}


def test_load_hostile_directories(tmp_path: Path) -> None:
    assert load_rules(tmp_path / "nope") == {"skill-dir-missing"}
    (tmp_path / "dangling").symlink_to(tmp_path / "nowhere")
    assert load_rules(tmp_path / "dangling") == {"skill-dir-missing"}
    (tmp_path / "file").write_text("x")
    assert load_rules(tmp_path / "file") == {"skill-dir"}
    empty = tmp_path / "empty"
    empty.mkdir()
    assert load_rules(empty) == {"skill-md-missing"}
    dir_md = tmp_path / "dir-md"
    (dir_md / "SKILL.md").mkdir(parents=True)
    assert load_rules(dir_md) == {"skill-md-missing"}


def test_load_reports_tree_and_field_problems_together(
    tmp_path: Path, write_skill: WriteSkill
) -> None:
    root = write_skill(tmp_path, "my-skill", frontmatter="name: other\ndescription: d\n")
    (root / "leak").symlink_to("/etc/passwd")
    os.mkfifo(root / "pipe")
    assert load_rules(root) == {"symlink-escape", "tree-special-file", "name-matches-dir"}


def test_load_huge_skill_md_is_capped(tmp_path: Path) -> None:
    root = tmp_path / "big"
    root.mkdir()
    (root / "SKILL.md").write_bytes(b"---\n" + b"x" * (2 * 1024 * 1024))
    assert load_rules(root) == {"skill-md-too-large"}


@pytest.mark.skipif(os.geteuid() == 0, reason="root reads unreadable files")
def test_load_permission_denied(tmp_path: Path, write_skill: WriteSkill) -> None:
    root = write_skill(tmp_path, "my-skill", files={"secret.txt": "x"})
    (root / "SKILL.md").chmod(0)
    (root / "secret.txt").chmod(0)
    try:
        assert load_rules(root) == {"tree-unreadable", "skill-md-missing"} or load_rules(root) >= {
            "tree-unreadable"
        }
    finally:
        (root / "SKILL.md").chmod(0o644)


def test_corpus_verdicts(corpus: Path) -> None:
    verdicts: dict[str, set[str]] = {}
    for skill_md in sorted(corpus.rglob("SKILL.md")):
        try:
            load_skill(skill_md.parent, tier=Tier.THIRD_PARTY, source="corpus")
            verdicts[skill_md.parent.name] = set()
        except SkillValidationError as e:
            verdicts[skill_md.parent.name] = {p.rule for p in e.problems}
    assert len(verdicts) == 26
    assert {k: v for k, v in verdicts.items() if v} == {"claude-api": {"description-max-length"}}
    lenient = load_skill(
        corpus / "anthropics-skills" / "claude-api", tier=Tier.USER, source="c", strict=False
    )
    assert [w.rule for w in lenient.warnings] == ["description-max-length"]


# --- spec conformance at the edges (issue 19) -------------------------------------------


def test_directory_name_must_equal_the_name_exactly(tmp_path: Path) -> None:
    """skills-ref NFKC-normalizes the directory name but never strips it."""
    assert rules(md("name: my-skill\ndescription: d\n"), dir_name="my-skill ") == {
        "name-matches-dir"
    }
    assert rules(md("name: my-skill\ndescription: d\n"), dir_name=" my-skill") == {
        "name-matches-dir"
    }
    root = tmp_path / "my-skill "
    root.mkdir()
    (root / "SKILL.md").write_text(md("name: my-skill\ndescription: d\n"))
    with pytest.raises(SkillValidationError) as info:
        load_skill(root, tier=Tier.USER, source="t")
    assert [p.rule for p in info.value.problems] == ["name-matches-dir"]
    assert "directory 'my-skill '" in info.value.problems[0].message
    # Lenient: a warning, and the skill loads under its name.
    assert load_skill(root, tier=Tier.USER, source="t", strict=False).name == "my-skill"


@pytest.mark.parametrize("null", ["", " null", " ~", " Null", " NULL"])
@pytest.mark.parametrize("field", ["license", "compatibility", "metadata", "allowed-tools"])
def test_yaml_null_is_an_absent_optional_field(field: str, null: str) -> None:
    for strict in (True, False):
        parsed = parse_skill_md(
            md(f"name: my-skill\ndescription: d\n{field}:{null}\n"),
            path="x",
            dir_name="my-skill",
            strict=strict,
        )
        assert (
            parsed.properties
            == parse_skill_md(
                md("name: my-skill\ndescription: d\n"), path="x", dir_name="my-skill"
            ).properties
        )
        assert parsed.warnings == ()


def test_yaml_null_in_metadata_is_an_absent_entry_and_quoted_null_is_text() -> None:
    parsed = parse_skill_md(
        md(
            "name: my-skill\ndescription: d\nlicense: 'null'\ncompatibility: \"~\"\n"
            "metadata:\n  gone: null\n  empty:\n  kept: 'null'\n  tagged: !!str null\n"
        ),
        path="x",
        dir_name="my-skill",
    )
    p = parsed.properties
    assert (p.license, p.compatibility) == ("null", "~")
    assert p.metadata == {"kept": "null", "tagged": "null"}


@pytest.mark.parametrize("front", ["name: null\ndescription: d\n", "name: ~\ndescription: d\n"])
def test_yaml_null_name_is_empty(front: str) -> None:
    assert rules(md(front)) == {"name-empty"}
    assert rules(md(front), strict=False) == {"name-empty"}


@pytest.mark.parametrize("null", ["", " null", " ~"])
def test_yaml_null_description_is_empty_in_both_modes(null: str) -> None:
    front = f"name: my-skill\ndescription:{null}\n"
    assert rules(md(front)) == {"description-empty"}
    assert rules(md(front), strict=False) == {"description-empty"}


def test_a_quoted_empty_metadata_is_not_a_mapping() -> None:
    assert rules(md("name: my-skill\ndescription: d\nmetadata: ''\n")) == {"metadata-type"}


def test_a_null_key_is_text_not_a_complex_key() -> None:
    assert rules(md("name: my-skill\ndescription: d\nnull: x\n")) == {"unknown-field"}


@pytest.mark.parametrize("newline", ["\n", "\r\n", "\r"])
def test_cr_only_and_crlf_line_ends_are_line_breaks(newline: str) -> None:
    lines = [
        "---",
        "name: my-skill",
        "description: first line",
        "  folded on",
        "compatibility: |",
        "  block",
        "  text",
        "metadata:",
        "  a: b",
        "---",
        "# Body",
        "",
    ]
    parsed = parse_skill_md(newline.join(lines), path="x", dir_name="my-skill")
    p = parsed.properties
    assert p.description == "first line folded on"
    assert p.compatibility == "block\ntext"
    assert p.metadata == {"a": "b"}
    assert parsed.body == f"# Body{newline}"


def test_cr_only_errors_point_at_the_right_line() -> None:
    with pytest.raises(SkillValidationError) as info:
        parse_skill_md("---\rname: x\rdescription: [broken\r---\r", path="x", dir_name="x")
    assert "line 3" in info.value.problems[0].message or "line 4" in info.value.problems[0].message
    assert rules("---\rname: my-skill\rdescription: d\r") == {"frontmatter-unclosed"}


line_end = st.sampled_from(["\n", "\r\n", "\r"])


@given(ends=st.lists(line_end, min_size=7, max_size=7), body=st.text(max_size=40))
def test_any_mix_of_line_ends_gives_the_same_skill(ends: list[str], body: str) -> None:
    lines = ["---", "name: my-skill", "description: one", "  two", "metadata:", "  k: v", "---"]
    text = "".join(line + end for line, end in zip(lines, ends, strict=True)) + body
    if "\0" in text or (ends[-1] == "\r" and body.startswith("\n")):
        return  # "---\r" then "\n..." is "---\r\n": one line end, as every reader sees it
    parsed = parse_skill_md(text, path="x", dir_name="my-skill")
    assert parsed.properties.description == "one two"
    assert parsed.properties.metadata == {"k": "v"}
    assert parsed.body == body


@given(
    field=st.sampled_from(["license", "compatibility", "metadata", "allowed-tools"]),
    null=st.sampled_from(["", "null", "~", "Null", "NULL"]),
    comment=st.sampled_from(["", "  # none"]),
)
def test_null_optional_fields_never_change_the_properties(
    field: str, null: str, comment: str
) -> None:
    base = md("name: my-skill\ndescription: d\n")
    parsed = parse_skill_md(
        md(f"name: my-skill\ndescription: d\n{field}: {null}{comment}\n"),
        path="x",
        dir_name="my-skill",
    )
    assert parsed.properties == parse_skill_md(base, path="x", dir_name="my-skill").properties


def test_a_fifo_in_place_of_skill_md_is_one_problem(tmp_path: Path) -> None:
    root = tmp_path / "my-skill"
    root.mkdir()
    os.mkfifo(root / "SKILL.md")
    with pytest.raises(SkillValidationError) as info:
        load_skill(root, tier=Tier.USER, source="t")
    assert [(p.file, p.rule) for p in info.value.problems] == [
        (str(root / "SKILL.md"), "tree-special-file")
    ]


@pytest.mark.parametrize(
    ("target", "rule"), [("/etc/hostname", "symlink-escape"), ("nowhere", "symlink-dangling")]
)
def test_a_bad_symlink_in_place_of_skill_md_is_one_problem(
    tmp_path: Path, target: str, rule: str
) -> None:
    root = tmp_path / "my-skill"
    root.mkdir()
    (root / "SKILL.md").symlink_to(target)
    assert load_rules(root) == {rule}


def test_lenient_quotes_multi_line_values_with_colons() -> None:
    text = md(
        "name: my-skill\n"
        "description: Use this skill when: the user asks\n"
        "  about PDFs, it's handy\n"
        "\n"
        "  and forms\n"
        "compatibility: Needs\n"
        "  python: 3.11 or later\n"
        "license: MIT\n"
    )
    assert rules(text) == {"yaml-syntax"}
    parsed = parse_skill_md(text, path="x", dir_name="my-skill", strict=False)
    p = parsed.properties
    assert p.description == "Use this skill when: the user asks about PDFs, it's handy\nand forms"
    assert p.compatibility == "Needs python: 3.11 or later"
    assert p.license == "MIT"
    assert [(w.rule, w.field) for w in parsed.warnings] == [
        ("yaml-lenient-fix", "description, compatibility")
    ]


def test_lenient_repair_keeps_values_that_parse_as_they_are() -> None:
    parsed = lenient(
        "name: my-skill\ndescription: a: b\n  # a comment ends it\n"
        "allowed-tools: Bash(git:*) Read\nmetadata:\n  url: http://x/y\n"
    )
    assert parsed.properties.description == "a: b"
    assert parsed.properties.allowed_tools == "Bash(git:*) Read"
    assert parsed.properties.metadata == {"url": "http://x/y"}


word = st.text(
    st.characters(codec="utf-8", categories=("L", "N", "P", "Zs"), exclude_characters="#"),
    min_size=1,
    max_size=12,
).map(lambda w: w.strip(" \t"))


@given(first=word.filter(lambda w: w[:1].isalnum()), rest=st.lists(word, min_size=1, max_size=5))
def test_colon_repair_reads_the_value_a_lax_parser_would(first: str, rest: list[str]) -> None:
    """Whatever the words, quoting a plain value with ': ' spread over lines gives back
    the words as written, joined by the folding of plain YAML lines."""
    tokens = [t for t in f"{first}: {' '.join(rest)}".split(" ") if t]
    lines = [f"description: {tokens[0]}"] + [f"  {t}" for t in tokens[1:]]
    text = md("name: my-skill\n" + "\n".join(lines) + "\n")
    parsed = parse_skill_md(text, path="x", dir_name="my-skill", strict=False)
    assert parsed.properties.description == " ".join(tokens).strip()
