"""A skill folder's tools through the CLI (seed 003 PL1): ``skills list``/``show`` name
them before activation, and ``skills validate`` checks ``tools.yaml`` against hostile
input with errors that say what, where and what to do."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest

from orchestrator.cli import main

WriteSkill = Callable[..., Path]

ECHO_TOOL = """\
tools:
  - name: echo
    description: Echo the text.
    script: scripts/echo.py
    input_schema: {type: object, properties: {text: {type: string}}}
"""
SCRIPTS: dict[str, str | bytes] = {"scripts/echo.py": "print('hi')\n"}


def test_list_and_show_name_the_folder_tools_before_activation(
    project: Path, write_skill: WriteSkill, capsys: pytest.CaptureFixture[str]
) -> None:
    skills = project / ".agents/skills"
    write_skill(skills, "tab", files={**SCRIPTS, "tools.yaml": ECHO_TOOL})
    write_skill(skills, "plain")
    write_skill(skills, "broken-tools", files={"tools.yaml": "tools: {"})
    assert main(["skills", "list"]) == 0
    out = capsys.readouterr().out
    assert "tools while active: tab__echo" in out
    assert "broken-tools/tools.yaml is not UTF-8 YAML" in out  # listed, with the reason
    assert "skillog skills validate" in out
    assert main(["skills", "list", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert set(data["tools"]) == {"tab", "broken-tools"}
    (offered,) = data["tools"]["tab"]["offered"]
    assert offered == {
        "name": "tab__echo",
        "description": "Echo the text.",
        "script": "scripts/echo.py",
    }
    assert main(["skills", "show", "tab"]) == 0
    assert "tool (while active): tab__echo - Echo the text." in capsys.readouterr().out
    assert main(["skills", "show", "plain", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["tools"] == {"offered": [], "problem": None}


@pytest.mark.parametrize(
    ("tools", "says"),
    [
        ("tools: [{name: x, description: d, script: ", "tools.yaml is not UTF-8 YAML"),
        ("- just a list\n", "Expected `object`, got `array`"),
        (
            "tools: [{name: x, description: d, script: scripts/echo.py,"
            " input_schema: {type: object, properties: {a: {type: 5}}}}]",
            "tools[0]: input_schema is not a valid JSON Schema",
        ),
        (
            "tools: [{name: x, description: d, script: ../../../etc/passwd}]",
            "tools[0]: script '../../../etc/passwd' leaves the skill's folder",
        ),
        ("tools: [{name: x, description: d, script: /bin/sh}]", "leaves the skill's folder"),
        (
            "tools: [{name: x, description: d, script: scripts/echo.py},"
            " {name: x, description: e, script: scripts/echo.py}]",
            "tools[1]: the name 'x' is declared twice; rename one",
        ),
        ("tools: [{name: x, description: d, script: scripts/gone.py}]", "not a file of the skill"),
        ('tools: [{name: "x\\e[31m", description: d, script: scripts/echo.py}]', "lowercase"),
        (b"\xff\xfe", "not UTF-8 YAML"),
        ("tools: [" + ",".join(["{name: a, description: d, script: s}"] * 40) + "]", "at most 32"),
    ],
)
def test_validate_checks_the_tools_file(
    tmp_path: Path,
    write_skill: WriteSkill,
    capsys: pytest.CaptureFixture[str],
    tools: str | bytes,
    says: str,
) -> None:
    root = write_skill(tmp_path, "tab", files={**SCRIPTS, "tools.yaml": tools})
    assert main(["skills", "validate", str(root)]) == 1
    out = capsys.readouterr().out
    assert "tab/tools.yaml" in out and says in out
    assert "\x1b" not in out  # what the file holds reaches the terminal visible, never raw
    assert main(["skills", "validate", str(root), "--json"]) == 1
    result = json.loads(capsys.readouterr().out)
    assert result["valid"] is False and says in result["problems"][0]


def test_validate_refuses_tools_named_like_an_mcp_servers(
    tmp_path: Path, write_skill: WriteSkill, capsys: pytest.CaptureFixture[str]
) -> None:
    tools = "tools: [{name: github__delete_repo, description: d, script: scripts/echo.py}]"
    root = write_skill(tmp_path, "mcp", files={**SCRIPTS, "tools.yaml": tools})
    assert main(["skills", "validate", str(root)]) == 1
    out = capsys.readouterr().out
    assert "'mcp__github__delete_repo', a name of the MCP servers' tools" in out
    assert "rename the skill" in out


def test_validate_accepts_a_good_tools_file(
    tmp_path: Path, write_skill: WriteSkill, capsys: pytest.CaptureFixture[str]
) -> None:
    root = write_skill(tmp_path, "tab", files={**SCRIPTS, "tools.yaml": ECHO_TOOL})
    assert main(["skills", "validate", str(root)]) == 0
    assert "valid skill tab" in capsys.readouterr().out
