"""What an MCP server's listing becomes (names, effect classes, rejections), what a
result becomes, the name patterns of allowed-tools and policy, and the config section.
Pure: no server needed."""

from __future__ import annotations

from pathlib import Path

import pytest

from orchestrator._policy import allowlist, names_tool, offered
from orchestrator._state import ActiveSkill
from orchestrator.mcp import (
    McpServerConfig,
    effect_of,
    load_mcp_servers,
    session_name,
    tools_listed,
)
from orchestrator.mcp._results import model_text, outcome_of
from orchestrator.skills._errors import ConfigError

OBJECT = {"type": "object", "properties": {}}
SERVER = McpServerConfig(name="gh", command="x", effects={"create": "idempotent"})


def test_session_names_are_prefixed_and_made_safe() -> None:
    assert session_name("gh", "create_issue") == "mcp__gh__create_issue"
    assert session_name("gh", "a b.c/d?é") == "mcp__gh__a_b_c_d__"


@pytest.mark.parametrize(
    ("annotations", "overrides", "effect"),
    [
        ({"readOnlyHint": True}, {}, "pure"),
        ({"idempotentHint": True}, {}, "idempotent"),
        ({"destructiveHint": True}, {}, "at-most-once"),
        ({}, {}, "at-most-once"),
        ({"readOnlyHint": True}, {"t": "at-most-once"}, "at-most-once"),  # servers can lie
        ({}, {"*": "pure"}, "pure"),
        ({}, {"t": "idempotent", "*": "pure"}, "idempotent"),
    ],
)
def test_effect_classes_from_annotations_unless_overridden(
    annotations: dict[str, bool], overrides: dict[str, str], effect: str
) -> None:
    assert effect_of("t", annotations, overrides) == effect


def test_a_listing_offers_what_it_can_and_names_what_it_cannot() -> None:
    tools = [
        {"name": "find", "inputSchema": OBJECT, "annotations": {"readOnlyHint": True}},
        {"name": "create", "description": "Make one.", "inputSchema": OBJECT},
        {"name": "a.b", "inputSchema": OBJECT},
        {"name": "a_b", "inputSchema": OBJECT},  # the same name once made safe
        {"name": "send", "inputSchema": OBJECT},  # shadows a host tool below
        {"name": "y" * 60, "inputSchema": OBJECT},
        {"name": "bad", "inputSchema": {"type": "object", "required": "yes"}},
        {"name": "scalar", "inputSchema": {"type": "string"}},
        {"inputSchema": OBJECT},
    ]
    event = tools_listed(
        SERVER, tools, reason="connected", server_info="gh 1", taken=frozenset({"mcp__gh__send"})
    )
    assert [(t.name, t.mcp_name, t.effect) for t in event.tools] == [
        ("mcp__gh__find", "find", "pure"),
        ("mcp__gh__create", "create", "idempotent"),
        ("mcp__gh__a_b", "a.b", "at-most-once"),
    ]
    assert event.tools[1].description == "Make one."
    assert event.tools[0].annotations == '{"readOnlyHint":true}'
    reasons = dict(event.rejected)
    assert "already the name" in reasons["a_b"] and "already the name" in reasons["send"]
    assert "at most 64" in reasons["y" * 60]
    assert "not a valid JSON Schema" in reasons["bad"]
    assert "not a JSON Schema object" in reasons["scalar"]
    assert "no name" in reasons[""]
    again = tools_listed(SERVER, tools, reason="list_changed", server_info="", taken=frozenset())
    assert again.hash != event.hash  # "send" is offered now
    same = tools_listed(
        SERVER, tools, reason="connected", server_info="gh 1", taken=frozenset({"mcp__gh__send"})
    )
    assert same == event  # canonical: the same listing gives the same event and hash


def test_results_keep_everything_and_the_model_reads_text_capped() -> None:
    result = {
        "content": [
            {"type": "text", "text": "hello"},
            {"type": "image", "data": "AAAA", "mimeType": "image/png"},
            {"type": "resource_link", "uri": "file:///a", "name": "a"},
            {"type": "resource", "resource": {"uri": "file:///b", "text": "inline"}},
        ],
        "isError": False,
    }
    assert model_text(result).splitlines() == [
        "hello",
        "[image image/png, about 3 bytes, kept in the session log]",
        "[resource link file:///a (a)]",
        "inline",
    ]
    assert model_text({"content": [], "structuredContent": {"b": 1, "a": 2}}) == '{"a":2,"b":1}'
    big = {"content": [{"type": "text", "text": "z" * 10_000}], "isError": True}
    outcome = outcome_of(big, stored_cap=1000, model_cap=500, duration_ms=3)
    assert outcome.is_error and outcome.truncated and len(outcome.stored) == 1000
    assert outcome.size > 10_000 and len(outcome.content) <= 500
    assert "output cut for the model" in outcome.content


def _skill(allowed: str) -> ActiveSkill:
    return ActiveSkill(
        name="s", hash="0" * 64, tier="builtin", source="t", body_digest="", files=(),
        allowed_tools=allowed, tools=(),
    )  # fmt: skip


@pytest.mark.parametrize(
    ("allowed", "tool", "ok"),
    [
        ("mcp__gh__create_issue", "mcp__gh__create_issue", True),
        ("mcp__gh__create_issue", "mcp__gh__close_issue", False),
        ("mcp__gh", "mcp__gh__close_issue", True),
        ("mcp__gh", "mcp__ghx__close_issue", False),
        ("mcp__gh__*", "mcp__gh__close_issue", True),
        ("mcp__gh__*", "mcp__docs__search", False),
        ("mcp__*", "mcp__docs__search", True),
        ("mcp__*", "send_email", False),
        ("mcp__gh__create_issue(title:*)", "mcp__gh__create_issue", False),  # fail closed
        ("Read", "mcp__gh__create_issue", False),
    ],
)
def test_allowed_tools_patterns_for_mcp_tools(allowed: str, tool: str, ok: bool) -> None:
    assert offered(allowlist([_skill(allowed)]), tool) is ok


def test_policy_names_mcp_tools_by_server_or_prefix() -> None:
    assert names_tool("mcp__gh", "mcp__gh__x") and names_tool("mcp__gh__*", "mcp__gh__x")
    assert not names_tool("mcp__g", "mcp__gh__x") and not names_tool("gh", "mcp__gh__x")
    assert not names_tool("send*", "send_email")  # globs are for MCP names only


def test_the_config_sections_servers(tmp_path: Path) -> None:
    path = tmp_path / "config.yaml"
    path.write_text(
        "mcp:\n  servers:\n"
        "    gh:\n      command: npx\n      args: [-y, server]\n      call_timeout_ms: 5000\n"
        "      effects: {create_issue: at-most-once}\n"
        "    docs:\n      url: http://127.0.0.1:9/mcp\n      headers: {X-Key: k}\n"
    )
    docs, gh = load_mcp_servers(str(path))
    assert (docs.name, docs.transport, docs.headers) == ("docs", "http", {"X-Key": "k"})
    assert (gh.name, gh.transport, gh.args, gh.call_timeout_ms) == (
        "gh",
        "stdio",
        ("-y", "server"),
        5000,
    )
    assert load_mcp_servers(str(tmp_path / "missing.yaml")) == ()


@pytest.mark.parametrize(
    ("yaml", "message"),
    [
        ("mcp:\n  servers:\n    gh: {command: x, url: 'http://a'}\n", "exactly one of command"),
        ("mcp:\n  servers:\n    gh: {}\n", "exactly one of command"),
        ("mcp:\n  servers:\n    g__h: {command: x}\n", "$.mcp.servers"),
        ("mcp:\n  servers:\n    gh: {command: x, call_timeout_ms: 0}\n", "call_timeout_ms"),
        ("mcp:\n  servers:\n    gh: {command: x, effects: {a: maybe}}\n", "effects"),
        ("mcp:\n  servers:\n    gh: {command: x, name: other}\n", "the key names the server"),
        ("mcp:\n  server: {}\n", "did you mean 'servers'"),
        ("mcp:\n  servers:\n    gh: {url: 'ftp://a'}\n", "http:// or https://"),
    ],
)
def test_bad_server_configs_say_what_and_where(tmp_path: Path, yaml: str, message: str) -> None:
    path = tmp_path / "config.yaml"
    path.write_text(yaml)
    with pytest.raises(ConfigError) as e:
        load_mcp_servers(str(path))
    assert message in str(e.value) and str(path) in str(e.value)


def test_server_configs_in_code_refuse_the_same_mistakes() -> None:
    with pytest.raises(ValueError, match="exactly one of command"):
        McpServerConfig(name="gh")


async def test_a_server_the_log_lists_but_this_process_lacks_is_withdrawn() -> None:
    from orchestrator._effects import LiveEffects, mcp_gone

    listed = tools_listed(
        SERVER, [{"name": "find", "inputSchema": OBJECT}], reason="connected", server_info=""
    )
    recorded = {"gh": listed}
    (gone,) = await LiveEffects([]).mcp_changes(recorded)  # resumed with no MCP servers
    assert (gone.server, gone.stage) == ("gh", "connect")
    assert "not among this process's MCP servers" in gone.error
    assert mcp_gone(recorded, {"gh"}) == [] and mcp_gone({"gh": gone}, ()) == []


@pytest.mark.parametrize(
    ("rules", "tool", "needs"),
    [
        (("mcp__github",), "mcp__github__create_issue", True),
        (("mcp__github__create_*",), "mcp__github__create_issue", True),
        (("mcp__github__create_*",), "mcp__github__list_issues", False),
        (("mcp__*",), "mcp__docs__search", True),
        (("mcp__github",), "mcp__githubx__create_issue", False),
        (("send_email",), "send_email", False),  # policy.mcp names MCP tools only
    ],
)
def test_policy_mcp_approve_names_tools_as_allowed_tools_does(
    rules: tuple[str, ...], tool: str, needs: bool
) -> None:
    from orchestrator import McpToolRules, PolicyConfig
    from orchestrator._policy import host_tool_needs_approval

    assert host_tool_needs_approval(PolicyConfig(mcp=McpToolRules(approve=rules)), tool) is needs
