"""The crash-point harness (issue 12): kill a real process at every point where it can
die, resume in a new process, and check the write-ahead guarantees.

A *scenario* is a reference session (scripted model, host tools of every effect class
that write to an fsynced ledger, a sandboxed script, approvals, parallel calls) and a
list of crash points. Each process is forked from this one (so a run costs
milliseconds, not an interpreter start) and kills itself with SIGKILL when it reaches
its crash point:

- ``event:N``: right after the event at seq N is committed (every event boundary);
- ``point:NAME:K``: the K-th time the run reaches NAME inside an effect:
  ``model`` (the model answered, nothing recorded yet), ``tool.T.before`` /
  ``tool.T.after`` (host tool T before / after its side effect), ``approve`` (the
  approver decided, nothing recorded yet), ``script`` (a script's process is running).

After the crashes, a last process resumes the session to its end. Per scenario:

- duplicates: an at-most-once effect in the ledger twice, or an idempotent one run
  twice with different keys;
- unrecorded: an effect in the ledger whose intent (``tool.called``) is not in the log;
- divergent: a recorded request that differs from the uncrashed run's at the same turn
  while no interrupted call explains it, or one that does not re-render from the log.
  Requests are compared byte for byte with one thing masked: the ``duration_ms`` a
  script's result reports, a measurement that differs between any two runs;
and the log must verify and the session end ``completed``.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import signal
import threading
import traceback
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import trio

from eventlog import Event as StoredEvent
from eventlog import EventStore, closing, open_sqlite_store
from orchestrator import (
    Agent,
    ApprovalDecision,
    ApprovalRequest,
    HostTool,
    PolicyConfig,
    ToolContext,
)
from orchestrator._events import CODEC, Event, PromptRendered, ToolCalled, ToolInterrupted
from orchestrator._fleet import Worker, lease_stream, queue_session
from orchestrator._model import ModelRequest, ModelResponse
from orchestrator._verdict import verdict
from orchestrator.adapters import ScriptedModel
from orchestrator.skills import Tier, load_skill
from replay import load_recording, replay_session

SESSION = "crash-session"


def call(id: str, name: str, **arguments: Any) -> dict[str, Any]:
    return {"id": id, "name": name, "arguments": arguments}


KINDS: dict[str, list[dict[str, Any]]] = {
    "sequential": [
        {"tool_calls": [call("s1", "skills.load", names=["ops"])]},
        {"tool_calls": [call("s2", "send_email", to="a@example.com")]},
        {"tool_calls": [call("s3", "charge", cents=500)]},
        {"tool_calls": [call("s4", "skills.read", path="references/a.md")]},
        {"tool_calls": [call("s5", "skills.run_script", path="scripts/work.py")]},
        {"text": "done"},
    ],
    "parallel": [
        {"tool_calls": [call("p1", "skills.load", names=["ops"])]},
        {
            "tool_calls": [
                call("p2", "send_email", to="a@example.com"),
                call("p3", "send_email", to="b@example.com"),
                call("p4", "charge", cents=700),
                call("p5", "lookup", term="x"),
                call("p6", "skills.run_script", path="scripts/work.py"),
            ]
        },
        {
            "tool_calls": [
                call("p7", "skills.load", names=["extra"], mode="add"),
                call("p8", "skills.read", skill="ops", path="references/a.md"),
                call("p9", "charge", cents=1),
            ]
        },
        {"text": "done"},
    ],
    "approval": [
        {"tool_calls": [call("a1", "skills.load", names=["extra"])]},
        {
            "tool_calls": [
                call("a2", "wire", cents=9000),
                call("a3", "skills.run_script", path="scripts/x.sh"),
                call("a4", "send_email", to="c@example.com"),
            ]
        },
        {"text": "done"},
    ],
}


def write_skills(root: Path) -> Path:
    ops = root / "ops"
    (ops / "scripts").mkdir(parents=True)
    (ops / "references").mkdir()
    (ops / "SKILL.md").write_text("---\nname: ops\ndescription: Operations.\n---\nDo ops.\n")
    (ops / "references" / "a.md").write_text("reference a\n")
    # Long enough for a crash to land while it runs.
    (ops / "scripts" / "work.py").write_text("import time\ntime.sleep(0.15)\nprint('worked')\n")
    extra = root / "extra"
    (extra / "scripts").mkdir(parents=True)
    (extra / "SKILL.md").write_text("---\nname: extra\ndescription: Extra.\n---\nExtra.\n")
    (extra / "scripts" / "x.sh").write_text("echo extra\n")
    return root


class Crash:
    """Kills this process at its crash point; counts the named points it passes."""

    def __init__(self, spec: str | None) -> None:
        self.spec = spec
        self.hits: Counter[str] = Counter()

    def _die(self) -> None:
        os.kill(os.getpid(), signal.SIGKILL)

    def hit(self, name: str) -> None:
        self.hits[name] += 1
        if self.spec == f"point:{name}:{self.hits[name]}":
            self._die()

    def observe(self, event: StoredEvent) -> None:
        if self.spec == f"event:{event.seq}":
            self._die()
        if event.type == "script.started":
            self.hits["script"] += 1
            if self.spec == f"point:script:{self.hits['script']}":
                threading.Timer(0.05, self._die).start()  # while the script runs


class Ledger:
    """The world the host tools change: one fsynced line per side effect."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def write(self, line: str) -> None:
        with self.path.open("a") as f:
            f.write(line + "\n")
            f.flush()
            os.fsync(f.fileno())

    def entries(self) -> list[list[str]]:
        if not self.path.exists():
            return []
        return [line.split() for line in self.path.read_text().splitlines()]


class CrashingModel:
    """The scripted model, with a crash point after each answer."""

    provider = "test"

    def __init__(self, turns: Sequence[dict[str, Any]], crash: Crash) -> None:
        # follow_history: an agent built for a resumed session continues the script
        # where the session's history stops.
        self.inner = ScriptedModel(turns, follow_history=True)
        self.crash = crash

    async def complete(self, request: ModelRequest) -> ModelResponse:
        response = await self.inner.complete(request)
        self.crash.hit("model")
        return response


def build_agent(kind: str, skills: Path, ledger: Ledger, crash: Crash) -> Agent:
    def effect_tool(name: str, line: Callable[[ToolContext], str]) -> Callable[..., str]:
        def run(context: ToolContext) -> str:
            crash.hit(f"tool.{name}.before")
            ledger.write(line(context))
            crash.hit(f"tool.{name}.after")
            return f"{name} done"

        return run

    email = effect_tool("send_email", lambda c: f"{c.call_id} send_email -")
    charge_ = effect_tool("charge", lambda c: f"{c.call_id} charge {c.idempotency_key}")
    wire_ = effect_tool("wire", lambda c: f"{c.call_id} wire -")

    def send_email(to: str, context: ToolContext) -> str:
        """Send an email."""
        return email(context)

    def charge(cents: int, context: ToolContext) -> str:
        """Charge a card (the payment API deduplicates by idempotency key)."""
        return charge_(context)

    def wire(cents: int, context: ToolContext) -> str:
        """Wire money (needs approval)."""
        return wire_(context)

    def lookup(term: str) -> str:
        """Look a term up (read-only)."""
        return f"{term}: found"

    async def approver(request: ApprovalRequest) -> ApprovalDecision:
        crash.hit("approve")
        return ApprovalDecision(approved=True, decided_by="crash-suite")

    return Agent(
        model=CrashingModel(KINDS[kind], crash),
        model_name="crash-model",
        skills=[
            load_skill(skills / "ops", tier=Tier.BUILTIN, source="builtin:crash"),
            load_skill(skills / "extra", tier=Tier.THIRD_PARTY, source="third:crash"),
        ],
        host_tools=[
            HostTool.from_function(send_email),
            HostTool.from_function(charge, effect="idempotent"),
            HostTool.from_function(wire),
            HostTool.from_function(lookup, effect="pure"),
        ],
        policy=PolicyConfig(approve_host_tools=("wire",)),
        approver=approver,
        observers=[crash.observe],
    )


FLEET_LEASE_MS = 300
"""The lease of the fleet mode's workers: how long a resuming worker waits for a dead
one's claim to expire."""


async def _session(
    db: Path, kind: str, skills: Path, ledger: Ledger, crash: Crash, fleet: bool
) -> None:
    async with open_sqlite_store(db) as store:
        agent = build_agent(kind, skills, ledger, crash)
        exists = await store.head(SESSION) is not None
        try:
            if fleet:
                if not exists:  # queued, as `skillog submit` does
                    if await store.head(lease_stream(SESSION)) is None:
                        await queue_session(store, agent, "go", session_id=SESSION)
                    else:  # died between queueing and the start: start it now
                        await agent.start(store, session_id=SESSION, task="go")
                await _work(store, lambda started: build_agent(kind, skills, ledger, crash))
            elif exists:
                await agent.resume(store, SESSION)
            else:
                await agent.run(store, "go", session_id=SESSION)
        finally:
            agent.close()


async def _work(store: EventStore, make_agent: Callable[[Any], Agent]) -> None:
    """A worker process of the fleet: claims the session (once a dead worker's lease has
    expired) and drives it to its end."""
    worker = Worker(
        store, make_agent, name=f"worker-{os.getpid()}", lease_ms=FLEET_LEASE_MS, poll_ms=10
    )
    stop = trio.Event()
    async with trio.open_nursery() as nursery:
        nursery.start_soon(worker.run, stop)
        while not await _ended(store):  # noqa: ASYNC110 - by this worker or an earlier one
            await trio.sleep(0.01)
        stop.set()


async def _ended(store: EventStore) -> bool:
    head = await store.head(SESSION)
    if head is None:
        return False
    async with closing(store.read(SESSION, from_seq=head.seq)) as events:
        async for event in events:
            return event.type == "session.ended"
    return False


def in_child(fn: Callable[[], None]) -> int:
    """Run ``fn`` in a forked process; its wait status as ``-signal`` or exit code."""
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child
        code = 0
        try:
            fn()
        except BaseException:
            traceback.print_exc()
            code = 3
        os._exit(code)
    _, status = os.waitpid(pid, 0)
    return -os.WTERMSIG(status) if os.WIFSIGNALED(status) else os.WEXITSTATUS(status)


def run_process(
    db: Path, kind: str, skills: Path, ledger: Ledger, spec: str | None, fleet: bool = False
) -> int:
    crash = Crash(spec)
    hits_file = db.with_suffix(".hits")

    def child() -> None:
        trio.run(_session, db, kind, skills, ledger, crash, fleet)
        hits_file.write_text(json.dumps(crash.hits))

    return in_child(child)


@dataclass
class Reference:
    """The uncrashed run: its request hashes and every crash point it passes."""

    hashes: list[str]
    points: list[str]


@dataclass
class Tally:
    scenarios: int = 0
    duplicates: int = 0
    unrecorded: int = 0
    divergent: int = 0
    unreached: int = 0
    failures: list[str] = field(default_factory=list)

    def add(self, other: Tally) -> None:
        self.scenarios += other.scenarios
        self.duplicates += other.duplicates
        self.unrecorded += other.unrecorded
        self.divergent += other.divergent
        self.unreached += other.unreached
        self.failures += other.failures

    def counts(self) -> dict[str, int]:
        return {k: getattr(self, k) for k in ("scenarios", "duplicates", "unrecorded", "divergent")}

    def line(self) -> str:
        return (
            f"crash points: {self.scenarios} scenarios, {self.duplicates} duplicate effects, "
            f"{self.unrecorded} unrecorded effects, {self.divergent} divergent prompts"
        )


def reference(work: Path, kind: str, skills: Path) -> Reference:
    db = work / f"ref-{kind}.db"
    assert run_process(db, kind, skills, Ledger(work / f"ref-{kind}.ledger"), None) == 0
    hits = json.loads(db.with_suffix(".hits").read_text())
    hashes, events = trio.run(_recorded, db)
    points = [f"event:{seq}" for seq in range(events)]
    points += [f"point:{name}:{k}" for name, n in sorted(hits.items()) for k in range(1, n + 1)]
    return Reference(hashes=hashes, points=points)


async def _recorded(db: Path) -> tuple[list[str], int]:
    async with open_sqlite_store(db, readonly=True) as store:
        bodies = [CODEC.decode(e) async for e in store.read(SESSION)]
        return await requests(store, bodies), len(bodies)


_DURATION = re.compile(rb'(duration_ms\\?":)\d+')


async def requests(store: EventStore, bodies: Sequence[Event]) -> list[str]:
    """The digest of each recorded request's bytes (rebuilt from the blobs its
    ``prompt.rendered`` names), scripts' measured durations masked."""
    lines: list[bytes] = []
    digests = []
    for body in bodies:
        if isinstance(body, PromptRendered):
            lines += [await store.get_blob(d) for d in body.new_message_digests]
            request = b"".join(lines) + await store.get_blob(body.tail_digest)
            digests.append(hashlib.sha256(_DURATION.sub(rb"\g<1>0", request)).hexdigest())
    return digests


def scenario(
    work: Path,
    kind: str,
    skills: Path,
    ref: Reference,
    crashes: Sequence[str],
    index: int,
    fleet: bool = False,
) -> Tally:
    """Crash at each of ``crashes`` in turn (each in a new process resuming the last),
    then resume to the end and check the guarantees. With ``fleet`` each process is a
    worker: it claims the session with a lease, and the next one takes it over when the
    lease of the killed one expires."""
    name = f"{'fleet ' if fleet else ''}{kind} {' then '.join(crashes)}"
    db = work / f"s{index}.db"
    ledger = Ledger(work / f"s{index}.ledger")
    tally = Tally(scenarios=1)
    for spec in crashes:
        status = run_process(db, kind, skills, ledger, spec, fleet)
        if status != -signal.SIGKILL:
            tally.unreached += 1  # the run ended before reaching this point
            if status != 0:
                tally.failures.append(f"{name}: exit {status} before its crash point")
    status = run_process(db, kind, skills, ledger, None, fleet)
    if status != 0:
        tally.failures.append(f"{name}: the final resume exited {status}")
        return tally
    trio.run(_check, db, ledger, ref, tally, name)
    for path in (db, db.with_suffix(".hits"), ledger.path):
        path.unlink(missing_ok=True)
    for suffix in ("-wal", "-shm"):
        Path(f"{db}{suffix}").unlink(missing_ok=True)
    return tally


async def _check(db: Path, ledger: Ledger, ref: Reference, tally: Tally, name: str) -> None:
    async with open_sqlite_store(db, readonly=True) as store:
        report = await verdict(store)
        if not report.ok:
            tally.failures.append(f"{name}: the log does not verify: {report.faults}")
        bodies = [CODEC.decode(e) async for e in store.read(SESSION)]
        proof = await replay_session(store, await load_recording(store, SESSION))
        hashes = await requests(store, bodies)
    if not proof.ok:
        tally.divergent += 1
        tally.failures.append(f"{name}: a recorded request does not re-render from the log")
    if getattr(bodies[-1], "reason", None) != "completed":
        tally.failures.append(f"{name}: ended {bodies[-1]!r}")
    called = {b.call_id: b for b in bodies if isinstance(b, ToolCalled)}
    effects: dict[str, list[list[str]]] = {}
    for entry in ledger.entries():
        effects.setdefault(entry[0], []).append(entry)
    for call_id, runs in effects.items():
        intent = called.get(call_id)
        if intent is None:
            tally.unrecorded += 1
            tally.failures.append(f"{name}: effect of {call_id} has no intent in the log")
            continue
        if intent.effect == "at-most-once" and len(runs) > 1:
            tally.duplicates += 1
            tally.failures.append(f"{name}: at-most-once {call_id} ran {len(runs)} times")
        if intent.effect == "idempotent" and len({tuple(r) for r in runs}) > 1:
            tally.duplicates += 1
            tally.failures.append(f"{name}: idempotent {call_id} ran with different keys")
    cut = next((i for i, b in enumerate(bodies) if isinstance(b, ToolInterrupted)), None)
    # Requests composed before any interrupted call's result must be the uncrashed
    # run's, byte for byte; after it the model reads the interruption, so they differ.
    if cut is None:
        same = hashes == ref.hashes
    else:
        before = hashes[: sum(isinstance(b, PromptRendered) for b in bodies[:cut])]
        same = before == ref.hashes[: len(before)]
    if not same:
        tally.divergent += 1
        tally.failures.append(f"{name}: a request differs from the uncrashed run's")


def _later(first: str, second: str) -> bool:
    """Whether a resumed process can reach ``second`` after the first died at
    ``first``: an event boundary only beyond the first's."""
    if first.startswith("event:") and second.startswith("event:"):
        return int(second.split(":")[1]) > int(first.split(":")[1])
    return True


def run_suite(
    work: Path,
    kinds: Sequence[str] = tuple(KINDS),
    *,
    double: bool = False,
    sample: int | None = None,
    fleet: bool = False,
    progress: Callable[[Tally], None] | None = None,
) -> Tally:
    """Every single crash point of each kind (and with ``double``, every pair: a crash,
    then a crash of the resuming process at each of its own points); ``sample`` keeps
    every n-th scenario, spread over all points; ``fleet`` runs every process as a
    worker of a fleet (see :func:`scenario`)."""
    skills = write_skills(work / "skills")
    total = Tally()
    index = 0
    for kind in kinds:
        ref = reference(work, kind, skills)
        plans: list[list[str]] = [[p] for p in ref.points]
        if double:
            plans += [[p, q] for p in ref.points for q in ref.points if _later(p, q)]
        for n, crashes in enumerate(plans):
            if sample is not None and n % sample:
                continue
            index += 1
            total.add(scenario(work, kind, skills, ref, crashes, index, fleet))
            if progress is not None:
                progress(total)
    return total
