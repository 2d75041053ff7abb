"""The golden logs replay and re-drive cleanly; composer or runtime changes made
without regenerating them (tests/golden/regenerate.py) fail here."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import msgspec
import pytest

import orchestrator._prompt
import orchestrator._tools
from eventlog import MemoryStore, NewEvent, import_jsonl, verify
from orchestrator._events import CODEC, ModelResponded, ResourceRead, ToolImages
from orchestrator._grammar import session_grammar
from orchestrator.adapters import RecordedModel
from replay import load_recording, redrive, replay_session
from replay._compare import in_call_order

GOLDEN = Path(__file__).parents[1] / "golden"
NAMES = ["demo", "lifecycle", "approvals", "cancelled"]
V01 = GOLDEN / "v0.1"
"""Logs written by skillog 0.1, before write-ahead: kept to prove old logs still
verify, replay and resume."""
Cli = Callable[..., tuple[int, str, str]]


@pytest.mark.parametrize("name", NAMES)
def test_golden_logs_replay_and_redrive_from_the_cli(cli: Cli, name: str) -> None:
    code, out, err = cli(
        "replay", f"golden-{name}", "--jsonl", GOLDEN / f"{name}.jsonl", "--redrive"
    )
    assert (code, err) == (0, "")
    assert "every request reproduced byte for byte" in out
    assert "re-drive: the current code reproduces all" in out
    assert "✗" not in out


V02 = GOLDEN / "v0.2"
"""Logs written before skill versions, receipts with properties, catalog refreshes and
signatures (issue 18): kept to prove they still verify and replay."""


V03 = GOLDEN / "v0.3"
"""Logs written before a cancel's ``session.ended`` said which events the cancel wrote
(``closes``; ``session.started.cancel_rules`` 0): kept to prove they still verify,
replay and re-drive, the cancel's events found as they were then."""


@pytest.mark.parametrize(
    "path",
    [
        V01 / "demo.jsonl",
        V01 / "lifecycle.jsonl",
        *(V02 / f"{n}.jsonl" for n in ("demo", "lifecycle", "approvals")),
        V03 / "cancelled.jsonl",
    ],
)
def test_logs_written_by_earlier_versions_still_verify_and_replay(cli: Cli, path: Path) -> None:
    code, out, err = cli("replay", f"golden-{path.stem}", "--jsonl", path)
    assert (code, err) == (0, "")
    assert "every request reproduced byte for byte" in out and "✗" not in out


def test_a_cancel_recorded_before_its_marker_still_redrives(cli: Cli) -> None:
    code, out, err = cli(
        "replay", "golden-cancelled", "--jsonl", V03 / "cancelled.jsonl", "--redrive"
    )
    assert (code, err) == (0, "")
    assert "re-drive: the current code reproduces all" in out and "✗" not in out


async def test_a_log_written_before_write_ahead_resumes_mid_turn(golden) -> None:  # type: ignore[no-untyped-def]
    """A 0.1 session cut after a model response with tool calls (a 0.1 process died in
    the tool phase, which 0.1 committed only at its end) resumes with today's code."""
    full = MemoryStore()
    await import_jsonl(full, str(V01 / "lifecycle.jsonl"))
    session = "golden-lifecycle"
    events = [e async for e in full.read(session)]
    bodies = [CODEC.decode(e) for e in events]
    cut = next(
        i for i, b in enumerate(bodies) if isinstance(b, ModelResponded) and b.response.tool_calls
    )
    store = MemoryStore()
    blobs = [await full.get_blob(d) async for d in _digests(full)]
    await store.append(
        session,
        [NewEvent(type=e.type, body=e.body, recorded_at=e.recorded_at) for e in events[: cut + 1]],
        expected_seq=0,
        blobs=blobs,
    )
    rest = [b.response for b in bodies[cut + 1 :] if isinstance(b, ModelResponded)]
    agent, _ = golden.lifecycle_agent()
    agent.model = RecordedModel(rest)
    try:
        resumed = await agent.resume(store, session)
    finally:
        agent.close()
    assert resumed.state.status == "ended" and resumed.state.ended.reason == "completed"
    assert (await verify(store, grammar=session_grammar)).ok
    assert (await replay_session(store, await load_recording(store, session))).ok


async def _digests(store: MemoryStore):  # type: ignore[no-untyped-def]
    async for digest, _ in store.read_blobs():
        yield digest


@pytest.mark.parametrize("name", NAMES)
def test_changing_the_base_rules_without_regenerating_fails(
    cli: Cli, name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(orchestrator._prompt, "BASE_RULES", orchestrator._prompt.BASE_RULES + " ")
    code, out, _ = cli("replay", f"golden-{name}", "--jsonl", GOLDEN / f"{name}.jsonl")
    assert code == 1
    assert "first divergence at turn 1" in out and "@@ " in out


async def _golden(name: str) -> tuple[MemoryStore, str]:
    store = MemoryStore()
    await import_jsonl(store, str(GOLDEN / f"{name}.jsonl"))
    return store, f"golden-{name}"


async def test_a_non_deterministic_runtime_change_fails_the_redrive(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    store, session = await _golden("lifecycle")
    recording = await load_recording(store, session)
    real = orchestrator._tools._receipt
    calls = iter(range(10**6))

    def receipt(view: orchestrator._tools.View, *args: object) -> dict[str, object]:
        data = real(view, *args)  # type: ignore[arg-type]
        data["nonce"] = next(calls)  # differs from one run to the next: not derived from the log
        return data

    monkeypatch.setattr(orchestrator._tools, "_receipt", receipt)
    # The recorded prompts still replay (they come from the log) ...
    assert (await replay_session(store, recording)).ok
    # ... but the code no longer produces the recorded events.
    report = await redrive(store, recording)
    assert not report.ok and report.divergence is not None
    d = report.divergence
    assert d.recorded_type == "tool.completed" and d.field == "$.content"
    first_load = next(
        e.seq
        for e, b in zip(recording.events, recording.bodies, strict=True)
        if type(b).__name__ == "ToolCompleted" and b.tool == "skills.load"  # type: ignore[attr-defined]
    )
    assert d.seq == first_load and d.turn == 1
    assert f"seq {d.seq} (turn 1, tool.completed): $.content" in str(d)


async def test_regenerating_reproduces_the_golden_structure(tmp_path: Path, golden) -> None:  # type: ignore[no-untyped-def]
    for name in NAMES:
        await golden.record(name, tmp_path)
        assert _types(tmp_path / f"{name}.jsonl") == _types(GOLDEN / f"{name}.jsonl")


def _types(path: Path) -> list[str]:
    """The event types of an exported session, each turn's tool phase call by call
    (concurrent calls commit their outcomes in the order they finish)."""
    pairs = []
    for line in path.read_bytes().splitlines():
        raw = msgspec.json.decode(line)
        if "type" not in raw:  # the export's header and end lines
            continue
        body = msgspec.json.encode(raw["body"])
        pairs.append(
            (raw["type"], CODEC.decode(NewEvent(type=raw["type"], body=body, recorded_at=0)))
        )
    return [kind for kind, _ in in_call_order(pairs)]  # type: ignore[arg-type]


@pytest.mark.parametrize("name", NAMES)
def test_replay_json_is_the_proof_as_one_document(cli: Cli, name: str) -> None:
    path = GOLDEN / f"{name}.jsonl"
    code, out, err = cli("replay", f"golden-{name}", "--jsonl", path, "--redrive", "--json")
    assert (code, err) == (0, "")
    doc = json.loads(out)
    assert doc["session"] == f"golden-{name}" and doc["ok"] is True
    assert doc["turns"] and all(t["ok"] for t in doc["turns"])
    assert all(t["request_hash"] == t["rerendered_hash"] for t in doc["turns"])
    assert doc["divergence"] is None and doc["redrive"]["divergence"] is None
    assert doc["redrive"]["compared"] == doc["events"]
    assert (doc["fork"], doc["drift"]) == (None, None)


async def test_a_png_read_with_skills_read_is_shown_to_the_model_as_an_image() -> None:
    store, session = await _golden("lifecycle")
    bodies = [CODEC.decode(e) async for e in store.read(session)]
    (read,) = [b for b in bodies if isinstance(b, ResourceRead) and b.path.endswith(".png")]
    (shown,) = [b for b in bodies if isinstance(b, ToolImages)]
    (image,) = shown.images
    assert (shown.call_id, image.media_type) == (read.call_id, "image/png")
    assert image.digest == read.digest  # the skill file's own blob
    recording = await load_recording(store, session)
    assert (await replay_session(store, recording)).ok
