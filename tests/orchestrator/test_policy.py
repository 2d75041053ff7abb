from pathlib import Path

import msgspec
import pytest

from orchestrator._events import McpToolRules, PolicyConfig, PolicyOverride
from orchestrator._policy import (
    Decision,
    SkillSettings,
    ToolRule,
    allowlist,
    decide,
    offered,
    parse_allowed_tools,
    permits,
    preapproved_by,
    script_gate,
    skill_settings,
)
from orchestrator._state import ActiveSkill
from orchestrator.scripts import LimitsOverride, ScriptLimits


def skill(name: str, allowed: str | None) -> ActiveSkill:
    return ActiveSkill(
        name=name,
        hash="0" * 64,
        tier="builtin",
        source="test",
        body_digest="b",
        files=(),
        allowed_tools=allowed,
        tools=(),
    )


def test_parse_splits_on_whitespace_outside_parentheses() -> None:
    assert parse_allowed_tools("Bash(git status:*)  Read\tWrite") == (
        ToolRule("Bash", "git status:*"),
        ToolRule("Read"),
        ToolRule("Write"),
    )


def test_parse_drops_entries_that_do_not_parse() -> None:
    assert parse_allowed_tools("Read Bash(unclosed b@d!") == (ToolRule("Read"),)
    assert parse_allowed_tools("") == ()
    assert parse_allowed_tools("(x) <y>") == ()


def test_no_declaring_skill_means_no_restriction() -> None:
    rules = allowlist([skill("a", None)])
    assert rules is None
    assert permits(rules, "anything") and offered(rules, "anything")


def test_read_rules_govern_skills_read_with_globs() -> None:
    rules = allowlist([skill("a", "Read(references/*)")])
    assert permits(rules, "skills.read", path="references/guide.md")
    assert not permits(rules, "skills.read", path="assets/logo.png")
    assert offered(rules, "skills.read")
    assert not offered(rules, "skills.run_script")


def test_bash_prefix_rules_match_whole_words() -> None:
    rules = allowlist([skill("a", "Bash(scripts/fill.py:*)")])
    assert permits(rules, "skills.run_script", path="scripts/fill.py", args=["--in", "a b"])
    assert permits(rules, "skills.run_script", path="scripts/fill.py")
    assert not permits(rules, "skills.run_script", path="scripts/fill.pyx")
    assert not permits(rules, "skills.run_script", path="scripts/other.py")


def test_bash_exact_rule_matches_the_quoted_command_only() -> None:
    rules = allowlist([skill("a", "Bash(scripts/x.sh)")])
    assert permits(rules, "skills.run_script", path="scripts/x.sh")
    assert not permits(rules, "skills.run_script", path="scripts/x.sh", args=["; rm -rf /"])


def test_host_tools_match_by_exact_name_and_patterns_fail_closed() -> None:
    rules = allowlist([skill("a", "lookup fetch(https://*)")])
    assert permits(rules, "lookup")
    assert not permits(rules, "Lookup")
    assert not permits(rules, "fetch")
    assert not offered(rules, "fetch")


def test_load_and_unload_are_always_allowed() -> None:
    rules = allowlist([skill("a", "Read")])
    assert permits(rules, "skills.load") and permits(rules, "skills.unload")
    assert offered(rules, "skills.unload")


def test_declaring_skills_combine_by_union_others_do_not_restrict() -> None:
    rules = allowlist([skill("a", "Read"), skill("b", "lookup"), skill("c", None)])
    assert permits(rules, "skills.read", path="x")
    assert permits(rules, "lookup")
    assert not permits(rules, "skills.run_script", path="scripts/x.py")


def test_trust_tiers() -> None:
    config = PolicyConfig(network=("builtin", "third-party"))
    builtin = script_gate(config, "builtin")
    assert not builtin.needs_approval and builtin.network and builtin.sandbox == "required"
    assert not script_gate(config, "org").needs_approval
    assert script_gate(config, "user").needs_approval
    third = script_gate(config, "third-party")
    assert third.needs_approval and not third.network
    # Third-party needs an approval even when the config forgets to ask for it.
    assert script_gate(PolicyConfig(approve=()), "third-party").needs_approval
    assert script_gate(config, "made-up").needs_approval


def _doc_rows() -> list[tuple[str, str, bool]]:
    doc = (Path(__file__).parents[2] / "docs" / "runtime.md").read_text()
    section = doc.split("**How `allowed-tools` patterns match**")[1].split("**`allowed-tools` pre")[
        0
    ]
    rows = []
    for line in section.splitlines():
        cells = [c.strip().strip("`") for c in line.strip().strip("|").split("|")]
        if len(cells) == 3 and cells[2] in ("yes", "no"):
            rows.append((cells[0], cells[1], cells[2] == "yes"))
    return rows


@pytest.mark.parametrize(("declared", "call", "allowed"), _doc_rows())
def test_the_pattern_table_in_the_docs(declared: str, call: str, allowed: bool) -> None:
    tool, *rest = call.split()
    path, args = (rest[0], rest[1:]) if rest else ("", [])
    rules = (("skill", parse_allowed_tools(declared)),)
    ok = offered(rules, tool) and permits(rules, tool, path=path, args=args)
    assert ok is allowed, f"{declared} / {call}"


def test_the_table_has_rows() -> None:
    assert len(_doc_rows()) >= 15


def test_trusted_tiers_preapprove_what_their_allowed_tools_list() -> None:
    def tiered(name: str, allowed: str, tier: str) -> ActiveSkill:
        return msgspec.structs.replace(skill(name, allowed), tier=tier)

    config = PolicyConfig()
    org = tiered("ops", "Bash(python3 scripts/deploy.py:*) send_email", "org")
    user = tiered("mine", "Bash send_email", "user")
    third = tiered("theirs", "Bash send_email", "third-party")
    run = {"path": "scripts/deploy.py", "args": ("--prod",)}
    assert preapproved_by([org], config, "skills.run_script", **run) == "allowed-tools of ops (org)"
    assert preapproved_by([org], config, "send_email") == "allowed-tools of ops (org)"
    assert preapproved_by([org], config, "skills.run_script", path="scripts/other.py") is None
    assert preapproved_by([user], config, "send_email") is None  # user: only when policy says
    with_user = PolicyConfig(preapprove_tiers=("builtin", "org", "user"))
    assert preapproved_by([user], with_user, "send_email") == "allowed-tools of mine (user)"
    everyone = PolicyConfig(preapprove_tiers=("builtin", "org", "user", "third-party"))
    assert preapproved_by([third], everyone, "send_email") is None  # never third-party


def test_decide_answers_once_with_the_rule_and_the_preapproval() -> None:
    ops = msgspec.structs.replace(skill("ops", "Bash(scripts/deploy.py:*) send_email"), tier="org")
    mine = msgspec.structs.replace(skill("mine", None), tier="user")
    gh = McpToolRules(approve=("mcp__gh",))
    config = PolicyConfig(approve_host_tools=("send_email", "rm_rf"), mcp=gh)

    denied = decide(config, [ops], [], "skills.run_script", skill=ops, path="scripts/x.py")
    assert (denied.verdict, denied.rule) == ("denied", "allowed-tools")
    assert denied.reason.startswith("skills.run_script scripts/x.py is not in the allowed-tools")

    run = decide(config, [ops], [], "skills.run_script", skill=ops, path="scripts/deploy.py")
    assert (run.verdict, run.settings) == ("allowed", skill_settings(config, "org", name="ops"))

    asked = decide(config, [mine], [], "skills.run_script", skill=mine, path="scripts/x.py")
    assert (asked.verdict, asked.rule, asked.preapproved_by) == ("needs_approval", "approve", None)

    host = decide(config, [ops], [], "send_email")
    assert (host.verdict, host.rule) == ("needs_approval", "approve_host_tools")
    assert host.preapproved_by == "allowed-tools of ops (org)"
    assert decide(config, [], [], "rm_rf").preapproved_by is None
    assert decide(config, [], [], "mcp__gh__create_issue").rule == "mcp.approve"
    assert decide(config, [], [], "lookup") == Decision(verdict="allowed")


def test_every_override_field_is_a_setting_and_every_one_applies() -> None:
    """A field renamed on one side only would drop an override silently."""
    settings = set(SkillSettings.__struct_fields__) - {"tier"}
    assert set(PolicyOverride.__struct_fields__) == settings
    assert set(LimitsOverride.__struct_fields__) == set(ScriptLimits.__struct_fields__)
    limits = LimitsOverride(
        cpu_s=1, memory_bytes=2, pids=3, file_bytes=4, open_files=5, stored_output_bytes=6
    )
    override = PolicyOverride(
        approve=True,
        network=True,
        sandbox="off",
        script_timeout_ms=7,
        output_cap_bytes=8,
        read_max_bytes=9,
        nested_paths=True,
        preapprove=False,
        allow=("Bash(scripts/a.py)",),
        script_limits=limits,
    )
    config = PolicyConfig(allow=("lookup",), skills={"pdf": override})
    before = skill_settings(config, "org", name="other")
    after = skill_settings(config, "org", name="pdf")
    changed = {
        f for f in SkillSettings.__struct_fields__ if getattr(before, f) != getattr(after, f)
    }
    assert changed == settings
    assert after.allow == ("lookup", "Bash(scripts/a.py)")
    assert after.script_limits == ScriptLimits(
        cpu_s=1, memory_bytes=2, pids=3, file_bytes=4, open_files=5, stored_output_bytes=6
    )
