"""The context window and the token estimator from the configuration file and the
command line; the estimator a session used is recorded, so a re-drive counts the same
way and nothing is recounted (docs/context.md)."""

from __future__ import annotations

import importlib.util

import pytest

from eventlog import MemoryStore
from orchestrator._context import (
    BYTES_ESTIMATOR,
    Estimator,
    EstimatorError,
    choose_estimator,
    tokens_of,
)
from orchestrator._events import SessionStarted
from orchestrator._loop import Agent
from orchestrator.adapters import ScriptedModel

HAS_TIKTOKEN = importlib.util.find_spec("tiktoken") is not None


def test_bytes_over_four_counts_the_whole_not_each_chunk() -> None:
    chunks = [b"abcde", b"fg", b"\n"]
    assert Estimator().tokens(chunks) == tokens_of(8) == 2
    assert Estimator("").name == BYTES_ESTIMATOR and Estimator().exact_bytes


def test_an_unknown_or_unloadable_estimator_says_what_to_do() -> None:
    with pytest.raises(EstimatorError, match="unknown token estimator 'words'"):
        Estimator("words")
    if not HAS_TIKTOKEN:
        with pytest.raises(EstimatorError, match=r"pip install 'skillog\[tiktoken\]'"):
            Estimator("tiktoken:o200k_base")


@pytest.mark.skipif(HAS_TIKTOKEN, reason="tiktoken is installed here")
def test_auto_falls_back_to_bytes_where_tiktoken_is_missing() -> None:
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


@pytest.mark.skipif(HAS_TIKTOKEN, reason="tiktoken is installed here")
def test_asking_for_tiktoken_where_it_is_missing_is_a_clear_error(
    tmp_path, capsys, monkeypatch
) -> None:
    from orchestrator.cli import main

    args = _run(tmp_path, monkeypatch, "", "--tokenizer", "tiktoken")
    assert main(args) != 0
    err = capsys.readouterr().err
    assert "skillog[tiktoken]" in err and "Traceback" not in err
