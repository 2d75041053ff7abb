"""``skillog serve`` as a user runs it: a real process; the first run creates, prints
and stores (hashed) an admin token; SIGTERM stops it cleanly."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx2 as httpx
import pytest
import trio

from orchestrator.cli import main
from orchestrator.service import TokenBook, is_loopback, new_token, token_digest
from orchestrator.skills._config import add_service_token, load_service_config


def start(tmp_path: Path, env: dict[str, str], *args: str) -> tuple[subprocess.Popen[str], str]:
    """``skillog serve`` on a free loopback port; returns the process and its URL. Its
    stderr goes to a file (a pipe nobody reads could fill and stall the server)."""
    err = tmp_path / "serve.err"
    with err.open("w") as sink:
        proc = subprocess.Popen(
            [sys.executable, "-m", "orchestrator.cli", "serve", "--db", str(tmp_path / "s.db"),
             "--bind", "127.0.0.1:0", *args],
            cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=sink, text=True,
            stdin=subprocess.DEVNULL,
        )  # fmt: skip
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and proc.poll() is None:
        found = re.search(r"skillog serve: (http://127\.0\.0\.1:\d+)", err.read_text())
        if found:
            return proc, found.group(1)
        time.sleep(0.05)
    proc.kill()
    raise AssertionError(f"serve did not start: {err.read_text()}")


def stop(proc: subprocess.Popen[str]) -> str:
    proc.send_signal(signal.SIGTERM)
    out, _ = proc.communicate(timeout=60)
    assert proc.returncode == 0
    return out


def test_first_run_prints_a_token_once_and_stores_its_hash(tmp_path: Path) -> None:
    config = tmp_path / "config.yaml"
    env = {**os.environ, "SKILLOG_CONFIG": str(config), "HOME": str(tmp_path)}
    proc, url = start(tmp_path, env)
    try:
        assert proc.stdout is not None
        token = re.search(r"skl_\S+", "".join(proc.stdout.readline() for _ in range(3)))
        assert token is not None
        text = config.read_text()
        assert token.group(0) not in text and token_digest(token.group(0)) in text
        auth = {"authorization": f"Bearer {token.group(0)}"}
        who = httpx.get(url + "/api/whoami", headers=auth, trust_env=False)
        assert who.json() == {"name": "admin", "roles": ["admin"]}
        assert httpx.get(url + "/api/whoami", trust_env=False).status_code == 401
    finally:
        stop(proc)
    proc, url = start(tmp_path, env)  # the second run creates nothing
    assert "skl_" not in stop(proc)
    assert config.read_text() == text


def test_loopback_only_by_default() -> None:
    assert is_loopback("127.0.0.1:8765") and is_loopback("[::1]:80") and is_loopback("localhost:1")
    assert not is_loopback("0.0.0.0:8765") and not is_loopback("192.168.1.2:80")
    from orchestrator.cli._main import _parser

    assert _parser("serve")[0].parse_args(["serve"]).bind == "127.0.0.1:8765"


def test_add_token_prints_once_and_refuses_bad_names(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    config = tmp_path / "config.yaml"
    config.write_text("# mine\nskills:\n  lenient: true\n")
    monkeypatch.setenv("SKILLOG_CONFIG", str(config))
    assert main(["serve", "--add-token", "ops", "--roles", "viewer,approver"]) == 0
    token = re.search(r"skl_\S+", capsys.readouterr().out)
    assert token is not None
    text = config.read_text()
    assert text.startswith("# mine\nskills:\n  lenient: true\n")  # the rest kept as it was
    assert token.group(0) not in text and token_digest(token.group(0)) in text
    assert load_service_config(str(config)).tokens[0].roles == ("viewer", "approver")
    assert main(["serve", "--add-token", "x y"]) == 2
    assert main(["serve", "--add-token", "z", "--roles", "root"]) == 2
    assert config.read_text() == text


async def test_a_broken_config_file_refuses_every_token(tmp_path: Path) -> None:
    config = tmp_path / "config.yaml"
    token, entry = new_token("ops", ("admin",))
    add_service_token(str(config), entry)
    book = TokenBook(str(config))
    assert (await book.lookup(token)) is not None
    config.write_text(config.read_text().replace("roles:", "rolez:"))
    await trio.sleep(1.1)
    assert (await book.lookup(token)) is None


def test_a_bad_database_is_a_one_line_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("SKILLOG_CONFIG", str(tmp_path / "config.yaml"))
    bad = tmp_path / "x.db"
    bad.write_bytes(b"not a database" * 100)
    assert main(["serve", "--db", str(bad), "--bind", "127.0.0.1:0"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("skillog serve: error:") and "Traceback" not in err
    assert main(["serve", "--workers", "-1"]) == 2
