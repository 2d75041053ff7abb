"""Service figures (issue 16), bounded and on loopback only.

``skillog serve`` runs as its own process (one in-process worker) on SQLite or, with
``--postgres``, on a throwaway PostgreSQL cluster. The bench submits sessions through
the API at a fixed rate for a fixed time (open loop: each submission at its scheduled
instant, whatever the previous one's latency), while a fixed pool of SSE followers is
connected throughout: each follows the newest submitted session from its first event
to its ``session.ended``, then the newest again. Every follow is checked against the
log (each seq once, in order, hashes equal). Printed:

- commit-to-delivery latency (an event's ``recorded_at``, read just before its commit,
  to its arrival at a follower; only events committed while the follower was
  connected), p50/p99, under load and in a short idle phase of the same run (1
  session/s, 5 followers) — the ratio is the load's cost;
- the server process's RSS (``/proc/PID/status``), sampled every second through the
  run: first, last and peak, and one sample every 10 s;
- submission latency, the rate achieved, sessions ended;
- the CPU seconds (user + system) the server, the worker (``--separate-worker``) and
  this bench process itself used through the load: the bench's followers share the
  machine's cores with the server, so its own cost is printed beside the server's.

``--catch-up N`` adds the server's CPU per follow on its own: after the load, each
follower follows each of the first N sessions again (ended: connect, catch up, close).

The followers are bare SSE clients (one connection per follow, the chunked body parsed
by hand, :class:`SSE`); the submissions go through httpx.

    .venv/bin/python bench/service.py [--rate 50] [--seconds 60] [--followers 200]
                                      [--postgres] [--demo] [--separate-worker]
                                      [--catch-up N] [--answer-ms MS]
    .venv/bin/python bench/service.py --micro 300 [--rounds 3]

``--micro N`` measures the server's CPU per request instead, load-independent: against
one ``serve --workers 0`` (nothing runs the sessions), N submissions in a row, then N
follows (connect, first event, close) of the last one while another stream follows it
throughout (as hundreds follow the newest session under load), each the server's CPU
seconds (``/proc/PID/stat``) over N; ``--rounds`` repeats both; ``--only submit|follow`` does
one of them (the other's figure is then meaningless), for a profiler attached to the
printed pid (``py-spy record --pid PID``).

The sessions load a skill, read one of its files and answer (16 events, no script):
the service is what is measured. ``--answer-ms MS`` has the model stream its answer over
about MS, as a real model does: the sessions then last long enough for followers to be
connected while they commit, whoever runs them (with ``--separate-worker`` a session of
an instant answer ends before its followers arrive, and no delivery is live). ``--demo``
runs the demo's sessions instead, with a sandboxed script each (what one worker can run
bounds the rate then).
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import re
import subprocess
import sys
import tempfile
import time
from collections.abc import AsyncIterator
from contextlib import aclosing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

HERE = Path(__file__).resolve().parent
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != HERE]  # bench/eventlog.py

import httpx2 as httpx  # noqa: E402
import msgspec  # noqa: E402
import trio  # noqa: E402

from eventlog import open_store  # noqa: E402
from orchestrator.service import new_token  # noqa: E402
from orchestrator.skills._config import add_service_token  # noqa: E402

DEMO = HERE.parent / "orchestrator" / "demo"
LIGHT = """\
turns:
  - tool_calls: [{name: skills.load, arguments: {names: [csv-insights]}}]
  - tool_calls: [{name: skills.read, arguments: {path: references/report-format.md}}]
  - text: "540 units across 4 regions."
"""


def light(answer_ms: int) -> str:
    """The bench's sessions' script; with ``answer_ms`` the model streams its answer (27
    characters: two chunks of at most 16) over about that long, as a real model does."""
    if not answer_ms:
        return LIGHT
    delay = f"  - stream_delay_ms: {max(1, answer_ms // 2)}\n    text: "
    return LIGHT.replace("  - text: ", delay)


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] if ordered else float("nan")


def rss_mib(pid: int, kind: str = "VmRSS") -> float:
    """``VmRSS`` (all resident memory), ``RssAnon`` (the heap: what a leak grows) or
    ``RssFile`` (mapped files) of process ``pid``, in MiB."""
    status = Path(f"/proc/{pid}/status").read_text()
    found = re.search(rf"{kind}:\s+(\d+) kB", status)
    return int(found.group(1)) / 1024 if found else float("nan")


def cpu_s(pid: int) -> float:
    """User plus system CPU seconds process ``pid`` has used (``/proc/PID/stat``): what
    the load costs it, whatever else runs on the machine."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


@dataclass
class Phase:
    """What one phase (idle or load) measured."""

    submitted: list[str] = field(default_factory=list)
    submit_ms: list[float] = field(default_factory=list)
    submit_errors: list[str] = field(default_factory=list)
    follows: list[tuple[str, list[tuple[int, str]]]] = field(default_factory=list)
    latency_ms: list[float] = field(default_factory=list)
    connected: int = 0
    most_connected: int = 0
    submitting: bool = True
    new_session: trio.Event = field(default_factory=trio.Event)


class Seen(msgspec.Struct):
    """What the check needs of an SSE event (the rest of the JSON is skipped unread)."""

    seq: int
    hash: str
    type: str
    recorded_at: int


SEEN = msgspec.json.Decoder(Seen)


class SSE:
    """A bare SSE client on one HTTP/1.1 connection: the request written once, the
    chunked body parsed by hand. 300 httpx streams in one process cost as much CPU as
    the server (its connection pool scans every connection on each request): the bench's
    own loop then fell behind and inflated the latency it measured. Same workload (one
    connection per follow, as httpx made), same latency (arrival = when the bytes that
    complete an event were read off the socket)."""

    def __init__(self, url: str, token: str) -> None:
        parts = urlsplit(url)
        self.host, self.port = parts.hostname or "127.0.0.1", parts.port or 80
        self.head = (
            f"Host: {parts.netloc}\r\nAuthorization: Bearer {token}\r\n"
            "Accept: text/event-stream\r\n\r\n"
        ).encode()

    async def events(self, path: str) -> AsyncIterator[tuple[int, bytes]]:
        """(arrival ns, data line) for each event of ``path``'s stream, until it ends;
        first (ns, b"") when the response's head arrived (the follower is connected)."""
        stream = await trio.open_tcp_stream(self.host, self.port)
        async with stream:
            await stream.send_all(b"GET %s HTTP/1.1\r\n%s" % (path.encode(), self.head))
            buf = b""
            while b"\r\n\r\n" not in buf:
                buf += await self._more(stream)
            head, buf = buf.split(b"\r\n\r\n", 1)
            if not head.startswith(b"HTTP/1.1 200"):
                raise RuntimeError(f"GET {path}: {head.splitlines()[0].decode()}")
            yield time.time_ns(), b""
            body = b""  # de-chunked, not yet split into messages
            done = False  # the last chunk came
            while True:
                while not done:  # every complete chunk in buf
                    end = buf.find(b"\r\n")
                    size = int(buf[:end].split(b";", 1)[0], 16) if end >= 0 else -1
                    if size < 0 or len(buf) < end + 2 + size + 2:
                        break
                    body += buf[end + 2 : end + 2 + size]
                    buf = buf[end + 4 + size :]
                    done = size == 0
                if b"\n\n" in body:
                    arrived = time.time_ns()
                    *messages, body = body.split(b"\n\n")
                    for message in messages:
                        for line in message.split(b"\n"):
                            if line.startswith(b"data: "):
                                yield arrived, line[6:]
                if done:
                    return
                buf += await self._more(stream)

    @staticmethod
    async def _more(stream: trio.SocketStream) -> bytes:
        data = await stream.receive_some(65536)
        if not data:
            raise RuntimeError("the server closed the stream before the session ended")
        return data


async def follow(client: SSE, phase: Phase) -> None:
    """Follow the newest submitted session to its end, then the newest one since, until
    the phase stops submitting."""
    last = None
    while True:
        if not phase.submitted or phase.submitted[-1] == last:
            if not phase.submitting:
                return
            await phase.new_session.wait()
            continue
        session = last = phase.submitted[-1]
        received: list[tuple[int, str]] = []
        phase.follows.append((session, received))
        events = client.events(f"/api/sessions/{session}/stream")
        async with aclosing(events):
            connected_at, _ = await anext(events)  # once the response's head is in
            phase.connected += 1
            phase.most_connected = max(phase.most_connected, phase.connected)
            try:
                async for arrived, data in events:
                    event = SEEN.decode(data)
                    if event.recorded_at >= connected_at:
                        phase.latency_ms.append((arrived - event.recorded_at) / 1e6)
                    received.append((event.seq, event.hash))
                    if event.type == "session.ended":
                        break
            finally:
                phase.connected -= 1


async def catch_up(client: SSE, sessions: list[str], followers: int) -> int:
    """Each follower follows each of ``sessions`` (ended, or waited for) once more:
    connect, catch up, close, one after the other. Returns the follows made."""
    made = 0

    async def one() -> None:
        nonlocal made
        for session in sessions:
            events = client.events(f"/api/sessions/{session}/stream")
            async with aclosing(events):
                async for _, data in events:
                    if data and SEEN.decode(data).type == "session.ended":
                        break
            made += 1

    async with trio.open_nursery() as nursery:
        for _ in range(followers):
            nursery.start_soon(one)
    return made


async def submit_all(client: httpx.AsyncClient, phase: Phase, rate: float, seconds: float) -> None:
    """Open loop: submission i at start + i/rate, each in its own task."""

    async def one(i: int) -> None:
        t0 = time.perf_counter()
        try:
            response = await client.post("/api/sessions", json={"task": f"task {i}"})
        except httpx.TransportError as e:  # counted and printed, not retried (not idempotent)
            phase.submit_errors.append(f"{type(e).__name__}: {e}")
            return
        phase.submit_ms.append((time.perf_counter() - t0) * 1000)
        response.raise_for_status()
        phase.submitted.append(response.json()["session_id"])
        phase.new_session.set()
        phase.new_session = trio.Event()

    start = trio.current_time()
    async with trio.open_nursery() as nursery:
        for i in range(int(rate * seconds)):
            await trio.sleep_until(start + i / rate)
            nursery.start_soon(one, i)
    phase.submitting = False
    phase.new_session.set()


async def run_phase(
    url: str, token: str, rate: float, seconds: float, followers: int, patience: float
) -> tuple[Phase, float]:
    phase = Phase()
    limits = httpx.Limits(max_connections=None, max_keepalive_connections=None)
    headers = {"authorization": f"Bearer {token}"}
    started = trio.current_time()
    with trio.fail_after(seconds + patience):
        async with (
            httpx.AsyncClient(base_url=url, headers=headers, trust_env=False, timeout=patience,
                              limits=limits) as client,
            trio.open_nursery() as nursery,
        ):  # fmt: skip
            sse = SSE(url, token)
            for _ in range(followers):
                nursery.start_soon(follow, sse, phase)
            await submit_all(client, phase, rate, seconds)
    return phase, trio.current_time() - started


async def check(db: str, phase: Phase) -> tuple[int, int, int]:
    """Events delivered, missed and duplicated (or out of order), over every follow."""
    delivered = missed = duplicated = 0
    async with open_store(db, readonly=True) as store:
        for session, received in phase.follows:
            log = [(e.seq, e.hash) async for e in store.read(session)]
            delivered += len(received)
            missed += len(set(log) - set(received))
            duplicated += len(received) - len(set(received)) + len(set(received) - set(log))
            if not missed and not duplicated and received != log:
                duplicated += 1  # every event once, but out of order
    return delivered, missed, duplicated


async def ended_sessions(db: str) -> int:
    async with open_store(db, readonly=True) as store:
        infos = await store.streams()
        ended = 0
        for info in infos:
            if info.stream.startswith("lease/"):
                continue
            async for event in store.read(info.stream, from_seq=info.length - 1):
                ended += event.type == "session.ended"
        return ended


def module(path: Path) -> Any:
    """A module of this repository that is not on the path (tests/, bench/)."""
    spec = importlib.util.spec_from_file_location(path.stem, path)
    assert spec is not None and spec.loader is not None
    loaded = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(loaded)
    return loaded


def start_server(
    tmp: Path, db: str, args: argparse.Namespace, workers: list[str] | None = None
) -> tuple[subprocess.Popen[str], str]:
    """``skillog serve`` as the service tests start it (tests/service/test_cli_serve.py)."""
    model = DEMO / "turns.yaml" if args.demo else tmp / "light.yaml"
    if not args.demo:
        model.write_text(light(args.answer_ms))
    env = {**os.environ, "SKILLOG_CONFIG": str(tmp / "config.yaml"), "HOME": str(tmp)}
    start = module(HERE.parent / "tests" / "service" / "test_cli_serve.py").start
    proc: subprocess.Popen[str]
    common = [
        "--skills", str(DEMO / "skills"), "--tier", "org", "--concurrency", str(args.concurrency),
        "--poll-ms", str(args.poll_ms), "--project", str(tmp),
    ]  # fmt: skip
    if workers is None:
        workers = ["--workers", "0"] if args.separate_worker else []
    proc, url = start(tmp, env, "--db", db, "--model", f"scripted:{model}", *common, *workers)
    if args.separate_worker:  # the worker in a process of its own, on the same log
        args.worker = subprocess.Popen(
            [sys.executable, "-m", "orchestrator.cli", "worker", "--db", db, *common],
            env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, text=True,
        )  # fmt: skip
    return proc, url


async def micro(args: argparse.Namespace, db: str | None) -> None:
    """CPU per submission and per follow of one ``serve --workers 0`` (``--micro N``)."""
    tmp = Path(tempfile.mkdtemp(prefix="skillog-bench-service-"))
    token, entry = new_token("bench", ("admin",))
    add_service_token(str(tmp / "config.yaml"), entry)
    args.separate_worker = False
    proc, url = start_server(tmp, db or str(tmp / "service.db"), args, ["--workers", "0"])
    print(f"service micro bench ({args.label}): serve --workers 0, pid {proc.pid}; "
          f"{args.micro} submissions in a row, then {args.micro} follows of the last "
          f"(connect, first event, close; another stream follows it throughout); server CPU "
          f"from /proc")  # fmt: skip
    headers = {"authorization": f"Bearer {token}"}
    try:
        async with httpx.AsyncClient(
            base_url=url, headers=headers, trust_env=False, timeout=args.timeout
        ) as client:
            for _ in range(3):  # warm up: imports, first reads, caches
                sid = (await client.post("/api/sessions", json={"task": "warm"})).json()
                await first_event(client, sid["session_id"])
            for r in range(args.rounds):
                load = os.getloadavg()[0]
                cpu0 = cpu_s(proc.pid)
                sessions = []
                for i in range(args.micro if args.only != "follow" else 1):
                    response = await client.post("/api/sessions", json={"task": f"task {i}"})
                    response.raise_for_status()
                    sessions.append(response.json()["session_id"])
                async with trio.open_nursery() as nursery:
                    # as in the load bench, where hundreds follow the newest session
                    await nursery.start(hold, client, sessions[-1])
                    cpu1 = cpu_s(proc.pid)
                    for _ in range(args.micro if args.only != "submit" else 0):
                        await first_event(client, sessions[-1])
                    cpu2 = cpu_s(proc.pid)
                    nursery.cancel_scope.cancel()
                n = args.micro
                print(f"  round {r + 1}: CPU per POST /api/sessions {(cpu1 - cpu0) * 1000 / n:.2f} "
                      f"ms, per follow {(cpu2 - cpu1) * 1000 / n:.2f} ms "
                      f"(load average {load:.1f} -> {os.getloadavg()[0]:.1f})")  # fmt: skip
    finally:
        proc.terminate()
        proc.wait(timeout=60)


async def hold(client: httpx.AsyncClient, session: str, task_status: trio.TaskStatus[None]) -> None:
    """Follow ``session`` until cancelled (started once its first event arrived)."""
    started = False
    async with client.stream("GET", f"/api/sessions/{session}/stream") as response:
        response.raise_for_status()
        async for line in response.aiter_lines():
            if line.startswith("data: ") and not started:
                task_status.started()
                started = True


async def first_event(client: httpx.AsyncClient, session: str) -> None:
    """Follow ``session`` until its first event arrives, then close."""
    async with client.stream("GET", f"/api/sessions/{session}/stream") as response:
        response.raise_for_status()
        async for line in response.aiter_lines():
            if line.startswith("data: "):
                return


async def main(args: argparse.Namespace, db: str | None) -> None:
    tmp = Path(tempfile.mkdtemp(prefix="skillog-bench-service-"))
    token, entry = new_token("bench", ("admin",))
    add_service_token(str(tmp / "config.yaml"), entry)
    db = db or str(tmp / "service.db")
    proc, url = start_server(tmp, db, args)
    samples: dict[str, list[float]] = {"VmRSS": [], "RssAnon": []}
    caught = (0, 0.0)
    try:
        async with trio.open_nursery() as nursery:

            async def sample() -> None:
                while True:
                    for kind, values in samples.items():
                        values.append(rss_mib(proc.pid, kind))
                    await trio.sleep(1)

            nursery.start_soon(sample)
            idle, _ = await run_phase(url, token, 1, 5, 5, args.timeout)
            mark = len(samples["VmRSS"])
            pids = {"server": proc.pid}
            if getattr(args, "worker", None) is not None:
                pids["worker"] = args.worker.pid
            pids["bench client"] = os.getpid()
            cpu0 = {k: cpu_s(pid) for k, pid in pids.items()}
            load, elapsed = await run_phase(
                url, token, args.rate, args.seconds, args.followers, args.timeout
            )
            cpu = {k: cpu_s(pid) - cpu0[k] for k, pid in pids.items()}
            loaded = len(samples["VmRSS"])
            if args.catch_up:  # the server's CPU per follow, apart from the submissions
                before = cpu_s(proc.pid)
                with trio.fail_after(args.timeout):
                    follows = await catch_up(
                        SSE(url, token), load.submitted[: args.catch_up], args.followers
                    )
                caught = (follows, cpu_s(proc.pid) - before)
            await trio.sleep(args.rest)  # no load: does memory come back?
            nursery.cancel_scope.cancel()
    finally:
        for process in (proc, getattr(args, "worker", None)):
            if process is not None:
                process.terminate()
                process.wait(timeout=60)
    idle_counts = await check(db, idle)
    delivered, missed, duplicated = await check(db, load)
    sessions = len(load.submitted)
    print(f"service bench ({args.label}): {sessions} sessions submitted at {args.rate:g}/s for "
          f"{args.seconds:g} s ({sessions / args.seconds:.1f}/s achieved), {args.followers} SSE "
          f"followers; all followed sessions ended {elapsed:.1f} s after the first submission "
          f"(1 {'separate' if args.separate_worker else 'in-process'} worker, "
          f"concurrency {args.concurrency})")  # fmt: skip
    print(f"  sessions ended: {await ended_sessions(db)} of {sessions + len(idle.submitted)}")
    print(f"  follows: {len(load.follows)}, at most {load.most_connected} connected at once")
    print(f"  events delivered over SSE: {delivered}; missed {missed}, duplicated {duplicated} "
          f"(idle phase: {idle_counts[0]} delivered, {idle_counts[1]} missed, "
          f"{idle_counts[2]} duplicated)")  # fmt: skip
    print(f"  submit (POST /api/sessions): p50 {pct(load.submit_ms, .5):.1f} ms, "
          f"p99 {pct(load.submit_ms, .99):.1f} ms; {len(load.submit_errors)} failed "
          f"{sorted(set(load.submit_errors))[:3]}")  # fmt: skip
    print("  CPU through the load: " + ", ".join(
        f"{k} {v:.1f} s ({v * 1000 / max(1, sessions):.1f} ms per session)" for k, v in cpu.items()
    ))  # fmt: skip
    if args.catch_up:
        print(f"  after the load, {caught[0]} follows of {args.catch_up} ended sessions (each "
              f"follower each session: connect, catch up, close): server CPU {caught[1]:.1f} s, "
              f"{caught[1] * 1000 / max(1, caught[0]):.2f} ms per follow")  # fmt: skip
    l50, l99 = pct(load.latency_ms, 0.5), pct(load.latency_ms, 0.99)
    i50, i99 = pct(idle.latency_ms, 0.5), pct(idle.latency_ms, 0.99)
    print(f"  commit -> delivery under load: p50 {l50:.1f} ms, p99 {l99:.1f} ms "
          f"({len(load.latency_ms)} live deliveries)")  # fmt: skip
    if len(load.latency_ms) < 10 * args.followers:
        print("  (few live deliveries: most follows started after their session ended, when "
              "the submissions' responses came late; the figure above times little)")  # fmt: skip
    print(f"  commit -> delivery idle:       p50 {i50:.1f} ms, p99 {i99:.1f} ms")
    print(f"  ratio load / idle: p50 {l50 / i50:.1f}x, p99 {l99 / i99:.1f}x")
    for kind, values in samples.items():
        run = values[mark:loaded]
        every10 = ", ".join(f"{v:.0f}" for v in run[::10])
        print(f"  server {kind} (MiB): before any load {values[0]:.0f}; through the load "
              f"first {run[0]:.0f}, last {run[-1]:.0f}, peak {max(run):.0f}; after "
              f"{args.rest:g} s of rest {values[-1]:.0f}; every 10 s: {every10}")  # fmt: skip
    if missed or duplicated or any(idle_counts[1:]):
        raise SystemExit("FAILED: a follower missed or repeated events")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rate", type=float, default=50.0, help="submissions per second (50)")
    parser.add_argument("--seconds", type=float, default=60.0, help="how long to submit (60)")
    parser.add_argument("--followers", type=int, default=200, help="SSE followers (200)")
    parser.add_argument("--concurrency", type=int, default=32, help="sessions the worker runs")
    parser.add_argument("--poll-ms", type=int, default=100, help="the worker's queue poll")
    parser.add_argument("--timeout", type=float, default=300.0, help="for the stragglers (s)")
    parser.add_argument("--rest", type=float, default=10.0, help="idle sampling after (s)")
    parser.add_argument(
        "--catch-up", type=int, default=0, metavar="N",
        help="after the load, each follower follows the first N sessions again (CPU per follow)",
    )  # fmt: skip
    parser.add_argument("--demo", action="store_true", help="the demo's sessions (a script each)")
    parser.add_argument(
        "--answer-ms", type=int, default=0, metavar="MS",
        help="the model streams its answer over about MS (0: at once)",
    )  # fmt: skip
    parser.add_argument(
        "--separate-worker", action="store_true",
        help="serve --workers 0 and one `skillog worker` process (the HTTP loop apart)",
    )  # fmt: skip
    parser.add_argument(
        "--postgres", action="store_true",
        help="on a throwaway PostgreSQL cluster (tests/pgcluster.py) instead of SQLite",
    )  # fmt: skip
    parser.add_argument(
        "--micro", type=int, default=0, metavar="N",
        help="CPU per submission and per follow: N of each against serve --workers 0",
    )  # fmt: skip
    parser.add_argument("--rounds", type=int, default=3, help="rounds of --micro (3)")
    parser.add_argument(
        "--only", choices=("submit", "follow"), help="--micro: only this (to profile it)"
    )
    options = parser.parse_args()
    options.label = "SQLite"
    run = micro if options.micro else main
    if not options.postgres:
        trio.run(run, options, None)
        raise SystemExit(0)
    fleet = module(HERE / "fleet.py")
    pg = fleet.pg_urls()
    if pg is None:
        raise SystemExit("no PostgreSQL server binaries (initdb) found")
    try:
        options.label = "PostgreSQL"
        trio.run(run, options, pg[1]())
    finally:
        pg[0].stop()
