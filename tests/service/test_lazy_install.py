"""Lazy install through the service (``policy.lazy_install: ask``): the worker's session
suspends on the install approval, the console's card says what will be installed, an
approver approves over HTTP, the worker resumes the session, builds the skill's own
environment from the package index (a real, small package, as
tests/orchestrator/skills/test_lazy_install.py) and runs the script in it."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from orchestrator._events import CODEC, ScriptExecuted, SkillEnvBuilt, ToolCompleted
from orchestrator.scripts import sandbox_available
from orchestrator.skills import env_state

from .conftest import Service, running_service
from .test_api import wait_for

REQ = "tabulate==0.9.0"
TURNS = """\
turns:
  - tool_calls: [{name: skills.load, arguments: {names: [tab]}}]
  - tool_calls: [{name: skills.run_script, arguments: {path: scripts/t.py}}]
  - text: "done"
"""


def write_tab(root: Path) -> Path:
    d = root / "skills" / "tab"
    (d / "scripts").mkdir(parents=True)
    (d / "SKILL.md").write_text(
        f'---\nname: tab\ndescription: Tables.\nmetadata:\n  requires: "python:{REQ}"\n---\n'
        "Run scripts/t.py\n"
    )
    (d / "scripts" / "t.py").write_text(
        "import tabulate\nprint('tabulate', tabulate.__version__)\n"
    )
    return d


@pytest.fixture
async def service(
    tmp_path: Path, service_env: tuple[Path, dict[str, str]], monkeypatch: pytest.MonkeyPatch
) -> AsyncIterator[Service]:
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "data"))  # the skills' environments
    config, tokens = service_env
    sandbox = "required" if sandbox_available() else "preferred"
    policy = ["--policy", "lazy_install=ask", "--policy", f"sandbox={sandbox}"]
    async with running_service(
        tmp_path, config, tokens, *policy, turns=TURNS, skill=write_tab(tmp_path)
    ) as service:
        yield service


async def test_the_install_is_approved_over_http_and_the_worker_installs_and_runs(
    service: Service,
) -> None:
    async with service.client("sam") as client:
        response = await client.post("/api/sessions", json={"task": "table"})
    assert response.status_code == 201, response.text
    session = str(response.json()["session_id"])
    view = await wait_for(service, session, "awaiting_approval")
    [pending] = view["pending_approvals"]  # type: ignore[misc]
    assert pending["install"] == [REQ] and pending["action"].startswith(f"install {REQ}")
    assert env_state([REQ]).record is None  # nothing installed before the answer

    async with service.client(None) as browser:
        await browser.post("/api/login", json={"token": service.tokens["april"]})
        card = (await browser.get("/console/approvals")).text
    installs = card.partition("<dt>installs</dt>")[2].partition("</dd>")[0]
    assert REQ in installs and "skill tab's own environment" in installs
    assert "network for the installer only" in installs

    async with service.client("april") as client:
        url = f"/api/sessions/{session}/approvals/{pending['call_id']}/approve"
        ok = await client.post(url, json={"reason": "tabulate is fine"})
    assert ok.status_code == 200, ok.text
    view = await wait_for(service, session, "ended")
    assert view["ended_reason"] == "completed"

    bodies = [CODEC.decode(e) async for e in service.store.read(session)]
    [built] = [b for b in bodies if isinstance(b, SkillEnvBuilt)]
    [ran] = [b for b in bodies if isinstance(b, ScriptExecuted)]
    assert built.call_id == pending["call_id"] and REQ in built.lock
    assert bodies.index(built) < bodies.index(ran)  # installed, then the script ran in it
    assert ran.env == built.key and ran.exit_code == 0, ran.refused
    [out] = [b for b in bodies if isinstance(b, ToolCompleted) and b.tool == "skills.run_script"]
    assert "tabulate 0.9.0" in out.content
    async with service.client("victor") as client:
        verified = (await client.get(f"/api/sessions/{session}/verify")).json()
    assert verified["ok"] is True, verified
