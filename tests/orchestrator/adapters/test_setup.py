"""Building adapters: spec strings, API keys, missing SDKs, wire names, retry hints, and
the package's public surface."""

from __future__ import annotations

import subprocess
import sys
from datetime import UTC, datetime
from email.utils import format_datetime
from pathlib import Path

import pytest

import orchestrator.adapters as adapters
from orchestrator._model import ModelAdapter
from orchestrator.adapters import (
    AdapterConfigError,
    AnthropicAdapter,
    OpenAIAdapter,
    ScriptedModel,
    ToolNameError,
    WireNames,
    adapter_from_spec,
    retry_after_ms,
)


def test_public_surface() -> None:
    assert sorted(adapters.__all__) == sorted(
        name for name in vars(adapters) if not name.startswith("_")
        and getattr(getattr(adapters, name), "__module__", "").startswith("orchestrator.adapters")
    )  # fmt: skip
    for name in adapters.__all__:
        assert getattr(adapters, name).__module__.startswith("orchestrator.adapters._")


def test_specs_build_each_adapter(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ANTHROPIC_API_KEY", "a-key")
    monkeypatch.setenv("OPENAI_API_KEY", "o-key")
    script = tmp_path / "turns.yaml"
    script.write_text("turns:\n  - text: hi\n")
    anthropic_model = adapter_from_spec("anthropic:claude-sonnet-4-5")
    openai_model = adapter_from_spec("openai:gpt-4.1")
    scripted = adapter_from_spec(f"scripted:{script}")
    assert (
        isinstance(anthropic_model, AnthropicAdapter)
        and anthropic_model.model == "claude-sonnet-4-5"
    )
    assert isinstance(openai_model, OpenAIAdapter) and openai_model.model == "gpt-4.1"
    assert isinstance(scripted, ScriptedModel) and len(scripted.turns) == 1
    for model, provider in [
        (anthropic_model, "anthropic"),
        (openai_model, "openai"),
        (scripted, "skillog.scripted"),
    ]:
        assert isinstance(model, ModelAdapter) and model.provider == provider
    # the adapter's own client never retries behind the loop's back
    assert anthropic_model._client.max_retries == 0 and openai_model._client.max_retries == 0


@pytest.mark.parametrize(
    ("spec", "fragment"),
    [
        ("anthropic", "is incomplete"),
        ("openai:", "is incomplete"),
        ("gemini:pro", "unknown provider 'gemini'"),
        ("scripted:/no/such/file.yaml", "cannot read the model script"),
    ],
)
def test_bad_specs(spec: str, fragment: str) -> None:
    with pytest.raises(AdapterConfigError, match=fragment):
        adapter_from_spec(spec)


@pytest.mark.parametrize(
    ("spec", "variable"), [("anthropic:m", "ANTHROPIC_API_KEY"), ("openai:m", "OPENAI_API_KEY")]
)
def test_missing_keys_are_named(monkeypatch: pytest.MonkeyPatch, spec: str, variable: str) -> None:
    for name in ("ANTHROPIC_API_KEY", "ANTHROPIC_AUTH_TOKEN", "OPENAI_API_KEY"):
        monkeypatch.delenv(name, raising=False)
    with pytest.raises(AdapterConfigError, match=f"{variable} is not set"):
        adapter_from_spec(spec)


@pytest.mark.parametrize(
    ("cls", "module", "extra"),
    [(AnthropicAdapter, "anthropic", "anthropic"), (OpenAIAdapter, "openai", "openai")],
)
def test_a_missing_sdk_says_what_to_install(
    monkeypatch: pytest.MonkeyPatch, cls: type, module: str, extra: str
) -> None:
    monkeypatch.setitem(sys.modules, module, None)  # makes `import <module>` fail
    with pytest.raises(AdapterConfigError, match=rf"pip install 'skillog\[{extra}\]'"):
        cls()


def test_the_package_imports_without_either_sdk() -> None:
    code = (
        "import sys; sys.modules['anthropic'] = None; sys.modules['openai'] = None\n"
        "import orchestrator.adapters as a\n"
        "assert 'anthropic' not in [m for m in sys.modules if sys.modules[m] is not None]\n"
        "try:\n    a.adapter_from_spec('openai:gpt-4.1')\n"
        "except a.AdapterConfigError as e:\n    print(e)\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=30
    )
    assert result.returncode == 0, result.stderr
    assert "pip install 'skillog[openai]'" in result.stdout


def test_wire_names_round_trip_and_unknown_names_pass_through() -> None:
    names = WireNames(["skills.load", "skills.run_script", "weather", "a-b"], provider="p")
    assert names.from_wire("skills__load") == "skills.load"
    assert names.from_wire("skills__run_script") == "skills.run_script"
    assert names.from_wire("weather") == "weather"
    assert names.from_wire("skills.load") == "skills.load"  # not a wire name: unchanged
    assert names.from_wire("nope__x") == "nope__x"
    WireNames(["dup", "dup"], provider="p")  # the same tool twice is not a collision


@pytest.mark.parametrize(
    ("tools", "fragment"),
    [
        (["a.b", "a__b"], "would both be sent as 'a__b'"),
        (["x" * 63 + ".y"], "1-64 characters"),
        (["bad/name"], "cannot be sent"),
        ([""], "cannot be sent"),
    ],
)
def test_wire_names_refuse_what_cannot_be_sent(tools: list[str], fragment: str) -> None:
    with pytest.raises(ToolNameError, match=fragment) as info:
        WireNames(tools, provider="p")
    assert (info.value.kind, info.value.retryable) == ("other", False)


@pytest.mark.parametrize(
    ("headers", "expected"),
    [
        ({}, None),
        ({"retry-after": "2"}, 2000),
        ({"retry-after": "0.25"}, 250),
        ({"retry-after": "1.0001"}, 1001),
        ({"retry-after-ms": "40"}, 40),
        ({"retry-after-ms": "40", "retry-after": "9"}, 40),
        ({"retry-after-ms": "nan", "retry-after": "9"}, 9000),
        ({"retry-after-ms": "-5", "retry-after": "1"}, 1000),
        ({"retry-after": "soon"}, None),
        ({"retry-after": "inf"}, None),
        ({"retry-after": "-3"}, None),
    ],
)
def test_retry_after_headers(headers: dict[str, str], expected: int | None) -> None:
    assert retry_after_ms(headers) == expected


def test_retry_after_http_dates() -> None:
    now = datetime(2030, 1, 1, 12, 0, 0, tzinfo=UTC).timestamp()
    later = format_datetime(datetime(2030, 1, 1, 12, 0, 30, tzinfo=UTC), usegmt=True)
    earlier = format_datetime(datetime(2030, 1, 1, 11, 0, 0, tzinfo=UTC), usegmt=True)
    assert retry_after_ms({"retry-after": later}, now=lambda: now) == 30_000
    assert retry_after_ms({"retry-after": earlier}, now=lambda: now) == 0
