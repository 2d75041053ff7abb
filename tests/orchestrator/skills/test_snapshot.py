"""Snapshots: a skill into the log's blob store and back, without a filesystem."""

from __future__ import annotations

from pathlib import Path

import pytest

from eventlog import MemoryStore
from orchestrator.skills import (
    InlineSkill,
    ManifestError,
    SkillChangedError,
    SkillManifest,
    Tier,
    load_skill,
    read_manifest_file,
    skill_from_manifest,
    snapshot_skill,
)


def write(root: Path) -> Path:
    (root / "scripts").mkdir(parents=True)
    (root / "SKILL.md").write_text("---\nname: demo\ndescription: d\n---\nbody\n")
    (root / "scripts" / "run.sh").write_text("#!/bin/sh\n")
    (root / "scripts" / "run.sh").chmod(0o755)
    return root


async def test_snapshot_and_rebuild(tmp_path: Path) -> None:
    store = MemoryStore()
    skill = load_skill(write(tmp_path / "demo"), tier=Tier.USER, source="t")
    manifest = await snapshot_skill(store, skill)
    assert manifest.hash == skill.hash
    assert [(e.path, e.executable) for e in manifest.entries] == [
        ("SKILL.md", False),
        ("scripts/run.sh", True),
    ]
    rebuilt = await skill_from_manifest(manifest, store.get_blob, tier=Tier.USER, source="t")
    assert (rebuilt.name, rebuilt.body, rebuilt.hash, rebuilt.root) == (
        "demo",
        "body\n",
        skill.hash,
        None,
    )
    assert await read_manifest_file(manifest, "scripts/run.sh", store.get_blob) == b"#!/bin/sh\n"
    with pytest.raises(ManifestError, match="no file"):
        await read_manifest_file(manifest, "../etc/passwd", store.get_blob)


async def test_snapshot_inline() -> None:
    store = MemoryStore()
    inline = InlineSkill(name="inl", description="d", body="B\n")
    manifest = await snapshot_skill(store, inline)
    rebuilt = await skill_from_manifest(
        manifest, store.get_blob, tier=Tier.BUILTIN, source="inline"
    )
    assert rebuilt.hash == inline.to_skill().hash and rebuilt.body == "B\n"


async def test_snapshot_refuses_a_skill_changed_since_loading(tmp_path: Path) -> None:
    root = write(tmp_path / "demo")
    skill = load_skill(root, tier=Tier.USER, source="t")
    (root / "scripts" / "run.sh").write_text("#!/bin/sh\nrm -rf /\n")
    with pytest.raises(SkillChangedError, match="changed on disk"):
        await snapshot_skill(MemoryStore(), skill)


async def test_tampered_manifest_or_blob_is_detected(tmp_path: Path) -> None:
    store = MemoryStore()
    skill = load_skill(write(tmp_path / "demo"), tier=Tier.USER, source="t")
    manifest = await snapshot_skill(store, skill)
    forged = SkillManifest(entries=manifest.entries[:1], hash=manifest.hash)
    with pytest.raises(ManifestError, match="damaged"):
        await skill_from_manifest(forged, store.get_blob, tier=Tier.USER, source="t")

    async def wrong_blob(digest: str) -> bytes:
        return b"not it"

    with pytest.raises(ManifestError, match="does not match"):
        await skill_from_manifest(manifest, wrong_blob, tier=Tier.USER, source="t")
