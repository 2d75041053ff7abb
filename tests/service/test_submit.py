"""A submission chooses among what the operator offers: a subset of the server's skills
and one of its policy presets. Both are recorded in the session's start, and the
worker enforces what was recorded, not its own configuration."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from orchestrator._events import CODEC, CatalogSnapshot, PolicyConfig, SessionStarted
from orchestrator.service._submission import NOT_SELECTED

from .conftest import Service, running_service
from .test_api import wait_for

TRUSTING = PolicyConfig(approve=())


@pytest.fixture
async def service(
    tmp_path: Path, service_env: tuple[Path, dict[str, str]]
) -> AsyncIterator[Service]:
    config, tokens = service_env
    presets = {"default": PolicyConfig(), "trusting": TRUSTING}
    async with running_service(tmp_path, config, tokens, policies=presets) as service:
        yield service


async def submit(service: Service, **body: object) -> dict[str, object]:
    async with service.client("sam") as client:
        response = await client.post("/api/sessions", json={"task": "greet me", **body})
    assert response.status_code == 201, response.text
    return response.json()  # type: ignore[no-any-return]


async def start_of(service: Service, session: str) -> tuple[SessionStarted, CatalogSnapshot]:
    bodies = [CODEC.decode(e) async for e in service.store.read(session, to_seq=2)]
    started, catalog = bodies
    assert isinstance(started, SessionStarted) and isinstance(catalog, CatalogSnapshot)
    return started, catalog


async def test_a_policy_preset_is_recorded_and_enforced(service: Service) -> None:
    default = await submit(service)
    assert default["policy"] == "default" and default["skills"] == ["greet"]
    await wait_for(service, str(default["session_id"]), "awaiting_approval")
    chosen = await submit(service, policy="trusting")
    assert chosen["policy"] == "trusting"
    session = str(chosen["session_id"])
    # The worker's own agent has the default policy; the recorded one decides: the
    # user-tier script runs without an approval.
    view = await wait_for(service, session, "ended")
    assert view["ended_reason"] == "completed"
    started, _ = await start_of(service, session)
    assert started.policy == TRUSTING
    types = [e.type async for e in service.store.read(session)]
    assert "script.executed" in types and "approval.requested" not in types


async def test_a_skill_subset_is_the_catalog_and_the_rest_is_hidden(service: Service) -> None:
    out = await submit(service, skills=[])
    assert out["skills"] == []
    session = str(out["session_id"])
    view = await wait_for(service, session, "ended")
    assert view["catalog"] == []
    _, catalog = await start_of(service, session)
    assert catalog.skills == () and ("greet", NOT_SELECTED) in catalog.hidden
    # The worker has greet; the session has no skills, so not even the skill tools.
    results = [e.body async for e in service.store.read(session) if e.type == "tool.completed"]
    assert b"no tool named 'skills.load'" in results[0]
    assert not [e async for e in service.store.read(session) if e.type == "script.started"]


async def test_unknown_choices_name_the_field_and_the_valid_names(service: Service) -> None:
    async with service.client("sam") as client:
        skill = await client.post("/api/sessions", json={"task": "x", "skills": ["nope"]})
        policy = await client.post("/api/sessions", json={"task": "x", "policy": "lax"})
    assert skill.status_code == policy.status_code == 422
    assert skill.json()["field"] == "$.skills" and "offers: greet" in skill.json()["error"]
    assert policy.json()["field"] == "$.policy"
    assert "one of: default, trusting" in policy.json()["error"]
    assert await service.store.streams() == []


def test_the_presets_are_the_servers_policy_then_the_configurations_profiles(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """What ``skillog serve`` offers: ``default`` is the policy serve resolved; each
    profile of ``policy.profiles`` follows by name, with the ``--policy`` settings."""
    import argparse

    from orchestrator.cli._serve import policy_presets

    config = tmp_path / "config.yaml"
    config.write_text(
        "policy:\n"
        "  approve: [third-party]\n"
        "  profiles:\n"
        "    trusting: {approve: []}\n"
        "    strict: {approve: [user, third-party], network: []}\n"
    )
    monkeypatch.setenv("SKILLOG_CONFIG", str(config))
    served = PolicyConfig(approve=("user",))
    args = argparse.Namespace(policy=["script_timeout_ms=1234"])
    presets = policy_presets(args, served)
    assert list(presets) == ["default", "trusting", "strict"]
    assert presets["default"] is served
    assert presets["trusting"].approve == () and presets["strict"].approve == (
        "user",
        "third-party",
    )
    assert presets["trusting"].script_timeout_ms == 1234  # --policy over the profile


async def test_a_configuration_edit_is_recorded_by_the_next_submission(
    service: Service,
) -> None:
    """The server keeps what it parsed of the configuration, keyed by the file's text:
    each submission records what the file says at that moment."""
    import os

    first = await submit(service)
    started, _ = await start_of(service, str(first["session_id"]))
    assert started.context_window == 0 and started.compact_catalog_over == 50
    text = service.config.read_text()
    stat = service.config.stat()
    edited = text + "model:\n  context_window: 4321\nskills:\n  compact_catalog_over: 7\n"
    service.config.write_text(edited)
    os.utime(service.config, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    second = await submit(service)
    started, _ = await start_of(service, str(second["session_id"]))
    assert started.context_window == 4321 and started.compact_catalog_over == 7
    service.config.write_text(text)
    third = await submit(service)
    started, _ = await start_of(service, str(third["session_id"]))
    assert started.context_window == 0 and started.compact_catalog_over == 50
