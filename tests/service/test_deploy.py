"""Deploying the service (issue 27, items 1-5), request by request: console sessions
instead of the token as a cookie, forwarded headers only from trusted proxies (and a
real nginx in front, with TLS), caps on live streams, probes, 405s, the access log,
lone surrogates, no server paths, the token commands."""

from __future__ import annotations

import json
import logging
import os
import re
import shutil
import socket
import stat
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx2 as httpx
import pytest
import trio

from eventlog import closing
from orchestrator.cli import main
from orchestrator.service._console_sessions import ConsoleSessions
from orchestrator.skills._config import load_service_config, remove_service_tokens

from .conftest import Service, running_service
from .test_api import submit, wait_for

COOKIE = "skillog_console"


def cookie_of(response: httpx.Response) -> str:
    found = re.search(COOKIE + r"=([^;]+)", response.headers["set-cookie"])
    assert found, response.headers
    return found.group(1)


async def test_the_console_cookie_is_a_session_logout_and_token_removal_end_it(
    service: Service,
) -> None:
    token = service.tokens["victor"]
    async with service.client(None) as browser:
        ok = await browser.post("/api/login", json={"token": token})
        assert ok.status_code == 200
        assert token not in ok.headers["set-cookie"]
        stolen = cookie_of(ok)
        assert stolen != token and len(stolen) >= 40
        assert (await browser.get("/api/whoami")).json()["name"] == "victor"
        assert (await browser.post("/api/logout", json={})).status_code == 200
    async with service.client(None) as thief:  # the same cookie, after the logout
        again = await thief.get("/api/whoami", headers={"cookie": f"{COOKIE}={stolen}"})
        assert again.status_code == 401
        # The old design's cookie (the token itself) opens nothing either.
        raw = await thief.get("/api/whoami", headers={"cookie": f"{COOKIE}={token}"})
        assert raw.status_code == 401
    async with service.client(None) as browser:
        cookie = cookie_of(await browser.post("/api/login", json={"token": token}))
        assert (await browser.get("/console")).status_code == 200
        assert remove_service_tokens(str(service.config), "victor") == 1
        await trio.sleep(1.1)  # the book re-reads the file at most once a second
        gone = await browser.get("/api/whoami", headers={"cookie": f"{COOKIE}={cookie}"})
        assert gone.status_code == 401


async def test_console_sessions_expire_idle_and_absolute(autojump_clock: object) -> None:
    sessions = ConsoleSessions(idle_s=10, absolute_s=25)
    first = sessions.open("d" * 64)
    assert first not in repr(sessions)  # kept as its sha256 only
    await trio.sleep(9)
    assert sessions.token_of(first) == "d" * 64
    await trio.sleep(9)  # used 9 s ago: still alive
    assert sessions.token_of(first) == "d" * 64
    await trio.sleep(11)
    assert sessions.token_of(first) is None  # idle too long
    second = sessions.open("e" * 64)
    for _ in range(4):
        await trio.sleep(6)
        assert sessions.token_of(second) == "e" * 64
    await trio.sleep(6)  # 30 s since the login, used every 6 s
    assert sessions.token_of(second) is None
    third = sessions.open("f" * 64)
    assert sessions.close_token("f" * 64) == 1 and sessions.token_of(third) is None


async def test_forwarded_headers_only_from_trusted_proxies(
    tmp_path: Path, service_env: tuple[Path, dict[str, str]]
) -> None:
    config, tokens = service_env
    origin = "https://skillog.example"
    forwarded = {"x-forwarded-proto": "https", "x-forwarded-host": "skillog.example"}
    # Without --trusted-proxy, anyone's X-Forwarded-* count for nothing.
    async with (
        running_service(tmp_path / "a", config, tokens) as service,
        service.client(None) as browser,
    ):
        login = await browser.post("/api/login", json={"token": tokens["sam"]}, headers=forwarded)
        assert "secure" not in login.headers["set-cookie"].lower()
        cross = await browser.post(
            "/api/sessions", json={"task": "x"}, headers={**forwarded, "origin": origin}
        )
        assert cross.status_code == 403 and cross.json()["field"] == "header.origin"
    args = ("--trusted-proxy", "127.0.0.0/8", "--public-origin", origin)
    async with (
        running_service(tmp_path / "b", config, tokens, *args) as service,
        service.client(None) as browser,
    ):
        login = await browser.post("/api/login", json={"token": tokens["sam"]}, headers=forwarded)
        assert "; secure" in login.headers["set-cookie"].lower()
        cookie = {"cookie": f"{COOKIE}={cookie_of(login)}"}
        # A proxy that rewrites Host (to the upstream's) and says the original.
        made = await browser.post(
            "/api/sessions",
            json={"task": "behind a proxy"},
            headers={**forwarded, **cookie, "origin": origin},
        )
        assert made.status_code == 201, made.text
        # One that rewrites Host and says nothing: the proxy is trusted to route.
        quiet = await browser.post(
            "/api/sessions",
            json={"task": "x"},
            headers={"x-forwarded-proto": "https", **cookie, "origin": origin},
        )
        assert quiet.status_code == 201, quiet.text
        # Another site's page, through the proxy: refused.
        evil = await browser.post(
            "/api/sessions",
            json={"task": "x"},
            headers={**forwarded, **cookie, "origin": "https://evil.example"},
        )
        assert evil.status_code == 403
        # A name this server does not answer for (DNS rebinding): 421.
        rebound = await browser.get(
            "/api/whoami", headers={**forwarded, **cookie, "x-forwarded-host": "evil.example"}
        )
        assert rebound.status_code == 421 and rebound.json()["field"] == "header.host"
    # A public origin without a proxy in front: Host itself must be its host.
    async with (
        running_service(tmp_path / "c", config, tokens, "--public-origin", origin) as service,
        service.client("victor") as client,
    ):
        assert (await client.get("/api/whoami")).status_code == 421
        named = await client.get("/api/whoami", headers={"host": "skillog.example"})
        assert named.status_code == 200
        assert (await client.get("/api/live")).status_code == 200  # probes: any host


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextmanager
def nginx(tmp_path: Path, port: int, upstream: str) -> Iterator[None]:
    """Debian's nginx, TLS on ``port`` with a fresh self-signed certificate, proxying
    to ``upstream`` the way docs/service.md shows (its ``location`` block, verbatim)."""
    root = tmp_path / "nginx"
    root.mkdir()
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
         "-subj", "/CN=127.0.0.1", "-keyout", str(root / "key.pem"),
         "-out", str(root / "cert.pem")],
        check=True, capture_output=True,
    )  # fmt: skip
    doc = (Path(__file__).parents[2] / "docs" / "service.md").read_text()
    location = re.search(r"(    location / \{.*?\n    \})", doc, re.S)
    assert location, "docs/service.md shows the nginx location block"
    kinds = ("client_body", "proxy", "fastcgi", "uwsgi", "scgi")
    temp = " ".join(f"{kind}_temp_path {root}/{kind};" for kind in kinds)
    (root / "nginx.conf").write_text(
        f"daemon off; master_process off; worker_processes 1; pid {root}/nginx.pid;\n"
        f"error_log {root}/error.log;\nevents {{ worker_connections 512; }}\n"
        f"http {{ access_log off; {temp}\n"
        f"  server {{\n    listen 127.0.0.1:{port} ssl;\n    server_name skillog.example;\n"
        f"    ssl_certificate {root}/cert.pem; ssl_certificate_key {root}/key.pem;\n"
        f"{location.group(1).replace('http://127.0.0.1:8765', upstream)}\n  }}\n}}\n"
    )
    proc = subprocess.Popen(
        [shutil.which("nginx") or "nginx", "-p", str(root), "-c", str(root / "nginx.conf")],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 20
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                assert proc.poll() is None, (root / "error.log").read_text()
                assert time.monotonic() < deadline, "nginx did not start"
                time.sleep(0.05)
        yield
    finally:
        proc.terminate()
        proc.wait(timeout=10)


@pytest.mark.skipif(
    shutil.which("nginx") is None and not os.environ.get("CI"),  # CI installs it (.ci/test)
    reason="apt-get install nginx-light",
)
async def test_behind_a_real_nginx_with_tls(
    tmp_path: Path, service_env: tuple[Path, dict[str, str]], caplog: pytest.LogCaptureFixture
) -> None:
    config, tokens = service_env
    port = free_port()
    origin = f"https://127.0.0.1:{port}"
    args = ("--trusted-proxy", "127.0.0.1", "--public-origin", origin)
    caplog.set_level(logging.INFO, "skillog.access")
    async with running_service(tmp_path, config, tokens, *args) as service:
        with nginx(tmp_path, port, service.url):
            async with httpx.AsyncClient(
                base_url=origin, verify=False, trust_env=False, timeout=30
            ) as browser:
                login = await browser.post("/api/login", json={"token": tokens["sam"]})
                assert login.status_code == 200, login.text
                assert "; secure" in login.headers["set-cookie"].lower()
                made = await browser.post(
                    "/api/sessions", json={"task": "through nginx"}, headers={"origin": origin}
                )
                assert made.status_code == 201, made.text
                session = made.json()["session_id"]
                await wait_for(service, session, "awaiting_approval")
                # A live stream through the proxy: what is approved meanwhile arrives,
                # and the stream ends after session.ended.
                async with browser.stream("GET", f"/api/sessions/{session}/stream") as stream:
                    assert stream.status_code == 200
                    await approve(service, session)
                    with trio.fail_after(20):
                        text = (await stream.aread()).decode()
                ids = [int(i) for i in re.findall(r"^id: (\d+)$", text, re.M)]
                assert ids == list(range(len(ids))) and '"type":"session.ended"' in text
    lines = [r.getMessage() for r in caplog.records if r.name == "skillog.access"]
    made_line = next(line for line in lines if '"POST /api/sessions HTTP/1.1" 201' in line)
    assert made_line.startswith("127.0.0.1 - sam [")  # the client, through the proxy


async def test_stream_caps_and_a_responsive_server(
    tmp_path: Path, service_env: tuple[Path, dict[str, str]]
) -> None:
    config, tokens = service_env
    async with running_service(tmp_path, config, tokens, "--max-streams", "60", "80") as service:
        session = await submit(service)
        await wait_for(service, session, "awaiting_approval")
        url = f"/api/sessions/{session}/stream"
        opened: list[int] = []
        refused: list[httpx.Response] = []
        hold = trio.Event()
        answered = trio.Semaphore(0, max_value=1000)

        async def one(client: httpx.AsyncClient) -> None:
            async with client.stream("GET", url) as response:
                if response.status_code == 429:
                    await response.aread()
                    refused.append(response)
                    answered.release()
                    return
                assert response.status_code == 200
                opened.append(1)
                answered.release()
                await hold.wait()

        limits = httpx.Limits(max_connections=None, max_keepalive_connections=None)
        async with (
            service.client("victor", limits=limits) as victor,
            service.client("april", limits=limits) as april,
            service.client("alice") as alice,
            trio.open_nursery() as nursery,
        ):
            for client, count in ((victor, 100), (april, 30)):
                # victor: 60 are the token's cap, 40 refused; april: 20 more fill the
                # address's 80, 10 refused.
                for _ in range(count):
                    nursery.start_soon(one, client)
                with trio.fail_after(30):
                    for _ in range(count):
                        await answered.acquire()
            assert len(opened) == 80 and len(refused) == 50
            assert all(r.headers["retry-after"].isdigit() for r in refused)
            reasons = {r.json()["error"].split(" holds")[0] for r in refused}
            assert reasons == {"token 'victor'", "this address"}
            # Answered while the 80 streams are held open (a server blocked by them would
            # not answer before hold.set()); no bound on wall time, which a loaded
            # machine stretches.
            with trio.fail_after(30):
                assert (await alice.get("/api/health")).status_code == 200
            hold.set()


async def approve(service: Service, session: str) -> None:
    async with service.client("april") as approver:
        call = (await approver.get(f"/api/approvals?session={session}")).json()["approvals"]
        ok = await approver.post(
            f"/api/sessions/{session}/approvals/{call[0]['call_id']}/approve", json={}
        )
        assert ok.status_code == 200


async def test_streams_of_ended_sessions_end(service: Service) -> None:
    session = await submit(service)
    await wait_for(service, session, "awaiting_approval")
    await approve(service, session)
    await wait_for(service, session, "ended")
    async with service.client("victor") as client:
        ids = []
        with trio.fail_after(10):  # the stream ends by itself after session.ended
            async with client.stream("GET", f"/api/sessions/{session}/stream") as stream:
                async for line in stream.aiter_lines():
                    if line.startswith("id: "):
                        ids.append(int(line[4:]))
                    if '"type":"session.ended"' in line:
                        last_type = "session.ended"
        assert last_type == "session.ended" and ids == list(range(len(ids)))
        # Reconnecting after the end: 204 tells an EventSource to stop.
        again = await client.get(
            f"/api/sessions/{session}/stream", headers={"last-event-id": str(ids[-1])}
        )
        assert again.status_code == 204


async def test_probes_methods_surrogates_and_paths(
    service: Service, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    async with service.client(None) as anonymous:
        live = await anonymous.get("/api/live")
        assert live.status_code == 200 and live.json() == {"status": "ok"}
        assert (await anonymous.get("/api/ready")).status_code == 401
        # A method the path does not take: 405 naming those it does, even without a token.
        put = await anonymous.put("/api/sessions", content=b"x")
        assert put.status_code == 405 and put.headers["allow"] == "GET, HEAD, POST"
    async with service.client("alice") as client:
        assert (await client.get("/api/ready")).json() == {"status": "ready"}
        post = await client.post("/api/health")
        assert post.status_code == 405 and post.headers["allow"] == "GET, HEAD"
        delete = await client.delete("/console")
        assert delete.status_code == 405 and delete.headers["allow"] == "GET, HEAD"
        lone = await client.post(
            "/api/sessions",
            content=b'{"task": "a \\ud83d alone"}',
            headers={"content-type": "application/json"},
        )
        assert lone.status_code == 400
        assert "lone UTF-16 surrogate \\ud83d at byte 12" in lone.json()["error"]
        pair = await client.post("/api/sessions", content=b'{"task": "\\ud83d\\ude00"}',
                                 headers={"content-type": "application/json"})  # fmt: skip
        assert pair.status_code == 201
        session = pair.json()["session_id"]
        assert pair.json()["model"] == "scripted:turns.yaml"
        where = str(tmp_path)
        assert where not in (await client.get(f"/api/sessions/{session}")).text
        assert where not in (await client.get("/api/sessions")).text
        assert where not in (await client.get("/console")).text
        assert where not in (await client.get(f"/console/sessions/{session}")).text
        # The scripted model's path is in the recorded bytes (hashed as they were), and
        # every reader shows its name: the events, the live stream, the audit page.
        script = str(tmp_path / "turns.yaml")
        await wait_for(service, session, "awaiting_approval")
        events = (await client.get(f"/api/sessions/{session}/events")).json()["events"]
        assert script not in json.dumps(events)
        started = events[0]
        assert started["body"]["model"] == "turns.yaml" and started["verbatim"] is False
        async with closing(service.store.read(session, to_seq=1)) as stored:
            (first,) = [e async for e in stored]
        assert script.encode() in first.body  # the log itself is unchanged
        assert all(e["verbatim"] for e in events if "turns.yaml" not in json.dumps(e))
        (request,) = (await client.get(f"/api/approvals?session={session}")).json()["approvals"]
        approve = f"/api/sessions/{session}/approvals/{request['call_id']}/approve"
        assert (await client.post(approve, json={})).status_code == 200
        await wait_for(service, session, "ended")
        frames = (await client.get(f"/api/sessions/{session}/stream")).text  # closed at the end
        assert "session.ended" in frames
        assert "turns.yaml" in frames and script not in frames
        audit = (await client.get(f"/console/sessions/{session}/audit")).text
        assert "turns.yaml" in audit and script not in audit
        # The name shown is the name a submission may give.
        shown = {"task": "t", "model": "scripted:turns.yaml"}
        again = await client.post("/api/sessions", json=shown)
        assert again.status_code == 201
    assert stat.S_IMODE(os.stat(service.db).st_mode) == 0o600


async def test_the_access_log_says_who_without_secrets(
    service: Service, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, "skillog.access")
    session = await submit(service)
    await wait_for(service, session, "awaiting_approval")
    async with service.client(None) as anonymous:
        await anonymous.get("/api/sessions", headers={"authorization": "Bearer skl_guess"})
        await anonymous.post("/api/login", json={"token": service.tokens["victor"]})
    async with service.client("april") as approver:
        call = (await approver.get(f"/api/approvals?session={session}")).json()["approvals"]
        path = f"/api/sessions/{session}/approvals/{call[0]['call_id']}/deny"
        assert (await approver.post(path, json={"reason": "no"})).status_code == 200
    lines = [r.getMessage() for r in caplog.records if r.name == "skillog.access"]
    pattern = re.compile(r'^127\.0\.0\.1 - (\S+) \[\d\d/\w{3}/\d{4}:\d\d:\d\d:\d\d \+0000\] '
                         r'"(\w+) (\S+) HTTP/1\.1" (\d{3}) (\d+|-) "[^"]*" "[^"]*"$')  # fmt: skip
    parsed = [pattern.match(line) for line in lines]
    assert all(parsed), lines
    found = {(m[1], m[2], m[3], m[4]) for m in parsed if m}
    assert ("-", "GET", "/api/sessions", "401") in found
    assert ("april", "POST", path, "200") in found
    assert ("sam", "POST", "/api/sessions", "201") in found
    text = "\n".join(lines)
    assert not any(token in text for token in service.tokens.values())


def test_tokens_list_add_revoke(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    config = tmp_path / "config.yaml"
    monkeypatch.setenv("SKILLOG_CONFIG", str(config))
    assert main(["serve", "tokens", "add", "ops", "--roles", "viewer,approver"]) == 0
    token = re.search(r"skl_\S+", capsys.readouterr().out)
    assert token is not None and token.group(0) not in config.read_text()
    assert main(["serve", "tokens", "add", "ops"]) == 2
    assert "exists" in capsys.readouterr().err
    assert main(["serve", "tokens", "add", "ci", "--roles", "submitter"]) == 0
    capsys.readouterr()
    assert main(["serve", "tokens", "list"]) == 0
    listed = capsys.readouterr().out.splitlines()
    assert [line.split("\t")[:2] for line in listed] == [
        ["ops", "viewer,approver"],
        ["ci", "submitter"],
    ]
    assert main(["serve", "tokens", "revoke", "ops"]) == 0
    assert [t.name for t in load_service_config(str(config)).tokens] == ["ci"]
    assert main(["serve", "tokens", "revoke", "ops"]) == 1
    assert "no token named 'ops'" in capsys.readouterr().err


async def test_tokens_through_the_api(service: Service) -> None:
    async with service.client("april") as approver:
        assert (await approver.get("/api/tokens")).status_code == 403
        assert (await approver.post("/api/tokens", json={"name": "x"})).status_code == 403
    async with service.client("alice") as admin:
        listed = (await admin.get("/api/tokens")).json()["tokens"]
        assert {"name": "victor", "roles": ["viewer"]} in listed
        assert all(set(t) == {"name", "roles"} for t in listed)  # nothing secret
        made = await admin.post("/api/tokens", json={"name": "ci", "roles": ["submitter"]})
        assert made.status_code == 201
        token = made.json()["token"]
        assert token not in service.config.read_text()
        twice = await admin.post("/api/tokens", json={"name": "ci"})
        assert twice.status_code == 409 and twice.json()["field"] == "$.name"
        bad = await admin.post("/api/tokens", json={"name": "ci2", "roles": ["root"]})
        assert bad.status_code == 422
        async with service.client(None) as browser:
            login = await browser.post("/api/login", json={"token": token})
            assert login.status_code == 200  # the new token works at once
            revoked = await admin.post("/api/tokens/ci/revoke", json={})
            assert revoked.json() == {"name": "ci", "revoked": 1, "console_sessions_ended": 1}
            assert (await browser.get("/api/whoami")).status_code == 401
        gone = await admin.get("/api/whoami", headers={"authorization": f"Bearer {token}"})
        assert gone.status_code == 401
        assert (await admin.post("/api/tokens/ci/revoke", json={})).status_code == 404


@pytest.mark.parametrize(
    ("option", "said"),
    [
        (["--trusted-proxy", "10.0.0.300"], "--trusted-proxy '10.0.0.300': not an IP address"),
        (["--public-origin", "https://x.example/app"], "--public-origin 'https://x.example/app'"),
        (["--max-streams", "0", "5"], "--max-streams takes two numbers of 1 or more"),
        (["--webhook", "http://127.0.0.1:9/hook"], "set SKILLOG_WEBHOOK_SECRET to a secret"),
    ],
)
def test_bad_deployment_settings_are_one_line_errors(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    option: list[str],
    said: str,
) -> None:
    monkeypatch.setenv("SKILLOG_CONFIG", str(tmp_path / "config.yaml"))
    monkeypatch.delenv("SKILLOG_WEBHOOK_SECRET", raising=False)
    db = str(tmp_path / "s.db")
    assert main(["serve", "--db", db, "--bind", "127.0.0.1:0", *option]) == 2
    err = capsys.readouterr().err
    assert said in err and "Traceback" not in err and len(err.strip().splitlines()) == 1
