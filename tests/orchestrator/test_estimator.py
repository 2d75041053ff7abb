"""The context window and the token estimator from the configuration file and the
command line; the estimator a session used is recorded, so a re-drive counts the same
way and nothing is recounted (docs/context.md)."""

from __future__ import annotations

import sys
from typing import Any

import pytest

from eventlog import MemoryStore
from orchestrator._context import (
    BYTES_ESTIMATOR,
    TIKTOKEN_ENCODING,
    Estimator,
    EstimatorError,
    Tokenizer,
    choose_estimator,
    tokens_of,
)
from orchestrator._events import (
    ContextCompacted,
    PolicyConfig,
    PromptRendered,
    SessionEnded,
    SessionStarted,
)
from orchestrator._loop import Agent
from orchestrator._prompt import message_line, tail_line
from orchestrator.adapters import ScriptedModel
from replay import load_recording, redrive, replay_session

from .test_context import _proves
from .test_instructions_mode import Recorder


def test_bytes_over_four_counts_the_whole_not_each_chunk() -> None:
    chunks = [b"abcde", b"fg", b"\n"]
    assert Estimator().tokens(chunks) == tokens_of(8) == 2
    assert Estimator("").name == BYTES_ESTIMATOR and Estimator().exact_bytes


def test_an_unknown_or_unloadable_estimator_says_what_to_do(monkeypatch) -> None:
    with pytest.raises(EstimatorError, match="unknown token estimator 'words'"):
        Estimator("words")
    _without_tiktoken(monkeypatch)
    with pytest.raises(EstimatorError, match=r"pip install 'skillog\[tiktoken\]'"):
        Estimator("tiktoken:o200k_base")


def test_auto_falls_back_to_bytes_where_tiktoken_is_missing(monkeypatch) -> None:
    _without_tiktoken(monkeypatch)
    assert choose_estimator("auto") == BYTES_ESTIMATOR
    assert choose_estimator("bytes") == BYTES_ESTIMATOR
    with pytest.raises(EstimatorError):
        choose_estimator("tiktoken")


async def test_a_session_records_its_estimator(kit) -> None:
    store = MemoryStore()
    agent = Agent(model=ScriptedModel([{"text": "hi"}]), model_name="m", tokenizer="auto")
    session = await agent.run(store, "hello")
    started = (await kit.bodies(store, session.id))[0]
    assert isinstance(started, SessionStarted)
    assert started.estimator == choose_estimator("auto") and started.summaries


def _run(tmp_path, monkeypatch, config: str, *extra: str) -> list[str]:
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.setenv("SKILLOG_CONFIG", str(tmp_path / "config.yaml"))
    (tmp_path / "config.yaml").write_text(config)
    (tmp_path / "turns.yaml").write_text("turns:\n  - text: done\n")
    db = tmp_path / "log.db"
    args = ["run", "hi", "--model", f"scripted:{tmp_path / 'turns.yaml'}", "--db", str(db)]
    return [*args, "--project", str(tmp_path), *extra]


def _shown(tmp_path, capsys) -> str:
    """``log show --json`` of the one session in the log, without spaces."""
    import json

    from orchestrator.cli import main

    capsys.readouterr()
    db = str(tmp_path / "log.db")
    assert main(["sessions", "--json", "--db", db]) == 0
    session = json.loads(capsys.readouterr().out.splitlines()[0])["session"]
    assert main(["log", "show", session, "--json", "--db", db]) == 0
    return capsys.readouterr().out.replace(" ", "")


def test_the_configuration_file_sets_the_window_and_the_tokenizer(
    tmp_path, capsys, monkeypatch, kit
) -> None:
    from orchestrator.cli import main

    args = _run(tmp_path, monkeypatch, "model:\n  context_window: 9000\n  tokenizer: auto\n")
    assert main(args) == 0, capsys.readouterr()
    out = _shown(tmp_path, capsys)
    assert '"context_window":9000' in out
    assert f'"estimator":"{choose_estimator("auto")}"' in out
    # The command line wins over the file.
    args = _run(
        tmp_path, monkeypatch, "model:\n  context_window: 9000\n", "--context-window", "7000"
    )
    (tmp_path / "log.db").unlink()
    assert main(args) == 0
    assert '"context_window":7000' in _shown(tmp_path, capsys)


def test_the_instructions_mode_from_the_file_and_the_command_line(
    tmp_path, capsys, monkeypatch
) -> None:
    from orchestrator.cli import main

    assert main(_run(tmp_path, monkeypatch, "model:\n  instructions: results\n")) == 0
    assert '"instructions_mode":"results"' in _shown(tmp_path, capsys)
    # The command line wins over the file, either way.
    for config, flag, mode in (
        ("model:\n  instructions: results\n", "system", "system"),
        ("", "results", "results"),
    ):
        (tmp_path / "log.db").unlink()
        assert main(_run(tmp_path, monkeypatch, config, "--instructions", flag)) == 0
        out = _shown(tmp_path, capsys)
        assert f'"instructions_mode":"{mode}"' in out or (
            mode == "system" and '"instructions_mode"' not in out
        )
    capsys.readouterr()
    with pytest.raises(SystemExit) as exited:
        main(_run(tmp_path, monkeypatch, "", "--instructions", "prompt"))
    assert exited.value.code == 2
    assert "invalid choice: 'prompt'" in capsys.readouterr().err


def test_a_bad_model_section_is_a_clear_error(tmp_path, capsys, monkeypatch) -> None:
    from orchestrator.cli import main

    args = _run(tmp_path, monkeypatch, "model:\n  context_window: -5\n")
    assert main(args) == 2
    err = capsys.readouterr().err
    assert "context_window" in err and "Traceback" not in err


def test_asking_for_tiktoken_where_it_is_missing_is_a_clear_error(
    tmp_path, capsys, monkeypatch
) -> None:
    from orchestrator.cli import main

    _without_tiktoken(monkeypatch)
    args = _run(tmp_path, monkeypatch, "", "--tokenizer", "tiktoken")
    assert main(args) != 0
    err = capsys.readouterr().err
    assert "skillog[tiktoken]" in err and "Traceback" not in err


# tiktoken's real code path, offline. Its o200k_base file cannot be downloaded here (and
# a file of other ranks in TIKTOKEN_CACHE_DIR fails tiktoken's hash check), so the tests
# build a real ``tiktoken.Encoding`` (the Rust BPE) from ranks made here and put it in
# tiktoken's own registry under o200k_base: ``tiktoken.get_encoding``, ``encode`` and the
# estimator then run as they do with the downloaded file, only the ranks differ.

PROSE = "The quick brown fox jumps over the lazy dog, then reads the next part. " * 300


@pytest.fixture
def encoding(monkeypatch: pytest.MonkeyPatch) -> Any:
    tiktoken = pytest.importorskip("tiktoken")
    registry = pytest.importorskip("tiktoken.registry")

    ranks = {bytes([b]): b for b in range(256)}
    letters = b" abcdefghijklmnopqrstuvwxyz"
    for a in letters:
        for b in letters:
            ranks[bytes([a, b])] = len(ranks)
    enc = tiktoken.Encoding(
        "skillog-test",
        pat_str=r"""\s?\w+|\s?[^\s\w]+|\s+""",
        mergeable_ranks=ranks,
        special_tokens={"<|endoftext|>": len(ranks)},
    )
    monkeypatch.setitem(registry.ENCODINGS, TIKTOKEN_ENCODING, enc)
    return enc


def _count(enc: Any, chunks: list[bytes]) -> int:
    return sum(len(enc.encode(c.decode(errors="replace"), disallowed_special=())) for c in chunks)


def test_tiktoken_counts_each_chunk_with_its_encoding(encoding) -> None:
    name = f"tiktoken:{TIKTOKEN_ENCODING}"
    assert choose_estimator("tiktoken") == choose_estimator("auto") == name
    estimator = Estimator(name)
    assert estimator.name == name and not estimator.exact_bytes
    # A special token's text is counted as text, never refused; bad UTF-8 is replaced.
    chunks = [PROSE.encode(), b"<|endoftext|> is text here", b"\xff\xfe broken"]
    assert estimator.tokens(chunks) == _count(encoding, chunks)
    # Prose of this encoding is about two bytes a token, not four: the estimates differ.
    assert estimator.tokens([PROSE.encode()]) > 1.5 * Estimator().tokens([PROSE.encode()])


def _reads(n: int) -> list[dict[str, Any]]:
    load = {"tool_calls": [{"name": "skills.load", "arguments": {"names": ["prose"]}}]}
    read = [
        {"tool_calls": [{"name": "skills.read", "arguments": {"path": f"references/p{i % 3}.md"}}]}
        for i in range(n)
    ]
    return [load, *read, {"text": "done"}]


def _prose_agent(make_skill: Any, model: Any, tokenizer: Tokenizer) -> Agent:
    files = {f"references/p{i}.md": f"part {i}\n{PROSE}" for i in range(3)}
    return Agent(
        model=model,
        model_name="test-model",
        skills=[make_skill("prose", body="Read the parts.\n", files=files)],
        policy=PolicyConfig(approve=()),
        context_window=32_000,
        max_turns=60,
        tokenizer=tokenizer,
    )


async def test_a_tiktoken_session_compacts_by_its_counts_and_replays(
    kit, make_skill, encoding
) -> None:
    """The last compaction step's ``tokens_after`` is the encoding's count of the
    request sent next; the session compacts earlier than one counting bytes/4; replay and re-drive
    (which loads the recorded estimator) reproduce it."""
    store = MemoryStore()
    model = Recorder(_reads(30))
    session = await _prose_agent(make_skill, model, "tiktoken").run(store, "read")
    bodies = await kit.bodies(store, session.id)
    assert isinstance(bodies[-1], SessionEnded) and bodies[-1].reason == "completed"
    assert bodies[0].estimator == f"tiktoken:{TIKTOKEN_ENCODING}"
    compactions = [i for i, b in enumerate(bodies) if isinstance(b, ContextCompacted)]
    assert compactions
    for i in compactions:
        event = bodies[i]
        if not isinstance(bodies[i + 1], PromptRendered):
            continue  # a step whose history the next step changed again
        sent = model.requests[sum(1 for b in bodies[:i] if isinstance(b, PromptRendered))]
        lines = [*map(message_line, sent.messages), tail_line(sent)]
        assert event.tokens_after == _count(encoding, lines)
    other = MemoryStore()
    by_bytes = await _prose_agent(make_skill, ScriptedModel(_reads(30)), "bytes").run(other, "read")
    assert by_bytes.state.config is not None and by_bytes.state.config.estimator == "bytes/4"
    assert _first_compaction(bodies) < _first_compaction(await kit.bodies(other, by_bytes.id))
    await _proves(store, session.id)


def _first_compaction(bodies: list[Any]) -> int:
    """The turn before which a session first compacted."""
    at = next(i for i, b in enumerate(bodies) if isinstance(b, ContextCompacted))
    return sum(1 for b in bodies[:at] if isinstance(b, PromptRendered))


def _without_tiktoken(monkeypatch: pytest.MonkeyPatch) -> None:
    """This machine, as one where tiktoken is not installed: importing it fails."""
    monkeypatch.setitem(sys.modules, "tiktoken", None)


async def test_a_tiktoken_session_is_refused_whole_where_tiktoken_is_missing(
    kit, make_skill, encoding, monkeypatch
) -> None:
    """Re-drive and resume of a session that counted with tiktoken, on a machine
    without it, stop before anything is driven or recorded, saying what to install;
    replay, which never estimates, still proves it."""
    store = MemoryStore()
    session = await _prose_agent(make_skill, Recorder(_reads(30)), "tiktoken").run(store, "read")
    recording = await load_recording(store, session.id)
    recorded = len(await kit.bodies(store, session.id))
    _without_tiktoken(monkeypatch)
    with pytest.raises(EstimatorError) as refused:
        await redrive(store, recording)
    message = str(refused.value)
    assert f"session {session.id} counts tokens with 'tiktoken:{TIKTOKEN_ENCODING}'" in message
    assert "pip install 'skillog[tiktoken]'" in message and "Error: " in message
    with pytest.raises(EstimatorError, match=r"skillog\[tiktoken\]"):
        await _prose_agent(make_skill, Recorder([]), "bytes").resume(store, session.id)
    assert len(await kit.bodies(store, session.id)) == recorded
    assert (await replay_session(store, recording)).ok


def test_skillog_replay_redrive_says_what_to_install(
    tmp_path, capsys, monkeypatch, encoding
) -> None:
    import json

    from orchestrator.cli import main

    skill = tmp_path / "skills" / "prose"
    (skill / "references").mkdir(parents=True)
    (skill / "SKILL.md").write_text("---\nname: prose\ndescription: Prose.\n---\nRead.\n")
    (skill / "references" / "p0.md").write_text(PROSE)
    args = _run(tmp_path, monkeypatch, "", "--tokenizer", "tiktoken", "--context-window", "32000")
    (tmp_path / "turns.yaml").write_text(
        "turns:\n"
        "  - tool_calls: [{name: skills.load, arguments: {names: [prose]}}]\n"
        "  - tool_calls: [{name: skills.read, arguments: {path: references/p0.md}}]\n"
        "  - text: done\n"
    )
    assert main([*args, "--skills", str(skill)]) == 0, capsys.readouterr()
    db = str(tmp_path / "log.db")
    capsys.readouterr()
    assert main(["sessions", "--json", "--db", db]) == 0
    session = json.loads(capsys.readouterr().out.splitlines()[0])["session"]
    assert main(["replay", session, "--redrive", "--db", db]) == 0
    _without_tiktoken(monkeypatch)
    capsys.readouterr()
    assert main(["replay", session, "--redrive", "--db", db]) != 0
    out, err = capsys.readouterr()
    assert "pip install 'skillog[tiktoken]'" in err and "Traceback" not in out + err
    assert main(["replay", session, "--db", db]) == 0
