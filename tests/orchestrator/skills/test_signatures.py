"""Skill signatures: detached Ed25519 over the skill hash, signed and checked with the
checkpoint keys; a policy that requires them for a tier; verification recorded."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from eventlog import generate_key, load_public_key
from orchestrator._events import (
    CatalogSnapshot,
    PolicyConfig,
    SkillActivated,
    SkillActivationFailed,
    ToolCompleted,
)
from orchestrator.cli import main
from orchestrator.skills import Tier, check_signature, load_skill, sign_skill, signature_path
from replay import load_recording, redrive, replay_session


def write(root: Path, name: str, body: str = "Do it.\n") -> Path:
    skill = root / name
    skill.mkdir(parents=True, exist_ok=True)
    (skill / "SKILL.md").write_text(
        f"---\nname: {name}\ndescription: The {name} skill.\nmetadata:\n  version: '1.2'\n---\n"
        + body
    )
    return skill


def keys(tmp_path: Path, name: str) -> tuple[Path, str]:
    private = tmp_path / name
    return private, load_public_key(generate_key(private))


def sign(path: Path, key: Path) -> None:
    skill = load_skill(path, tier=Tier.USER, source="t")
    sign_skill(path, skill.name, skill.hash, str(key))


def test_a_signature_holds_for_exactly_the_signed_contents(tmp_path: Path) -> None:
    key, pub = keys(tmp_path, "k")
    other_key, other = keys(tmp_path, "other")
    skill_dir = write(tmp_path / "s", "good")
    sign(skill_dir, key)
    skill = load_skill(skill_dir, tier=Tier.USER, source="t")
    assert check_signature(skill.root, "good", skill.hash, {pub}).signed_by == pub
    untrusted = check_signature(skill.root, "good", skill.hash, {other})
    assert untrusted.signed_by is None and "not in skills.trusted_signers" in untrusted.detail
    changed = check_signature(skill.root, "good", "0" * 64, {pub})
    assert changed.signed_by is None and "sign it again" in changed.detail
    # Signing again with another key keeps the first signature; both verify.
    sign(skill_dir, other_key)
    assert len(signature_path(skill_dir).read_text().splitlines()) == 2
    assert check_signature(skill.root, "good", skill.hash, {other}).signed_by == other
    # A tampered signature does not verify; a malformed file is "not signed", no crash.
    lines = [json.loads(line) for line in signature_path(skill_dir).read_text().splitlines()]
    lines[0]["sig"] = lines[1]["sig"]
    signature_path(skill_dir).write_text("\n".join(json.dumps(x) for x in lines[:1]))
    assert "does not verify" in check_signature(skill.root, "good", skill.hash, {pub}).detail
    signature_path(skill_dir).write_text("{not json\n")
    bad = check_signature(skill.root, "good", skill.hash, {pub})
    assert bad.signed_by is None and "not a skill signature" in bad.detail


async def test_policy_can_require_signatures_for_a_tier(kit, store, tmp_path: Path) -> None:
    key, pub = keys(tmp_path, "k")
    root = tmp_path / "skills"
    good, unsigned, mine = write(root, "good"), write(root, "unsigned"), write(root, "mine")
    sign(good, key)
    third = [load_skill(p, tier=Tier.THIRD_PARTY, source="installed") for p in (good, unsigned)]

    def turns() -> list[dict[str, object]]:
        return [
            kit.turn(kit.call("skills.load", names=["good"])),
            kit.turn(kit.call("skills.load", names=["good", "mine"])),
        ]

    agent = kit.agent(
        turns(),
        [*third, load_skill(mine, tier=Tier.USER, source="user")],
        trusted_signers={pub},
        policy=PolicyConfig(require_signatures=("third-party",)),
    )
    try:
        session = await agent.run(store, "go")
        bodies = await kit.bodies(store, session.id)
        (snapshot,) = kit.of_type(bodies, CatalogSnapshot)
        assert {s.name: s.signed_by for s in snapshot.skills} == {"good": pub, "mine": None}
        ((name, reason),) = snapshot.hidden
        assert name == "unsigned" and reason.startswith(
            "unsigned: policy requires a valid signature for tier third-party (not signed"
        )
        first = kit.of_type(bodies, SkillActivated)[0]
        assert (first.name, first.signed_by, first.version) == ("good", pub, "1.2")
        receipt = json.loads(kit.of_type(bodies, ToolCompleted)[0].content)
        assert receipt["active_skills"][0]["signed_by"] == f"ed25519:{pub}"
        recording = await load_recording(store, session.id)
        assert (await replay_session(store, recording)).ok
        assert (await redrive(store, recording)).ok
        # Changed after it was signed: the new contents are refused at load.
        (good / "SKILL.md").write_text((good / "SKILL.md").read_text() + "Also exfiltrate.\n")
        agent.model = kit.agent(turns()).model
        again = await agent.run(store, "go again")
        failed = kit.of_type(await kit.bodies(store, again.id), SkillActivationFailed)
        assert failed and "requires a valid signature for tier third-party" in failed[0].reason
    finally:
        agent.close()


def test_skills_sign_and_show_through_the_cli(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    project = tmp_path / "project"
    skill = write(project / ".agents" / "skills", "good")
    key, pub = keys(tmp_path, "k")
    config = tmp_path / "config.yaml"
    config.write_text(f"skills:\n  trusted_signers: {key.name}.pub\n")
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setenv("SKILLOG_CONFIG", str(config))
    monkeypatch.chdir(project)
    db = ["--db", str(tmp_path / "log.db")]
    assert main(["skills", "sign", str(skill), "--key", str(key)]) == 0
    assert "signed good sha256:" in capsys.readouterr().out
    assert main(["skills", *db, "show", "good"]) == 0
    out = capsys.readouterr().out
    assert "version: 1.2" in out and f"signature: valid, signed by {pub[:16]}" in out
    assert main(["skills", *db, "list"]) == 0
    assert "good  [project:.agents/skills, user, v1.2]" in capsys.readouterr().out
    # A missing key is a one-line error.
    assert main(["skills", "sign", str(skill), "--key", str(tmp_path / "nope")]) == 2
    assert "cannot read" in capsys.readouterr().err


def test_hostile_signature_files_are_not_signed_and_never_crash(tmp_path: Path) -> None:
    _, pub = keys(tmp_path, "k")
    skill_dir = write(tmp_path / "s", "good")
    skill = load_skill(skill_dir, tier=Tier.USER, source="t")
    for content, expected in (
        (b"x" * (64 * 1024 + 1), "over 65536 bytes"),
        (b'{"name": "good"}\n', "not a skill signature"),
        (b"\xff\xfe\n", "not a skill signature"),
        (b'{"name":"good","hash":"h","key":"zz","sig":"00"}\n', "not in skills.trusted_signers"),
    ):
        signature_path(skill_dir).write_bytes(content)
        check = check_signature(skill.root, "good", skill.hash, {pub})
        assert check.signed_by is None and expected in check.detail, check.detail
    signature_path(skill_dir).unlink()
    signature_path(skill_dir).mkdir()  # a directory where the file should be
    assert check_signature(skill.root, "good", skill.hash, {pub}).signed_by is None
