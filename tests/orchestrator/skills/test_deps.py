"""metadata.requires and a skill's own environment, with real packages from the package
index (small pure-Python ones): built by pip once, scripts run in the sandbox with it,
two skills with conflicting pins get two environments, a deleted or changed one is
refused, an offline install fails cleanly."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from orchestrator import PolicyConfig
from orchestrator._events import ScriptExecuted, ToolCompleted
from orchestrator.scripts import sandbox_available
from orchestrator.skills import (
    DependencyError,
    SkillsConfig,
    SkillSource,
    Status,
    Tier,
    build_catalog,
    build_env,
    env_state,
    load_skill,
    parse_requires,
    python_requirements,
)

SCRIPT = "import tabulate\nprint('tabulate', tabulate.__version__)\n"


pytestmark = pytest.mark.usefixtures("data_home")


def edit_installed(env: str) -> None:
    """Append a comment to the installed tabulate module of ``env``."""
    site = next(Path(env).glob("lib/python*/site-packages"))
    target = next(
        p for p in (site / "tabulate" / "__init__.py", site / "tabulate.py") if p.exists()
    )
    target.write_text(target.read_text() + "\n# edited\n")


def write(root: Path, name: str, requires: str) -> Path:
    d = root / name
    (d / "scripts").mkdir(parents=True)
    (d / "SKILL.md").write_text(
        f"---\nname: {name}\ndescription: Tables.\nmetadata:\n  requires: {json.dumps(requires)}\n"
        "---\nRun scripts/t.py\n"
    )
    (d / "scripts" / "t.py").write_text(SCRIPT)
    return d


def test_tokens_parse_and_bad_ones_say_what_to_write() -> None:
    needs = parse_requires("jq python:humanize>=4 python-version:>=3.8 mcp:github")
    assert [(n.kind, n.spec) for n in needs] == [
        ("command", "jq"),
        ("python", "humanize>=4"),
        ("python-version", ">=3.8"),
        ("mcp", "github"),
    ]
    for bad, says in (
        ("python:req!!", "PEP 508"),
        ("python-version:three", "version specifier"),
        ("npm:left-pad", "unknown kind"),
        ("../x", "bare command names"),
    ):
        with pytest.raises(DependencyError, match=says):
            parse_requires(bad)
    assert python_requirements({"requires": "jq python:B>=1 python:a"}) == ("B>=1", "a")


def test_the_catalog_says_what_is_missing(tmp_path: Path) -> None:
    root = tmp_path / "skills"
    write(root, "tab9", "python:tabulate==0.9.0")
    write(root, "old-py", "python-version:<3")
    write(root, "gh", "mcp:github")
    source = SkillSource(path=str(root), tier=Tier.USER, label="t")
    catalog = build_catalog([source], config=SkillsConfig(conventional=False), mcp_servers=[])
    status = {e.name: (e.status, e.reason) for e in catalog.entries}
    assert status["tab9"] == (
        Status.UNAVAILABLE,
        "needs python:tabulate==0.9.0 (not installed; skillog skills deps tab9 --install)",
    )
    assert status["old-py"][0] is Status.UNAVAILABLE and "python-version:<3" in status["old-py"][1]
    assert "no MCP server named 'github'" in str(status["gh"][1])
    with_server = build_catalog(
        [source], config=SkillsConfig(conventional=False), mcp_servers=["github"]
    )
    assert with_server.entry("gh").status is Status.ENABLED


def test_an_offline_install_fails_cleanly_and_builds_nothing(
    data_home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PIP_CONFIG_FILE", "/dev/null")
    monkeypatch.setenv("PIP_INDEX_URL", "http://127.0.0.1:9/simple")
    monkeypatch.setenv("PIP_FIND_LINKS", "")
    monkeypatch.setenv("PIP_EXTRA_INDEX_URL", "")
    monkeypatch.setenv("PIP_RETRIES", "0")
    monkeypatch.setenv("PIP_DEFAULT_TIMEOUT", "2")
    with pytest.raises(DependencyError, match="nothing was installed"):
        build_env(["tabulate==0.9.0"])
    envs = data_home / "skillog" / "envs"
    assert not envs.exists() or list(envs.iterdir()) == []
    assert env_state(["tabulate==0.9.0"]).record is None


async def test_conflicting_pins_get_two_environments_and_scripts_use_theirs(
    kit, store, tmp_path: Path
) -> None:
    root = tmp_path / "skills"
    old = write(root, "tab-old", "python:tabulate==0.9.0")
    new = write(root, "tab-new", "python:tabulate>=0.10")
    for d in (old, new):
        req = python_requirements(load_skill(d, tier=Tier.USER, source="t").properties.metadata)
        record = build_env(req)
        assert any(pin.startswith("tabulate==") for pin in record.lock)
    first, second = env_state(["tabulate==0.9.0"]), env_state(["tabulate>=0.10"])
    assert first.key != second.key and first.record and second.record
    skills = [load_skill(d, tier=Tier.BUILTIN, source="t") for d in (old, new)]
    turns = [
        kit.turn(kit.call("skills.load", names=["tab-old", "tab-new"])),
        kit.turn(kit.call("skills.run_script", skill="tab-old", path="scripts/t.py")),
        kit.turn(kit.call("skills.run_script", skill="tab-new", path="scripts/t.py")),
    ]
    sandbox = "required" if sandbox_available() else "preferred"
    agent = kit.agent(turns, skills, policy=PolicyConfig(sandbox=sandbox))
    try:
        await agent.run(store, "task", session_id="s")
    finally:
        agent.close()
    bodies = await kit.bodies(store, "s")
    ran = kit.of_type(bodies, ScriptExecuted)
    assert [r.env for r in ran] == [first.key, second.key]
    assert all(r.exit_code == 0 for r in ran), [r.refused for r in ran]
    outputs = [t.content for t in kit.of_type(bodies, ToolCompleted) if t.tool.endswith("script")]
    assert "tabulate 0.9.0" in outputs[0] and "tabulate 0.9.0" not in outputs[1]

    # Deleted between sessions: refused with what to do, the script never runs.
    shutil.rmtree(first.path)
    agent = kit.agent(turns[:2], skills, policy=PolicyConfig(sandbox=sandbox))
    try:
        await agent.run(store, "task", session_id="s2")
    finally:
        agent.close()
    (refused,) = kit.of_type(await kit.bodies(store, "s2"), ScriptExecuted)
    assert refused.exit_code is None and "skillog skills deps tab-old --install" in str(
        refused.refused
    )

    # Changed after it was built (a file edited): refused like a changed skill.
    edit_installed(second.path)
    agent = kit.agent([turns[0], turns[2]], skills, policy=PolicyConfig(sandbox=sandbox))
    try:
        await agent.run(store, "task", session_id="s3")
    finally:
        agent.close()
    (changed,) = kit.of_type(await kit.bodies(store, "s3"), ScriptExecuted)
    assert "changed since it was built" in str(changed.refused)
