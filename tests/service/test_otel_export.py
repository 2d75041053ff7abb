"""The OTel export trigger: an admin sends an ended session's trace to the backend the
operator configured (a real OTLP/HTTP receiver on loopback); nothing else may."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ..otel.conftest import receiver  # noqa: F401 - the fixture
from .conftest import running_service
from .test_api import submit, wait_for


async def test_export_trigger(
    tmp_path: Path,
    service_env: tuple[Path, dict[str, str]],
    receiver: Any,  # noqa: F811
) -> None:
    config, tokens = service_env
    async with running_service(tmp_path, config, tokens, "--otel-endpoint", receiver.url) as svc:
        session = await submit(svc)
        url = f"/api/sessions/{session}/otel-export"
        async with svc.client("alice") as admin:
            early = await admin.post(url, json={})
            assert early.status_code == 409 and "ended" in early.json()["error"]
        async with svc.client("april") as approver:
            assert (await approver.post(url, json={})).status_code == 403
            view = await wait_for(svc, session, "awaiting_approval")
            call = view["pending_approvals"][0]["call_id"]  # type: ignore[index]
            await approver.post(f"/api/sessions/{session}/approvals/{call}/deny", json={})
        await wait_for(svc, session, "ended")
        async with svc.client("alice") as admin:
            bad = await admin.post(url, json={"endpoint": "http://elsewhere"})
            assert bad.status_code == 422 and bad.json()["field"] == "$.endpoint"
            sent = await admin.post(url, json={})
        assert sent.status_code == 200, sent.text
        assert sent.json()["spans"] == len(receiver.spans) > 0
        assert receiver.paths == ["/v1/traces"]
        assert any(s.name.startswith("invoke_agent") for s in receiver.spans)


async def test_without_an_endpoint_the_trigger_says_so(service: Any) -> None:
    session = await submit(service)
    async with service.client("alice") as admin:
        answer = await admin.post(f"/api/sessions/{session}/otel-export", json={})
    assert answer.status_code == 409 and "--otel-endpoint" in answer.json()["error"]
