"""Policy from the configuration file, profiles and the command line: layering, the
errors a mistyped key gets, per-tier/source/skill overrides, the key table in
docs/policy.md, and the effective policy recorded in session.started (and kept on
resume, whatever the configuration says by then)."""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import msgspec
import msgspec.inspect as mi
import pytest
import trio

from eventlog import MemoryStore, open_sqlite_store
from orchestrator import PolicyConfig, PolicyOverride, load_policy
from orchestrator._events import (
    CODEC,
    ApprovalRequested,
    ApprovalResolved,
    Event,
    ScriptExecuted,
    ScriptStarted,
)
from orchestrator._policy import skill_settings
from orchestrator.scripts._limits import LimitsOverride, ScriptLimits
from orchestrator.skills import ConfigError, Tier

DOC = Path(__file__).parents[2] / "docs" / "policy.md"


def write(tmp_path: Path, text: str) -> str:
    path = tmp_path / "config.yaml"
    path.write_text(text)
    return str(path)


# -- the key table ---------------------------------------------------------------------


OVERRIDE = "<override>"
"""The rows of an override's keys: ``tiers.TIER``, ``sources.SOURCE``, ``skills.NAME``."""


def type_text(t: mi.Type) -> str:
    if isinstance(t, mi.UnionType):
        kinds = [x for x in t.types if not isinstance(x, mi.NoneType)]
        nullable = any(isinstance(x, mi.NoneType) for x in t.types)
        text = " or ".join(type_text(x) for x in kinds)
        return f"{text} or null" if nullable else text
    if isinstance(t, mi.LiteralType):
        return "one of " + ", ".join(str(v) for v in t.values)
    if isinstance(t, mi.VarTupleType):
        return f"list of {type_text(t.item_type)}"
    if isinstance(t, mi.TupleType):
        return "[" + ", ".join(type_text(x) for x in t.item_types) + "]"
    if isinstance(t, mi.DictType):
        return "map of override"
    if isinstance(t, mi.StructType):
        return "section"
    return {mi.BoolType: "bool", mi.IntType: "int", mi.StrType: "string"}[type(t)]


def _default(value: Any) -> str:
    if value is msgspec.UNSET:
        return "inherit"
    if isinstance(value, msgspec.Struct):
        return "-"
    return msgspec.json.encode(msgspec.to_builtins(value)).decode()


def rows(
    struct: type[msgspec.Struct] = PolicyConfig, prefix: str = ""
) -> Iterator[tuple[str, str, str]]:
    """(key, type, default) for every key under ``struct``, sections before their keys."""
    info = mi.type_info(struct)
    assert isinstance(info, mi.StructType)
    instance = struct()
    for field in info.fields:
        key = f"{prefix}{field.name}"
        yield key, type_text(field.type), _default(getattr(instance, field.name))
        inner = field.type
        if isinstance(inner, mi.UnionType):
            inner = next((x for x in inner.types if isinstance(x, mi.StructType)), inner)
        if isinstance(inner, mi.StructType):
            yield from rows(inner.cls, f"{key}.")
    if struct is PolicyConfig:
        yield from rows(PolicyOverride, f"{OVERRIDE}.")


def _doc_rows() -> list[tuple[str, str, str, str]]:
    found = []
    for line in DOC.read_text().splitlines():
        m = re.match(r"\| `([^`]+)` \| ([^|]+) \| `([^`]*)` \| ([^|]+) \|$", line)
        if m:
            found.append((m[1], m[2].strip(), m[3], m[4].strip()))
    return found


def test_the_key_table_in_the_docs_is_the_struct() -> None:
    documented = [(key, kind, default) for key, kind, default, _ in _doc_rows()]
    assert documented == list(rows()), "docs/policy.md's key table differs from PolicyConfig"
    assert all(meaning for *_, meaning in _doc_rows())


def test_every_documented_default_is_what_an_empty_config_gives(tmp_path: Path) -> None:
    policy = load_policy(str(tmp_path / "missing.yaml"))
    assert policy == PolicyConfig()
    data = msgspec.to_builtins(policy)
    for key, _, default in rows():
        if "<override>" in key or default == "-":
            continue
        value = data
        for part in key.split("."):
            value = value[part]
        assert json.dumps(value, separators=(",", ":")) == default, key


# -- layering ----------------------------------------------------------------------------

CONFIG = """\
policy:
  approve: [user, third-party]
  script_timeout_ms: 40000
  script_limits: {cpu_s: 10, pids: 64}
  skills:
    pdf: {network: true}
  profile: strict
  profiles:
    strict:
      approve: [builtin, org, user, third-party]
      script_limits: {cpu_s: 5}
    ci:
      approve: []
      skills:
        pdf: {script_timeout_ms: 90000}
"""


def test_defaults_then_config_then_profile_then_command_line(tmp_path: Path) -> None:
    path = write(tmp_path, CONFIG)
    strict = load_policy(path)  # the file's own `profile: strict`
    assert strict.approve == ("builtin", "org", "user", "third-party")
    assert strict.script_timeout_ms == 40000  # from the file, the profile leaves it
    assert strict.script_limits == ScriptLimits(cpu_s=5, pids=64)  # merged key by key
    assert strict.read_max_bytes == PolicyConfig().read_max_bytes  # a default

    ci = load_policy(path, profile="ci")  # the flag beats `policy.profile`
    assert ci.approve == ()
    assert ci.skills == {"pdf": PolicyOverride(network=True, script_timeout_ms=90000)}

    cli = load_policy(
        path,
        profile="ci",
        sets=["approve=[third-party]", "script_limits.cpu_s=null", "skills.pdf.network=false"],
    )
    assert cli.approve == ("third-party",)
    assert cli.script_limits.cpu_s is None and cli.script_limits.pids == 64
    assert cli.skills["pdf"] == PolicyOverride(network=False, script_timeout_ms=90000)


def test_claude_code_style_rules_go_through_the_command_line_unquoted(tmp_path: Path) -> None:
    policy = load_policy(
        str(tmp_path / "none.yaml"), sets=["allow=[Bash(python:*), Read, Bash(npm run test:*)]"]
    )
    assert policy.allow == ("Bash(python:*)", "Read", "Bash(npm run test:*)")


ELICIT_NEG = "{elicitation_timeout_ms: -1}"


@pytest.mark.parametrize(
    ("text", "sets", "message"),
    [
        ("policy:\n  aprove: [user]\n", [], "unknown key 'policy.aprove'; did you mean 'approve'?"),
        (
            "policy:\n  script_limits: {cpu: 3}\n",
            [],
            "unknown key 'policy.script_limits.cpu'; did you mean 'cpu_s'?",
        ),
        (
            "policy:\n  skills:\n    pdf: {netwrk: true}\n",
            [],
            "unknown key 'policy.skills.pdf.netwrk'; did you mean 'network'?",
        ),
        (
            "policy:\n  tiers:\n    user: {script_limits: {pid: 3}}\n",
            [],
            "unknown key 'policy.tiers.user.script_limits.pid'; did you mean 'pids'?",
        ),
        (
            "policy:\n  profiles:\n    ci: {budjet: {wall_ms: 5}}\n",
            ["approve=[]"],
            "unknown key 'policy.profiles.ci.budjet'; did you mean 'budget'?",
        ),
        ("", ["budget.wal_ms=5"], "--policy: unknown key 'policy.budget.wal_ms'; did you mean"),
        ("", ["approve=[usr]"], "policy.approve: unknown tier 'usr'; did you mean 'user'?"),
        ("policy:\n  tiers:\n    orgs: {}\n", [], "unknown tier 'orgs'; did you mean 'org'?"),
        ("", ["allow=['Bash(a) Read']"], "is not one allowed-tools rule"),
        ("", ["skills.x.allow=['(']"], "policy.skills.x.allow: '(' is not one allowed-tools rule"),
        ("", ["script_limits.pids=0"], "limits.pids must be an integer from 1"),
        ("", ["tiers.user.script_limits.cpu_s=-1"], "tiers.user.script_limits: limits.cpu_s"),
        ("", ["script_timeout_ms=0"], "script_timeout_ms must be at least 1"),
        ("", ["sandbox=maybe"], "Invalid enum value 'maybe' - at `$.sandbox`"),
        *(
            (text, sets, f"policy.mcp.elicitation_timeout_ms must be from 1 to 86400000 ms{it}")
            for text, sets, it in [
                ("policy:\n  mcp: {elicitation_timeout_ms: -5000}\n", [], " (a day; it is -5000)"),
                ("", ["mcp.elicitation_timeout_ms=0"], " (a day; it is 0)"),
                ("", ["mcp.elicitation_timeout_ms=86400001"], ""),
                ("", [f"mcp.elicitation_timeout_ms={10**30}"], f" (a day; it is {10**30})"),
                (f"policy:\n  profile: ci\n  profiles:\n    ci: {{mcp: {ELICIT_NEG}}}\n", [], ""),
            ]
        ),
        *(
            ("", [f"mcp.elicitation_timeout_ms={value}"], f"got `{kind}` - at `$.mcp.elicit")
            for value, kind in [("1.5", "float"), ("2m", "str"), ("true", "bool"), ("[]", "array")]
        ),
        ("", ["mcp.max_samples_per_call=-1"], "policy.mcp.max_samples_per_call must be 0 or more"),
        ("", ["script_timeout_ms=soon"], "Expected `int`, got `str` - at `$.script_timeout_ms`"),
        ("", ["novalue"], "expected KEY=VALUE"),
        ("", ["a..b=1"], "expected KEY=VALUE"),
        ("", ["approve=[unclosed"], "the value is not YAML"),
        ("policy: [1, 2]\n", [], "policy must be a mapping"),
        ("policy:\n  profile: stirct\n  profiles: {strict: {}}\n", [], "did you mean 'strict'?"),
    ],
)
def test_mistakes_are_errors_that_say_what_and_where(
    tmp_path: Path, text: str, sets: list[str], message: str
) -> None:
    with pytest.raises(ConfigError) as error:
        load_policy(write(tmp_path, text), sets=sets)
    assert message in str(error.value)


def test_an_unknown_profile_names_the_known_ones(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"no policy profile 'prod' .*profiles: strict, ci"):
        load_policy(write(tmp_path, CONFIG), profile="prod")


# -- overrides ------------------------------------------------------------------------


def test_overrides_apply_tier_then_source_then_skill_and_third_party_floors_hold() -> None:
    policy = PolicyConfig(
        approve=("user", "third-party"),
        allow=("Read",),
        tiers={"user": PolicyOverride(script_timeout_ms=1000, allow=("Bash(a:*)",))},
        sources={"team": PolicyOverride(script_timeout_ms=2000, approve=False)},
        skills={
            "pdf": PolicyOverride(
                script_timeout_ms=3000, script_limits=LimitsOverride(cpu_s=None), allow=("x",)
            ),
            "evil": PolicyOverride(approve=False, network=True, sandbox="off", preapprove=True),
        },
    )
    plain = skill_settings(policy, "user", source="elsewhere", name="other")
    assert (plain.script_timeout_ms, plain.approve, plain.allow) == (
        1000,
        True,
        ("Read", "Bash(a:*)"),
    )
    team = skill_settings(policy, "user", source="team", name="other")
    assert (team.script_timeout_ms, team.approve) == (2000, False)
    pdf = skill_settings(policy, "user", source="team", name="pdf")
    assert pdf.script_timeout_ms == 3000 and pdf.allow == ("Read", "Bash(a:*)", "x")
    assert pdf.script_limits == ScriptLimits(cpu_s=None)  # the rest stays as it was
    evil = skill_settings(policy, "third-party", name="evil")
    # Network by an entry naming the skill is the one way in (issue 29); the rest holds.
    assert (evil.approve, evil.network, evil.sandbox, evil.preapprove) == (
        True,
        True,
        "required",
        False,
    )
    assert evil.allow == ()  # the session-wide allow never covers third-party
    assert skill_settings(policy, "nonsense").tier == "third-party"


SCRIPT = "import sys\nprint('ran', *sys.argv[1:])\n"


async def test_a_skill_override_changes_what_its_calls_need_and_get(kit, store, make_skill) -> None:
    quick = make_skill("quick", files={"scripts/run.py": SCRIPT}, tier=Tier.USER)
    slow = make_skill("slow", files={"scripts/run.py": SCRIPT}, tier=Tier.USER)
    policy = PolicyConfig(
        skills={"quick": PolicyOverride(approve=False, script_timeout_ms=7000)},
        sandbox="preferred",
    )
    asked: list[str] = []

    async def approver(request):  # type: ignore[no-untyped-def]
        asked.append(request.skill)
        from orchestrator import ApprovalDecision

        return ApprovalDecision(approved=True, decided_by="t")

    turns = [
        kit.turn(kit.call("skills.load", names=["quick", "slow"], mode="add")),
        kit.turn(kit.call("skills.run_script", skill="quick", path="scripts/run.py")),
        kit.turn(kit.call("skills.run_script", skill="slow", path="scripts/run.py")),
    ]
    agent = kit.agent(turns, [quick, slow], policy=policy, approver=approver)
    session = await agent.run(store, "go")
    agent.close()
    bodies = await kit.bodies(store, session.id)
    assert bodies[0].policy == policy  # recorded whole
    assert asked == ["slow"]
    started = {s.skill: s.timeout_ms for s in kit.of_type(bodies, ScriptStarted)}
    assert started == {"quick": 7000, "slow": 30000}
    assert len(kit.of_type(bodies, ScriptExecuted)) == 2


async def test_policy_allow_rules_pre_approve_but_not_third_party(kit, store, make_skill) -> None:
    mine = make_skill("mine", files={"scripts/run.py": SCRIPT}, tier=Tier.USER)
    theirs = make_skill("theirs", files={"scripts/run.py": SCRIPT}, tier=Tier.THIRD_PARTY)
    asked: list[str] = []

    async def approver(request):  # type: ignore[no-untyped-def]
        from orchestrator import ApprovalDecision

        asked.append(request.skill)
        return ApprovalDecision(approved=False, decided_by="t")

    turns = [
        kit.turn(kit.call("skills.load", names=["mine", "theirs"], mode="add")),
        kit.turn(kit.call("skills.run_script", skill="mine", path="scripts/run.py", args=["x"])),
        kit.turn(kit.call("skills.run_script", skill="theirs", path="scripts/run.py")),
    ]
    policy = PolicyConfig(allow=("Bash(python3 scripts/run.py:*)",), sandbox="preferred")
    agent = kit.agent(turns, [mine, theirs], policy=policy, approver=approver)
    session = await agent.run(store, "go")
    agent.close()
    bodies = await kit.bodies(store, session.id)
    resolved = kit.of_type(bodies, ApprovalResolved)
    assert [(r.approved, r.decided_by) for r in resolved] == [
        (True, "policy allow Bash(python3 scripts/run.py:*)"),
        (False, "t"),
    ]
    assert asked == ["theirs"]
    assert [r.path for r in kit.of_type(bodies, ApprovalRequested)] == ["scripts/run.py"] * 2


# -- through the CLI ----------------------------------------------------------------


@pytest.fixture
def skillog(kit):  # type: ignore[no-untyped-def]
    def run(*args: str | Path, cwd: Path, config: Path):  # type: ignore[no-untyped-def]
        env = {"SKILLOG_CONFIG": str(config), "HOME": str(cwd)}
        return kit.skillog(*args, cwd=cwd, env=env)

    return run


def two_skills(tmp_path: Path) -> Path:
    for name in ("a", "b"):
        skill = tmp_path / "skills" / name
        (skill / "scripts").mkdir(parents=True)
        (skill / "SKILL.md").write_text(
            f"---\nname: {name}\ndescription: Skill {name}.\n---\nGo.\n"
        )
        (skill / "scripts" / "go.sh").write_text(f"echo {name} ran\n")
    return tmp_path / "skills"


def test_run_records_the_effective_policy_and_resume_keeps_it(tmp_path: Path, skillog) -> None:
    skills = two_skills(tmp_path)
    config = tmp_path / "config.yaml"
    config.write_text(
        "policy:\n  approve: [third-party]\n  sandbox: preferred\n"
        "  profiles:\n    careful:\n      skills: {b: {approve: true}}\n"
    )
    script = tmp_path / "turns.yaml"
    script.write_text(
        "turns:\n"
        "  - tool_calls: [{name: skills.load, arguments: {names: [a, b], mode: add}}]\n"
        "  - tool_calls: [{name: skills.run_script, arguments: {skill: b, path: scripts/go.sh}}]\n"
        "  - tool_calls: [{name: skills.run_script, arguments: {skill: a, path: scripts/go.sh}}]\n"
        "  - text: all done\n"
    )
    db = tmp_path / "log.db"
    common = ("--model", f"scripted:{script}", "--skills", skills, "--db", db)
    first = skillog(
        "run", "go", *common, "--policy-profile", "careful",
        "--policy", "script_limits.cpu_s=30", cwd=tmp_path, config=config,
    )  # fmt: skip
    assert first.returncode == 0, first.stderr
    assert "waiting for approval" in first.stdout  # b needs one: the profile says so
    sid = json.loads(skillog("sessions", "--db", db, "--json", cwd=tmp_path, config=config).stdout)
    sid = sid["session"]
    recorded = skillog(
        "policy", "--session", sid, "--db", db, "--json", cwd=tmp_path, config=config
    )
    expected = skillog(
        "policy", "--policy-profile", "careful", "--policy", "script_limits.cpu_s=30", "--json",
        cwd=tmp_path, config=config,
    )  # fmt: skip
    assert recorded.returncode == 0 and recorded.stdout == expected.stdout
    assert json.loads(recorded.stdout)["skills"] == {"b": {"approve": True}}

    # The configuration changes: every script would need an approval now.
    config.write_text("policy:\n  approve: [builtin, org, user, third-party]\n")
    refused = skillog(
        "resume", sid, "--db", db, "--policy", "approve=[]", cwd=tmp_path, config=config
    )
    assert refused.returncode == 2 and "keeps the policy recorded" in refused.stderr
    (pending,) = [
        json.loads(line)
        for line in skillog(
            "approvals", "--db", db, "--json", cwd=tmp_path, config=config
        ).stdout.splitlines()
    ]
    assert (pending["skill"], pending["path"], pending["args"]) == ("b", "scripts/go.sh", [])
    ok = skillog("approve", sid, pending["call_id"], "--db", db, cwd=tmp_path, config=config)
    assert ok.returncode == 0, ok.stderr
    done = skillog("resume", sid, "--db", db, cwd=tmp_path, config=config)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "all done" in done.stdout
    # a's script ran under the recorded policy (no approval), not today's configuration.
    bodies = trio.run(read_log, db, sid)
    assert [r.skill for r in bodies if isinstance(r, ApprovalRequested)] == ["b"]
    assert [r.skill for r in bodies if isinstance(r, ScriptExecuted)] == ["b", "a"]


async def read_log(db: Path, sid: str) -> list[Event]:
    async with open_sqlite_store(db, readonly=True) as store:
        return [CODEC.decode(e) async for e in store.read(sid)]


def test_a_bad_policy_stops_run_before_anything_is_recorded(tmp_path: Path, skillog) -> None:
    config = tmp_path / "config.yaml"
    config.write_text("policy:\n  netwrok: [user]\n")
    db = tmp_path / "log.db"
    out = skillog(
        "run",
        "go",
        "--model",
        "scripted:/nonexistent.yaml",
        "--db",
        db,
        cwd=tmp_path,
        config=config,
    )
    assert out.returncode == 2
    assert "unknown key 'policy.netwrok'; did you mean 'network'?" in out.stderr
    assert out.stderr.count("\n") == 1 and not db.exists()


def test_submit_and_serve_take_the_same_policy_options(tmp_path: Path, skillog) -> None:
    config = tmp_path / "config.yaml"
    config.write_text("policy:\n  profiles:\n    ci: {approve: [], budget: {wall_ms: 60000}}\n")
    script = tmp_path / "turns.yaml"
    script.write_text("turns:\n  - text: hi\n")
    db = tmp_path / "log.db"
    queued = skillog(
        "submit", "t", "--model", f"scripted:{script}", "--db", db,
        "--policy-profile", "ci", "--policy", "network=[org]", cwd=tmp_path, config=config,
    )  # fmt: skip
    assert queued.returncode == 0, queued.stderr
    sid = queued.stdout.strip()
    shown = skillog("policy", "--session", sid, "--db", db, "--json", cwd=tmp_path, config=config)
    policy = json.loads(shown.stdout)
    assert (policy["approve"], policy["network"], policy["budget"]["wall_ms"]) == (
        [],
        ["org"],
        60000,
    )
    # serve reads the policy once, at start: a mistake stops it before it listens.
    bad = skillog("serve", "--db", db, "--policy", "aprove=[]", cwd=tmp_path, config=config)
    assert bad.returncode == 2 and "did you mean 'approve'?" in bad.stderr


def test_serve_gives_its_submissions_the_policy_of_its_options(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from orchestrator.cli._main import _parser
    from orchestrator.cli._serve import build, use_demo_default

    config = tmp_path / "config.yaml"
    config.write_text("policy:\n  script_timeout_ms: 5000\n")
    monkeypatch.setenv("SKILLOG_CONFIG", str(config))
    parser, _ = _parser("serve")
    args = parser.parse_args(["serve", "--policy", "skills.greet.network=true", "--workers", "0"])
    use_demo_default(args)
    ctx, _ = build(MemoryStore(), args)
    agent = ctx.make_agent(args.model[0])
    assert agent.policy.script_timeout_ms == 5000
    assert agent.policy.skills == {"greet": PolicyOverride(network=True)}
    agent.close()


async def test_a_skill_override_reaches_reads_and_result_caps(kit, store, make_skill) -> None:
    big = make_skill("big", files={"references/a/b.md": "x" * 5000})
    policy = PolicyConfig(
        read_max_bytes=100, skills={"big": PolicyOverride(nested_paths=True, read_max_bytes=10_000)}
    )
    small = make_skill("small", files={"references/a/b.md": "x" * 5000})
    turns = [
        kit.turn(kit.call("skills.load", names=["big", "small"], mode="add")),
        kit.turn(kit.call("skills.read", skill="big", path="references/a/b.md")),
        kit.turn(kit.call("skills.read", skill="small", path="references/a/b.md")),
    ]
    agent = kit.agent(turns, [big, small], policy=policy)
    session = await agent.run(store, "read")
    bodies = await kit.bodies(store, session.id)
    results = [b for b in bodies if type(b).__name__ == "ToolCompleted"]
    assert results[1].content == "x" * 5000
    assert results[2].error_type == "path_refused"  # small: one level deep, as by default


def test_the_terminal_approver_offers_once_skill_and_pattern() -> None:
    from orchestrator import ApprovalRequest
    from orchestrator.cli._prompts import Terminal
    from orchestrator.cli._session import cli_approver

    typed, into = os.pipe()
    request = ApprovalRequest(
        session_id="s", call_id="c", tool="skills.run_script", action="run scripts/x.py a",
        skill="pdf", tier="user", path="scripts/x.py", args=("a",), skill_hash="h",
    )  # fmt: skip
    host = ApprovalRequest(session_id="s", call_id="d", tool="send", action="call send")
    approver = cli_approver(False, False, Terminal(typed))
    assert approver is not None
    for answer, asked, expected in [
        ("y", request, (True, None)),
        ("s", request, (True, "skill")),
        ("p", request, (True, "pattern:Bash(scripts/x.py:*)")),
        ("s", host, (True, "pattern:send")),
        ("", request, (False, None)),
    ]:
        os.write(into, f"{answer}\n".encode())
        decision = trio.run(approver, asked)
        assert (decision.approved, decision.remember) == expected, answer
    os.close(typed)
    os.close(into)


@pytest.mark.parametrize(
    ("text", "sets", "sandbox"),
    [
        ("policy: {sandbox: off}\n", [], "off"),  # YAML 1.1 reads `off` as false
        ("policy:\n  sandbox: no\n", [], "off"),
        ("policy:\n  sandbox: 'OFF'\n", [], "off"),
        ("policy:\n  sandbox: on\n", [], "required"),
        ("", ["sandbox=off"], "off"),
        ("", ["sandbox=false"], "off"),
        ("", ["sandbox=yes"], "required"),
        ("", ["sandbox=preferred"], "preferred"),
    ],
)
def test_the_yes_and_no_words_people_write_are_read_as_the_enum_means(
    tmp_path: Path, text: str, sets: list[str], sandbox: str
) -> None:
    assert load_policy(write(tmp_path, text), sets=sets).sandbox == sandbox


def test_an_override_sandbox_off_is_off_too(tmp_path: Path) -> None:
    path = write(tmp_path, "policy:\n  skills:\n    pdf: {sandbox: off}\n")
    policy = load_policy(path, sets=["tiers.user.sandbox=no"])
    assert policy.skills["pdf"].sandbox == "off"
    assert policy.tiers["user"].sandbox == "off"
