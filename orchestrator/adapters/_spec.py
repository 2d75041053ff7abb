"""Build an adapter from a spec string such as ``anthropic:claude-sonnet-4-5``."""

from __future__ import annotations

from .._model import ModelAdapter
from ._anthropic import AnthropicAdapter
from ._errors import AdapterConfigError
from ._openai import OpenAIAdapter
from ._scripted import ScriptedModel

SPEC_FORMS = ("anthropic:MODEL", "openai:MODEL", "scripted:PATH")


def adapter_from_spec(spec: str) -> ModelAdapter:
    """The adapter a spec string names.

    ``anthropic:MODEL`` and ``openai:MODEL`` take the API key from the environment
    (``ANTHROPIC_API_KEY``, ``OPENAI_API_KEY``); ``scripted:PATH`` loads a YAML or JSON
    script now. Raises :class:`AdapterConfigError` (or :class:`ScriptError`) saying what
    is wrong: an unknown provider, an empty model or path, a missing SDK or key.
    """
    provider, sep, rest = spec.partition(":")
    if not sep or not rest.strip():
        raise AdapterConfigError(
            f"model spec {spec!r} is incomplete: use one of {', '.join(SPEC_FORMS)}"
        )
    if provider == "anthropic":
        return AnthropicAdapter(model=rest)
    if provider == "openai":
        return OpenAIAdapter(model=rest)
    if provider in ("scripted", "skillog.scripted"):  # the latter as sessions record it
        return ScriptedModel.from_file(rest)
    raise AdapterConfigError(
        f"model spec {spec!r} names an unknown provider {provider!r}: use one of "
        f"{', '.join(SPEC_FORMS)}"
    )
