"""A real service for the tests: Hypercorn's trio worker on a free loopback port,
serving the app over a real SQLite log, with one in-process worker, wired exactly as
``skillog serve`` wires it (``cli/_serve.build``); httpx (the model SDKs' client) calls
it. The model is scripted; everything else is real."""

from __future__ import annotations

import dataclasses
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path

import httpx2 as httpx
import pytest
import trio

from eventlog import EventStore
from orchestrator._catalog import open_log
from orchestrator._events import PolicyConfig
from orchestrator._previews import PreviewBoard
from orchestrator.cli._main import _parser
from orchestrator.cli._serve import build
from orchestrator.service import Webhook, new_token, serve
from orchestrator.service._sse import Tail
from orchestrator.skills._config import add_service_token

ROLES = {
    "alice": ("admin",),
    "victor": ("viewer",),
    "april": ("approver",),
    "sam": ("submitter",),
}
HOSTILE = '<script>window.__pwned=1</script><img src=x onerror="window.__pwned=2">'
TURNS = """\
turns:
  - text: "Loading the skill."
    tool_calls: [{name: skills.load, arguments: {names: [greet]}}]
  - text: "Running its script <b>now</b>."
    tool_calls: [{name: skills.run_script, arguments: {path: scripts/hi.py, args: ["<i>x</i>"]}}]
  - text: "Done: <script>alert(1)</script>"
"""


@dataclass
class Service:
    url: str
    tokens: dict[str, str]
    store: EventStore
    config: Path
    db: Path
    tail: Tail
    previews: PreviewBoard

    def client(self, who: str | None = "alice", **kw: object) -> httpx.AsyncClient:
        headers = {} if who is None else {"authorization": f"Bearer {self.tokens[who]}"}
        return httpx.AsyncClient(
            base_url=self.url, headers=headers, trust_env=False, timeout=30, **kw
        )


def write_skill(root: Path, description: str = "Greets people.") -> Path:
    skill = root / "skills" / "greet"
    (skill / "scripts").mkdir(parents=True)
    (skill / "SKILL.md").write_text(
        f"---\nname: greet\ndescription: {description!r}\n---\nRun scripts/hi.py.\n"
    )
    (skill / "scripts" / "hi.py").write_text("import sys\nprint('hi', sys.argv[1:])\n")
    return skill


@pytest.fixture
def service_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Path, dict[str, str]]:
    """A configuration file with one token per role, and a home with no skills."""
    config = tmp_path / "config.yaml"
    monkeypatch.setenv("SKILLOG_CONFIG", str(config))
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.delenv("XDG_CONFIG_HOME", raising=False)
    tokens = {}
    for name, roles in ROLES.items():
        token, entry = new_token(name, roles)  # type: ignore[arg-type]
        add_service_token(str(config), entry)
        tokens[name] = token
    return config, tokens


@asynccontextmanager
async def running_service(
    tmp_path: Path,
    config: Path,
    tokens: dict[str, str],
    *extra: str,
    policies: Mapping[str, PolicyConfig] | None = None,
    db: Path | None = None,
    webhook: Webhook | None = None,
    turns: str = TURNS,
    skill: Path | None = None,
) -> AsyncIterator[Service]:
    """The service as ``skillog serve`` wires it, with ``extra`` command-line options
    (and ``policies`` as its policy presets, when given), over ``db`` (default: a new
    ``service.db`` in ``tmp_path``), the scripted model answering with ``turns``, its
    one skill ``skill`` (default: greet, with a hostile description)."""
    skill = skill or write_skill(tmp_path, HOSTILE)
    script = tmp_path / "turns.yaml"
    script.write_text(turns)
    db = db or tmp_path / "service.db"
    args = _parser("serve")[0].parse_args(
        ["serve", "--db", str(db), "--model", f"scripted:{script}", "--skills", str(skill),
         "--tier", "user", "--poll-ms", "50", "--project", str(tmp_path), *extra]
    )  # fmt: skip
    stop = trio.Event()
    async with open_log(db) as store, trio.open_nursery() as nursery:
        ctx, workers = build(store, args)
        if policies is not None:
            ctx = dataclasses.replace(ctx, policies=policies)
        if webhook is not None:
            ctx = dataclasses.replace(ctx, webhook=webhook)
        urls = await nursery.start(
            lambda task_status: serve(
                ctx, "127.0.0.1:0", stop=stop, workers=workers, task_status=task_status
            )
        )
        yield Service(
            url=urls[0],
            tokens=tokens,
            store=store,
            config=config,
            db=db,
            tail=ctx.tail,
            previews=ctx.previews,
        )
        stop.set()


@pytest.fixture
async def service(
    tmp_path: Path, service_env: tuple[Path, dict[str, str]]
) -> AsyncIterator[Service]:
    config, tokens = service_env
    async with running_service(tmp_path, config, tokens) as service:
        yield service
