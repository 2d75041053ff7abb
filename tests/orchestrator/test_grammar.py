"""The session grammar (orchestrator/_grammar.py) on logs the runtime really wrote.

Valid: the golden sessions (tool calls, scripts, a denied approval, suspend, outside
decisions and resume, a retried model error, logs from skillog 0.1), forks of them,
and the lease stream of a session a fleet worker drove all pass with no violation.
(The crash-point suite checks every log it produces the same way.) Mutated: dropped,
duplicated, moved, forged or appended-after-the-end events that the runtime could not
have written are found, each at its seq with a rule of :data:`RULES`.
"""

from __future__ import annotations

import importlib.util
import itertools
import re
import shutil
import sys
from collections.abc import Sequence
from pathlib import Path
from types import ModuleType

import msgspec
import pytest
import trio
from hypothesis import given, settings
from hypothesis import strategies as st

from eventlog import MemoryStore, NewEvent, import_jsonl
from orchestrator import Agent
from orchestrator._events import (
    CODEC,
    ApprovalRemembered,
    ContextCompacted,
    Event,
    LeaseAcquired,
    SessionEnded,
    SummaryAnswered,
    SummaryRequested,
    ToolCompleted,
)
from orchestrator._fleet import Worker, queue_session
from orchestrator._grammar import RULES, check_stream
from orchestrator.adapters import ScriptedModel
from replay import load_recording
from replay._fork import fork_session

GOLDEN = Path(__file__).parents[1] / "golden"
DOCS = Path(__file__).parents[2] / "docs"
Ev = tuple[int, str, bytes]
Stream = tuple[str, list[Ev]]


def _regenerate() -> ModuleType:
    """tests/golden/regenerate.py (a script): the golden scenarios' agents."""
    spec = importlib.util.spec_from_file_location("golden_regenerate", GOLDEN / "regenerate.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("golden_regenerate", module)
    spec.loader.exec_module(module)
    return module


async def _crash_and_resume(store: MemoryStore, name: str, cut: int) -> None:
    """What a process killed right after seq ``cut`` of a golden session leaves (its
    events up to there), resumed by a new process to its end: at-most-once calls that
    may have run come back as ``tool.interrupted``, approvals pending again suspend."""
    golden = _regenerate()
    original = await load_recording(store, f"golden-{name}")
    crashed = f"crashed-{name}-{cut}"
    copies = [
        NewEvent(type=e.type, body=e.body, recorded_at=e.recorded_at) for e in original.events
    ]
    await store.append(crashed, copies[: cut + 1], expected_seq=0)
    agent, _ = getattr(golden, f"{name}_agent")()
    agent.model = ScriptedModel(agent.model.turns, follow_history=True)
    try:
        await agent.resume(store, crashed)
        if name == "approvals":  # suspended again: decided from outside, then resumed
            await golden.decide_then_resume(agent, store, crashed)
    finally:
        agent.close()


async def _corpus() -> list[Stream]:
    """The golden sessions (and 0.1's), forks of them, a fork of a fork, golden sessions
    crashed at a few points and resumed, and a session queued for the fleet and driven
    by a worker (its lease stream)."""
    store = MemoryStore()
    for path in GOLDEN.glob("*.jsonl"):
        await import_jsonl(store, str(path))
    streams: list[Stream] = []
    for path in (GOLDEN / "v0.1").glob("*.jsonl"):
        await import_jsonl(old := MemoryStore(), str(path))
        streams += await _streams(old, "v0.1-")
    approvals = await load_recording(store, "golden-approvals")
    lifecycle = await load_recording(store, "golden-lifecycle")
    for recording, at in ((approvals, 14), (approvals, 16), (lifecycle, len(lifecycle) - 1)):
        await fork_session(store, recording, at, session_id=f"fork-{recording.session}-{at}")
    twice = await load_recording(store, "fork-golden-approvals-14")
    await fork_session(store, twice, 12, session_id="fork-of-fork")
    for name, cut in (("lifecycle", 28), ("lifecycle", 29), ("approvals", 12)):
        await _crash_and_resume(store, name, cut)
    agent = Agent(
        model=ScriptedModel([{"tool_calls": [{"name": "skills.list"}]}, {"text": "done"}]),
        model_name="m",
    )
    await queue_session(store, agent, "go", session_id="fleet-1")
    await Worker(store, lambda started: agent, name="w1", poll_ms=10).run(trio.Event(), once=True)
    return streams + await _streams(store, "")


async def _streams(store: MemoryStore, prefix: str) -> list[Stream]:
    out = []
    for info in await store.streams():
        events = [(e.seq, e.type, e.body) async for e in store.read(info.stream)]
        out.append((prefix + info.stream, events))
    return out


CORPUS = trio.run(_corpus)
SESSIONS = [s for s in CORPUS if not s[0].startswith("lease/")]


def violations(stream: str, events: Sequence[tuple[str, bytes]]) -> list[str]:
    """The rules broken by ``events`` (renumbered from seq 0, as a chain would be)."""
    checked = [(seq, type_, body) for seq, (type_, body) in enumerate(events)]
    return [v.rule for v in check_stream(stream, checked)]


def plain(events: list[Ev]) -> list[tuple[str, bytes]]:
    return [(t, b) for _, t, b in events]


def tag(event: tuple[str, bytes]) -> str:
    return event[0]


def call_ids(event: tuple[str, bytes]) -> set[str]:
    body = msgspec.json.decode(event[1])
    ids = set(body.get("call_ids", ()))
    if body.get("call_id"):
        ids.add(body["call_id"])
    return ids


def encoded(body: Event) -> tuple[str, bytes]:
    new = CODEC.encode(body, recorded_at=0)
    return new.type, new.body


# -- what the runtime writes passes ------------------------------------------------------


def test_the_corpus_covers_what_the_runtime_writes() -> None:
    names = {name for name, _ in CORPUS}
    assert {"golden-approvals", "v0.1-golden-lifecycle", "fork-of-fork"} <= names
    assert "lease/fleet-1" in names
    kinds = {t for _, events in CORPUS for _, t, _ in events}
    for seen in (
        "session.forked",
        "session.suspended",
        "approval.resolved",
        "policy.denied",
        "script.executed",
        "model.failed",
        "lease.acquired",
        "lease.released",
    ):
        assert seen in kinds, seen


@pytest.mark.parametrize("stream", CORPUS, ids=[name for name, _ in CORPUS])
def test_every_recorded_stream_is_in_its_grammar(stream: Stream) -> None:
    name, events = stream
    assert list(check_stream(name, events)) == []


def test_a_stream_another_program_wrote_is_not_checked() -> None:
    assert violations("other", [("app.thing", b"{}"), ("tool.completed", b"{}")]) == []


# -- each rule, on a real session ----------------------------------------------------------


def _golden(name: str) -> list[tuple[str, bytes]]:
    return plain(next(events for stream, events in CORPUS if stream == name))


def _at(events: list[tuple[str, bytes]], type_: str, nth: int = 0) -> int:
    return [i for i, e in enumerate(events) if tag(e) == type_][nth]


FORGED_COMPLETION = encoded(
    ToolCompleted(call_id="call_9_9", tool="send_email", is_error=False, content="", duration_ms=0)
)


COMPACTED = encoded(
    ContextCompacted(
        step="tool_results",
        reason="budget",
        replaced=(),
        tokens_before=2,
        tokens_after=1,
        budget=2,
        threshold=1,
    )
)

SUMMARY_ASKED = encoded(
    SummaryRequested(
        dropped=2, request_hash="0" * 64, reason="budget", tokens_before=2, budget=2, threshold=1
    )
)
SUMMARY_ANSWERED = encoded(SummaryAnswered(error="boom"))

NEVER_STARTED = encoded(
    ToolCompleted(call_id="call_0_0", tool="skills.load", is_error=True, content="cancelled",
                  duration_ms=0, error_type="cancelled")
)  # fmt: skip
CANCEL_END = encoded(SessionEnded(reason="cancelled", turns=1, error="cancelled by sam"))
CANCEL_END_CLOSING = encoded(  # closes: the never-started close before it is the cancel's
    SessionEnded(reason="cancelled", turns=1, error="cancelled by sam", closes=1)
)
CANCEL_END_CLOSING_NONE = encoded(  # leaves the cancel's never-started close out
    SessionEnded(reason="cancelled", turns=1, error="cancelled by sam", closes=0)
)


def _mutations() -> dict[str, tuple[str, list[tuple[str, bytes]]]]:
    """One mutation of a golden session per rule: rule -> (stream, events)."""
    a = _golden("golden-approvals")
    life = _golden("golden-lifecycle")
    demo = _golden("golden-demo")
    start = a[0]
    lease = encoded(LeaseAcquired(session="x", worker="w", until=1))

    def without(events: list[tuple[str, bytes]], i: int) -> list[tuple[str, bytes]]:
        return events[:i] + events[i + 1 :]

    def body(events: list[tuple[str, bytes]], i: int, old: bytes, new: bytes) -> list:  # type: ignore[type-arg]
        assert old in events[i][1], events[i][1]
        return [*events[:i], (events[i][0], events[i][1].replace(old, new)), *events[i + 1 :]]

    responded = _at(a, "model.responded", 1)
    return {
        "unknown_type": ("s", [*a[:3], ("tool.teleported", b"{}")]),
        "malformed_body": ("s", body(a, 5, b'"call_id":"call_0_0"', b'"call_id":7')),
        "wrong_stream": ("s", [*a[:3], lease]),
        "not_started": ("s", [FORGED_COMPLETION]),
        "second_start": ("s", [*a[:3], start]),
        "fork_after_start": ("s", [*a[:3], encoded_fork()]),
        "catalog_misplaced": ("s", [*a[:3], a[1]]),
        "after_end": ("s", [*a, FORGED_COMPLETION]),
        "prompt_unanswered": ("s", [*a[:4], a[3]]),
        "prompt_before_results": ("s", [*a[:6], a[8]]),
        "response_without_prompt": ("s", without(a, 3)),
        "turn_order": ("s", body(a, 3, b'"turn":1', b'"turn":2')),
        "response_duplicate_ids": ("s", body(a, responded, b'"call_1_1"', b'"call_1_0"')),
        "call_not_requested": ("s", body(a, 5, b'"call_0_0"', b'"call_7_7"')),
        "duplicate_call": ("s", [*a[:6], a[5]]),
        "event_before_call": ("s", without(a, 5)),
        "after_outcome": ("s", [*a[:8], a[6]]),
        "approval_repeated": ("s", [*a[:13], a[12]]),
        "approval_after_effect": ("s", [*life[:56], life[58], life[56]]),
        "decision_without_request": ("s", without(life, 56)),
        "remember_without_approval": (
            "s",
            [*a[:6], encoded(ApprovalRemembered(call_id="call_0_0", scope="skill", skill="x"))],
        ),
        "effect_before_approval": ("s", without(a, 16)),
        "effect_after_denial": ("s", body(life, 59, b'"is_error":true', b'"is_error":false')),
        "suspend_without_pending": ("s", body(a, 14, b'"call_1_0"', b'"call_0_0"')),
        "compaction_misplaced": ("s", [*a[:4], COMPACTED]),
        "summary_misplaced": ("s", [*a[:3], SUMMARY_ASKED, SUMMARY_ASKED]),
        "summary_unanswered": ("s", [*a[:3], SUMMARY_ASKED, a[3]]),
        "answer_without_summary": ("s", [*a[:3], SUMMARY_ANSWERED]),
        "cancel_not_ending": ("s", [*a[:5], NEVER_STARTED, a[5]]),
        "cancel_marker": ("s", [*a[:5], NEVER_STARTED, CANCEL_END_CLOSING_NONE]),
        "end_with_open_calls": ("s", [*demo[:6], demo[-1]]),
        "end_reason": ("s", without(demo, len(demo) - 2)),
        "lease_start": ("lease/x", [encoded_release("done")]),
        "lease_wrong_session": ("lease/y", [lease]),
        "lease_not_held": ("lease/x", [lease, encoded_release("ended", worker="other")]),
        "lease_queued_late": ("lease/x", [lease, encoded_release("queued", worker="w")]),
        "webhook_wrong_delivery": ("webhook/d", [sending(1, delivery="e")]),
        "webhook_order": ("webhook/d", [sending(1), sending(2)]),
        "webhook_after_final": ("webhook/d", [sending(1), sent(1, "delivered"), sending(2)]),
        "form_wrong_session": ("forms/s", [form_answer("other")]),
    }


def form_answer(session: str) -> tuple[str, bytes]:
    from orchestrator._events import McpFormAnswered

    return encoded(McpFormAnswered(session=session, call_id="c", index=0, params="p",
                                   action="decline", decided_by="h"))  # fmt: skip


def sending(attempt: int, delivery: str = "d") -> tuple[str, bytes]:
    from orchestrator._events import WebhookSending

    return encoded(WebhookSending(delivery=delivery, attempt=attempt, kind="session.ended",
                                  session="s", seq=9, sender="serve:h:1:a"))  # fmt: skip


def sent(attempt: int, outcome: str, status: int = 200) -> tuple[str, bytes]:
    from orchestrator._events import WebhookSent

    return encoded(WebhookSent(delivery="d", attempt=attempt, outcome=outcome, status=status))  # type: ignore[arg-type]


def test_a_webhook_stream_that_retried_and_one_cut_short_pass() -> None:
    retried = [sending(1), sent(1, "retrying", 503), sending(2), sent(2, "delivered")]
    assert list(check_stream("webhook/d", enumerate_rows(retried))) == []
    assert list(check_stream("webhook/d", enumerate_rows(retried[:3]))) == []  # a prefix
    in_session = list(check_stream("s", enumerate_rows([sending(1)])))
    assert in_session and in_session[0].rule in ("wrong_stream", "not_started")


def test_a_cancel_closes_calls_that_never_started_then_ends() -> None:
    """A cancel between a model answer and a call's intent (orchestrator._cancel)
    closes the call as a ``cancelled`` error result with no tool.called; the session
    then ends. The same result for a call that was not asked for, or anything else
    after it, is found."""
    a = _golden("golden-approvals")
    assert tag(a[4]) == "model.responded" and b"call_0_0" in a[4][1]
    cancelled = [*a[:5], NEVER_STARTED, CANCEL_END]
    assert violations("s", cancelled) == []
    assert violations("s", [*a[:5], NEVER_STARTED, CANCEL_END_CLOSING]) == []
    assert violations("s", cancelled[:-1]) == []  # a prefix
    assert violations("s", [*a[:5], NEVER_STARTED, NEVER_STARTED]) == ["cancel_not_ending"]
    ended = encoded(SessionEnded(reason="completed", turns=1))
    assert violations("s", [*a[:5], NEVER_STARTED, ended]) == ["cancel_not_ending"]
    # Not a cancel's: an error that is not ``cancelled`` names a call never called.
    other = NEVER_STARTED[0], NEVER_STARTED[1].replace(b'"cancelled"', b'"timeout"')
    assert violations("s", [*a[:5], other]) == ["event_before_call"]


def enumerate_rows(events: list[tuple[str, bytes]]) -> list[tuple[int, str, bytes]]:
    return [(i, t, b) for i, (t, b) in enumerate(events)]


def encoded_fork() -> tuple[str, bytes]:
    from orchestrator._events import SessionForked

    return encoded(SessionForked(from_session="a", at_seq=1, at_hash="0" * 64))


def encoded_release(outcome: str, worker: str = "submit") -> tuple[str, bytes]:
    from orchestrator._events import LeaseReleased

    return encoded(LeaseReleased(worker=worker, outcome=outcome))


MUTATIONS = _mutations()


def test_every_rule_has_a_mutation_that_breaks_it() -> None:
    assert set(MUTATIONS) == set(RULES)


@pytest.mark.parametrize("rule", sorted(MUTATIONS))
def test_each_rule_names_the_event_that_breaks_it(rule: str) -> None:
    stream, events = MUTATIONS[rule]
    found = list(check_stream(stream, [(i, t, b) for i, (t, b) in enumerate(events)]))
    assert found, f"{rule}: nothing found"
    assert found[0].rule == rule, found[0]
    assert found[0].stream == stream and 0 <= found[0].seq < len(events)
    assert str(found[0]).startswith(f"stream {stream!r} seq {found[0].seq}: {rule}: ")


def test_the_rules_table_in_the_docs_is_the_code() -> None:
    text = (DOCS / "log-format.md").read_text()
    section = text.split("<!-- grammar-rules -->")[1].split("\n\n")[0]
    documented = re.findall(r"^\| `([a-z_]+)` \|", section, flags=re.M)
    assert documented == list(RULES)


# -- properties: mutations of real sessions ------------------------------------------------

STRUCTURAL = {
    "session.started",
    "catalog.snapshot",
    "prompt.rendered",
    "model.responded",
    "tool.called",
    "tool.completed",
    "tool.interrupted",
    "approval.requested",
    "approval.resolved",
    "session.ended",
}
"""Events of which the runtime never writes a second copy anywhere in a session."""

sessions = st.sampled_from(SESSIONS).map(lambda s: (s[0], plain(s[1])))


@settings(max_examples=300, deadline=None)
@given(sessions, st.data())
def test_a_copy_of_a_structural_event_anywhere_later_is_found(
    session: tuple[str, list[tuple[str, bytes]]], data: st.DataObject
) -> None:
    name, events = session
    candidates = [i for i, e in enumerate(events) if tag(e) in STRUCTURAL]
    i = data.draw(st.sampled_from(candidates))
    j = data.draw(st.integers(i + 1, len(events)))
    assert violations(name, [*events[:j], events[i], *events[j:]])


@settings(max_examples=300, deadline=None)
@given(sessions, st.data(), st.sampled_from(sorted({t for _, es in SESSIONS for _, t, _ in es})))
def test_anything_appended_after_the_end_is_found(
    session: tuple[str, list[tuple[str, bytes]]], data: st.DataObject, type_: str
) -> None:
    name, events = session
    if tag(events[-1]) != "session.ended":
        return
    copy = data.draw(st.sampled_from([e for e in events if tag(e) == type_] or [events[2]]))
    assert violations(name, [*events, copy]) == ["after_end"]


def _needed(events: list[tuple[str, bytes]], i: int) -> bool:
    """Whether a later event of ``events`` cannot exist without event ``i``."""
    later = events[i + 1 :]
    kind = tag(events[i])
    if kind in ("session.started", "catalog.snapshot", "prompt.rendered", "model.responded"):
        return bool(later)
    ids = call_ids(events[i])
    mentions = any(ids & call_ids(e) for e in later)
    turn_moves_on = any(tag(e) in ("prompt.rendered", "session.ended") for e in later)
    if kind == "tool.called":
        return mentions or turn_moves_on
    if kind in ("tool.completed", "tool.interrupted"):
        return turn_moves_on
    if kind in ("approval.requested", "approval.resolved"):
        return mentions
    return False


@settings(max_examples=300, deadline=None)
@given(sessions, st.data())
def test_dropping_an_event_something_later_needs_is_found(
    session: tuple[str, list[tuple[str, bytes]]], data: st.DataObject
) -> None:
    name, events = session
    i = data.draw(st.integers(0, len(events) - 1))
    found = violations(name, events[:i] + events[i + 1 :])
    if _needed(events, i):
        assert found, f"dropped {tag(events[i])} at {i}"
    if tag(events[i]) in ("message.user", "resource.read", "model.failed", "script.executed"):
        assert not found, found  # facts nothing else depends on


def _depends(events: list[tuple[str, bytes]], i: int, j: int) -> bool:
    """Whether event ``j`` (after ``i``) must come after event ``i``."""
    first, second = tag(events[i]), tag(events[j])
    if first in ("session.started", "catalog.snapshot"):
        return True
    if first == "prompt.rendered":
        return second in ("model.responded", "model.failed") and _same_turn(events, i, j)
    if first in ("tool.called", "approval.requested", "approval.resolved"):
        shared = call_ids(events[i]) & call_ids(events[j])
        return bool(shared) and second != "session.suspended"
    return False


def _same_turn(events: list[tuple[str, bytes]], i: int, j: int) -> bool:
    turn = msgspec.json.decode(events[i][1])["turn"]
    return bool(msgspec.json.decode(events[j][1]).get("turn") == turn)


@settings(max_examples=300, deadline=None)
@given(sessions, st.data())
def test_moving_an_event_before_one_it_depends_on_is_found(
    session: tuple[str, list[tuple[str, bytes]]], data: st.DataObject
) -> None:
    name, events = session
    pairs = [
        (i, j)
        for i in range(len(events))
        for j in range(i + 1, min(len(events), i + 12))
        if _depends(events, i, j)
    ]
    i, j = data.draw(st.sampled_from(pairs))
    moved = [*events[:i], events[j], *events[i:j], *events[j + 1 :]]
    assert violations(name, moved), f"moved {tag(events[j])} from {j} before {i}"


FORGERIES = [
    FORGED_COMPLETION,
    ("tool.called", b'{"arguments":"{}","call_id":"ghost","skills":[],"tool":"t","turn":1}'),
    ("approval.resolved", b'{"approved":true,"call_id":"ghost","decided_by":"me"}'),
    ("script.started", b'{"call_id":"ghost"}'),
    encoded(LeaseAcquired(session="s", worker="w", until=1)),
]
"""Events naming a call no model asked for, or from another kind of stream: the
runtime writes them nowhere in a session."""


@settings(max_examples=300, deadline=None)
@given(sessions, st.data(), st.sampled_from(FORGERIES))
def test_a_forged_event_the_runtime_could_not_write_is_found_anywhere(
    session: tuple[str, list[tuple[str, bytes]]],
    data: st.DataObject,
    forged: tuple[str, bytes],
) -> None:
    name, events = session
    k = data.draw(st.integers(0, len(events)))
    assert violations(name, [*events[:k], forged, *events[k:]]), f"{tag(forged)} at {k}"


def test_fields_the_rules_do_not_read_are_ignored() -> None:
    # Fields are only ever added (docs/events.md): the grammar reads the few it needs.
    name, events = SESSIONS[0]
    extra = [(t, b[:-1] + b',"zz_future_field":1}') for t, b in plain(events)]
    assert violations(name, extra) == []


async def test_a_user_activation_that_fails_names_no_call(kit, store, make_skill, tmp_path) -> None:  # type: ignore[no-untyped-def]
    """``/name`` in the task activates before any model call, so its events name no
    call: a skill gone from disk since the catalog records ``skill.activation_failed``
    with an empty ``call_id``, which is no violation."""
    gone = make_skill("gone")
    agent = kit.agent([], [gone])
    shutil.rmtree(tmp_path / "skills" / "gone")
    session = await agent.run(store, "/gone\nplease")
    events = [(e.seq, e.type, e.body) async for e in store.read(session.id)]
    failed = [b for _, t, b in events if t == "skill.activation_failed"]
    assert failed and b'"call_id":""' in failed[0]
    assert list(check_stream(session.id, events)) == []


@settings(max_examples=200, deadline=None)
@given(st.sampled_from(CORPUS), st.data())
def test_every_prefix_of_a_recorded_stream_is_valid(stream: Stream, data: st.DataObject) -> None:
    """Prefix-closed: a process may stop after any commit, and a cut tail is for
    checkpoints to find, so no prefix of what the runtime wrote is a violation."""
    name, events = stream
    cut = data.draw(st.integers(0, len(events)))
    assert list(check_stream(name, events[:cut])) == []


@settings(max_examples=200, deadline=None)
@given(sessions, st.data())
def test_outcomes_of_concurrent_calls_may_land_in_any_order(
    session: tuple[str, list[tuple[str, bytes]]], data: st.DataObject
) -> None:
    """Two calls' events after both intents, swapped as whole calls (concurrent calls
    commit their outcomes as each finishes): still a sequence the runtime writes."""
    name, events = session
    runs = []  # (start, end) of consecutive events naming one call, after its intent
    i = 0
    while i < len(events):
        ids = call_ids(events[i])
        j = i
        while j < len(events) and tag(events[j]) != "tool.called" and call_ids(events[j]) == ids:
            j += 1
        if j > i and ids and tag(events[j - 1]) in ("tool.completed", "tool.interrupted"):
            runs.append((i, j))
        i = max(j, i + 1)
    pairs = [(a, b) for a, b in itertools.pairwise(runs) if a[1] == b[0]]
    if not pairs:
        return
    (a0, a1), (_, b1) = data.draw(st.sampled_from(pairs))
    swapped = [*events[:a0], *events[a1:b1], *events[a0:a1], *events[b1:]]
    assert violations(name, swapped) == []


def test_the_index_stream_holds_the_environments_deps_install_built() -> None:
    from orchestrator import CODEC, SkillEnvBuilt

    built = SkillEnvBuilt(
        skill="tab",
        key="k",
        requirements=("a",),
        interpreter="i",
        platform="p",
        lock=(),
        tree_hash="t",
    )
    body = CODEC.encode(built, recorded_at=0).body
    assert list(check_stream("skills-index", [(0, "skill.env_built", body)])) == []
    (wrong,) = check_stream("skills-index", [(0, "session.started", b"{}")])
    assert wrong.rule == "wrong_stream"
