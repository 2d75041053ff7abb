"""The README's examples, run as a user types them, against what the README says.

Every ``sh`` block of README.md has a test here (one fails when a block is added without
one). Commands run through bash in a scratch directory that looks like the repository
root (``.venv`` and ``orchestrator`` link to the real ones), with ``HOME`` there too.
What a test changes is named in its docstring: installs are skipped (the test extra is
installed), placeholders (SESSION, CALL, a token, a password URL) get real values, and
network services are local stand-ins on loopback (a PostgreSQL cluster, an OTLP receiver,
an Anthropic endpoint). Printed output is compared with the README's, after replacing
what differs each run (ids, times, durations, tokens).
"""

from __future__ import annotations

import http.server
import json
import os
import re
import select
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).parents[1]
README = (ROOT / "README.md").read_text()
VENV = Path(sys.prefix)


def fenced_blocks(text: str) -> list[tuple[str, str]]:
    """``(language, body)`` of each fenced block, in order."""
    return [(m[1], m[2]) for m in re.finditer(r"^```(\w*)\n(.*?)^```$", text, re.M | re.S)]


BLOCKS = fenced_blocks(README)


def block_after(start: str) -> str:
    """The body of the block that follows the one starting with ``start``."""
    for i, (_, body) in enumerate(BLOCKS):
        if body.startswith(start):
            return BLOCKS[i + 1][1]
    raise AssertionError(f"no README block starts with {start!r}")


def sh_block(start: str) -> list[str]:
    """The command lines of the ``sh`` block starting with ``start``."""
    for lang, body in BLOCKS:
        if lang == "sh" and body.startswith(start):
            return body.splitlines()
    raise AssertionError(f"no sh block starts with {start!r}")


def normalized(text: str) -> str:
    """Output with what differs each run replaced: ids, times, durations, tokens."""
    text = re.sub(r"\b[0-9a-f]{32}\b", "<id>", text)
    text = re.sub(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d", "<time>", text)
    text = re.sub(r"\b\d+ ms\b", "<n> ms", text)
    text = re.sub(r'"duration_ms":\d+', '"duration_ms":<n>', text)
    text = re.sub(r"skl_[\w-]+", "skl_<token>", text)
    text = re.sub(r"\d+\.\d+\.\d+\.\d+:\d+", "<host:port>", text)
    return re.sub(r"/\S*/config\.yaml", "<config>", text)


def assert_same_transcript(got: str, readme: str) -> None:
    """Equal after :func:`normalized`; a line cut with "…" (at the width, which depends
    on the digits of a duration) is compared up to the cut."""
    got_lines, readme_lines = normalized(got).splitlines(), normalized(readme).splitlines()
    assert len(got_lines) == len(readme_lines), got
    for a, b in zip(got_lines, readme_lines, strict=True):
        if a.endswith("…") or b.endswith("…"):
            a, b = a.removesuffix("…"), b.removesuffix("…")
            a, b = a[: min(len(a), len(b))], b[: min(len(a), len(b))]
        assert a == b, got


@pytest.fixture
def user(tmp_path: Path) -> Callable[..., subprocess.CompletedProcess[str]]:
    """Run a README line with bash in a directory that looks like the repository root."""
    (tmp_path / ".venv").symlink_to(VENV)
    (tmp_path / "orchestrator").symlink_to(ROOT / "orchestrator")
    env = {
        **os.environ,
        "HOME": str(tmp_path),
        "XDG_CONFIG_HOME": str(tmp_path / ".config"),
        "XDG_DATA_HOME": str(tmp_path / ".local/share"),
        "PATH": f"{VENV / 'bin'}:{os.environ['PATH']}",
        "COLUMNS": "200",
    }
    env.pop("SKILLOG_DB", None)
    env.pop("SKILLOG_CONFIG", None)

    def run(line: str, check: bool = True, **extra: str) -> subprocess.CompletedProcess[str]:
        proc = subprocess.run(
            ["bash", "-c", line],
            cwd=tmp_path,
            env={**env, **extra},
            capture_output=True,
            text=True,
            timeout=300,
        )
        if check:
            assert proc.returncode == 0, f"{line}\n{proc.stdout}\n{proc.stderr}"
        return proc

    return run


def test_every_sh_block_has_a_test() -> None:
    starts = [body.split("\n", 1)[0] for lang, body in BLOCKS if lang == "sh"]
    handled = {
        "python3 -m venv .venv": "test_the_quick_start_demo_prints_what_the_readme_shows",
        "bash .ci/test": "this very run",
        "skillog approvals --db": "test_approvals_from_another_process",
        "pip install 'skillog[postgres]'": "test_the_postgresql_lines",
        ".venv/bin/skillog submit": "test_the_fleet_lines_and_their_output",
        ".venv/bin/pip install -q -e '.[service]'": "test_serve_and_its_curl_lines",
        "T=skl_...": "test_serve_and_its_curl_lines",
        "docker run": "test_the_otel_lines",
    }
    assert [s for s in starts if not s.startswith(tuple(handled))] == []


def test_the_quick_start_demo_prints_what_the_readme_shows(user: Any) -> None:
    """The install is the test's own venv; the demo runs as typed."""
    line = sh_block("python3 -m venv .venv")[0]
    assert line.endswith("&& .venv/bin/skillog demo")
    out = user(".venv/bin/skillog demo").stdout
    assert_same_transcript(out, block_after("python3 -m venv .venv"))


def test_the_embedding_example_runs(tmp_path: Path, user: Any) -> None:
    """The Python example as written, its model at a local Anthropic Messages endpoint
    (ANTHROPIC_BASE_URL), which asks for the host tool once and then answers."""
    (python,) = [body for lang, body in BLOCKS if lang == "python"]
    skill = tmp_path / "skills" / "support-triage"
    skill.mkdir(parents=True)
    (skill / "SKILL.md").write_text(
        "---\nname: support-triage\ndescription: Triage support questions.\n---\nBe brief.\n"
    )
    (tmp_path / "example.py").write_text(python)
    with anthropic_endpoint() as (url, requests):
        out = user(
            ".venv/bin/python example.py", ANTHROPIC_BASE_URL=url, ANTHROPIC_API_KEY="test"
        ).stdout
    assert re.fullmatch(r"[0-9a-f]{32} ended\n", out), out
    assert len(requests) == 2
    results = [
        block["content"]
        for message in requests[1]["messages"]
        if isinstance(message["content"], list)
        for block in message["content"]
        if block.get("type") == "tool_result"
    ]
    assert results == ["order 1234: shipped"]
    assert user(".venv/bin/skillog log verify").returncode == 0


def test_approvals_from_another_process(user: Any, tmp_path: Path) -> None:
    """A session that waits for an approval (a third-party skill's script, run with no
    one at the terminal), then the README's three lines with SESSION and CALL."""
    skill = tmp_path / "skills" / "tp"
    (skill / "scripts").mkdir(parents=True)
    (skill / "SKILL.md").write_text("---\nname: tp\ndescription: A third-party skill.\n---\n")
    (skill / "scripts" / "hello.py").write_text("print('hello')\n")
    (tmp_path / "turns.yaml").write_text(
        "turns:\n"
        "  - tool_calls: [{name: skills.load, arguments: {names: [tp]}}]\n"
        "  - tool_calls: [{name: skills.run_script, arguments: {path: scripts/hello.py}}]\n"
        "  - text: done\n"
    )
    started = user(
        "skillog run 'say hello' --model scripted:turns.yaml --skills skills/tp"
        " --tier third-party --db skillog.db < /dev/null"
    )
    assert "skillog approve|deny" in started.stdout
    pending = user(".venv/bin/skillog approvals --db skillog.db --json").stdout
    (request,) = map(json.loads, pending.splitlines())
    lines = [line.split("#")[0].strip() for line in sh_block("skillog approvals --db")]
    for line in lines:
        line = line.replace("SESSION", request["session_id"])
        user(line.replace("CALL", request["call_id"]))
    tail = user(f"skillog log show {request['session_id']} --db skillog.db").stdout
    assert "decided_by" in tail and "looks fine" in tail and "session.ended" in tail


def test_the_postgresql_lines(user: Any, pg_dsn: str) -> None:
    """The driver is installed; the URL is a throwaway cluster's; SESSION is the demo's."""
    install, demo, *rest = sh_block("pip install 'skillog[postgres]'")
    url = "postgresql://skillog:PASSWORD@db.internal:5432/agents"
    assert install == "pip install 'skillog[postgres]'" and demo.startswith("skillog demo")
    session = re.search(r"session ([0-9a-f]{32})", user(demo.replace(url, pg_dsn)).stdout)
    assert session is not None
    script = "\n".join(rest).replace(url, pg_dsn).replace("SESSION", session[1])
    out = user(script).stdout  # one shell: the export carries to the next line
    assert f"{session[1]}" in out and "blobs intact" in out and "byte for byte" in out, out


def test_the_fleet_lines_and_their_output(user: Any) -> None:
    """Both lines as typed, from what looks like the repository root."""
    submit, work = sh_block(".venv/bin/skillog submit")
    assert len(user(submit).stdout.split()) == 4  # the queued session ids
    out = user(work).stdout
    expected = block_after(".venv/bin/skillog submit")

    def shape(text: str) -> tuple[int, list[str]]:
        # How the four sessions split between the two workers differs each run; the
        # table's lines do not, but for the worker's name.
        lines = normalized(text).replace("worker-b", "worker-a").splitlines()
        table = sorted(re.sub(r" +", " ", line) for line in lines if "(completed)" in line)
        return sum(line.count("ended") for line in lines if line.startswith("worker ")), table

    assert shape(out) == shape(expected)


def test_serve_and_its_curl_lines(user: Any, tmp_path: Path) -> None:
    """The service extra is installed; ``skillog serve`` as typed (on a free port given
    with --bind, the one difference), its first-run output, then each curl line with the
    printed token and the submitted session."""
    assert sh_block(".venv/bin/pip install -q -e '.[service]'")[0].endswith("skillog serve")
    port = _free_port()
    env = {**os.environ, "HOME": str(tmp_path), "XDG_CONFIG_HOME": str(tmp_path / ".config")}
    env.pop("SKILLOG_DB", None)
    serve = subprocess.Popen(
        [str(VENV / "bin/skillog"), "serve", "--bind", f"127.0.0.1:{port}"],
        cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )  # fmt: skip
    try:
        assert serve.stdout is not None
        printed = "".join(_lines_until(serve.stdout, "console at"))
        expected = block_after(".venv/bin/pip install -q -e '.[service]'")
        assert normalized(printed).replace(str(port), "8765") == normalized(expected)
        token = re.search(r"skl_[\w-]+", printed)[0]  # type: ignore[index]
        lines = sh_block("T=skl_...")[1:]
        base = f"http://127.0.0.1:{port}"
        session = ""
        for line in lines:
            line = line.split("#")[0].strip().replace("http://127.0.0.1:8765", base)
            line = line.replace("$T", token).replace("SESSION", session)
            if "/stream" in line:
                line = line.replace("curl -sN", "curl -sN --max-time 3")
            out = user(line, check=False).stdout
            if '"task"' in line:
                session = json.loads(out)["session_id"]
            elif "/api/approvals" in line:
                assert isinstance(json.loads(out), dict | list), out
        assert session and "data: " in out and "session.started" in out, out  # the stream
    finally:
        serve.send_signal(signal.SIGINT)
        serve.communicate(timeout=30)


def test_the_otel_lines(user: Any) -> None:
    """Jaeger is a local OTLP/HTTP receiver (OTEL_EXPORTER_OTLP_ENDPOINT); the other
    lines as typed."""
    lines = sh_block("docker run")[1:]
    with otlp_receiver() as (url, posts):
        outs = [user(line, OTEL_EXPORTER_OTLP_ENDPOINT=url).stdout for line in lines]
    assert "exported 1 sessions" in outs[1] and posts == ["/v1/traces"]
    assert "all skills" in outs[2]


# -- local stand-ins for network services ------------------------------------------------


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _lines_until(stream: Any, marker: str) -> Iterator[str]:
    deadline = time.monotonic() + 60
    while select.select([stream], [], [], max(0.0, deadline - time.monotonic()))[0]:
        line = stream.readline()
        if not line:
            break
        yield line
        if marker in line:
            return
    raise AssertionError(f"the server never printed {marker!r}")


class _Server:
    def __init__(self, handler: type[http.server.BaseHTTPRequestHandler]) -> None:
        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self) -> str:
        self.thread.start()
        return self.url

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()


class anthropic_endpoint:
    """POST /v1/messages: a tool_use of lookup_order, then a text answer."""

    def __init__(self) -> None:
        requests: list[dict[str, Any]] = []
        self.requests = requests

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                requests.append(body)
                content: list[dict[str, Any]] = (
                    [{"type": "tool_use", "id": "toolu_1", "name": "lookup_order",
                      "input": {"order_id": "1234"}}]
                    if len(requests) == 1
                    else [{"type": "text", "text": "Order 1234 has shipped."}]
                )  # fmt: skip
                answer = {
                    "id": f"msg_{len(requests)}",
                    "type": "message",
                    "role": "assistant",
                    "model": body["model"],
                    "content": content,
                    "stop_reason": "tool_use" if len(requests) == 1 else "end_turn",
                    "stop_sequence": None,
                    "usage": {"input_tokens": 10, "output_tokens": 5},
                }
                data = json.dumps(answer).encode()
                self.send_response(200)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self.server = _Server(Handler)

    def __enter__(self) -> tuple[str, list[dict[str, Any]]]:
        return self.server.__enter__(), self.requests

    def __exit__(self, *exc: object) -> None:
        self.server.__exit__()


class otlp_receiver:
    """POST /v1/traces accepted (200, empty body); the paths posted to are kept."""

    def __init__(self) -> None:
        posts: list[str] = []
        self.posts = posts

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                self.rfile.read(int(self.headers["Content-Length"]))
                posts.append(self.path)
                self.send_response(200)
                self.send_header("content-length", "0")
                self.end_headers()

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self.server = _Server(Handler)

    def __enter__(self) -> tuple[str, list[str]]:
        return self.server.__enter__(), self.posts

    def __exit__(self, *exc: object) -> None:
        self.server.__exit__()
