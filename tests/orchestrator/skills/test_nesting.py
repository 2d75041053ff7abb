"""skillog's own nesting bound, read from the text before any YAML library runs."""

from __future__ import annotations

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from orchestrator.skills import _frontmatter
from orchestrator.skills._frontmatter import MAX_DEPTH, Finding, load_frontmatter
from orchestrator.skills._nesting import nesting_bound

# Text that looks like YAML structure: brackets, quotes, comment and block-scalar marks.
tricky = st.text(alphabet="ab []{},:'\"#|>-?&!*\\\n", max_size=12)
data = st.recursive(
    tricky,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(tricky, inner, max_size=3),
    max_leaves=12,
)


def depth(value: object) -> int:
    if isinstance(value, dict):
        return 1 + max(map(depth, value.values()), default=0)
    if isinstance(value, list):
        return 1 + max(map(depth, value), default=0)
    return 0


@settings(max_examples=300)
@given(value=data, flow=st.sampled_from([None, True, False]), width=st.sampled_from([8, 80]))
def test_the_bound_never_exceeds_the_depth(value: object, flow: bool | None, width: int) -> None:
    text = yaml.safe_dump(value, default_flow_style=flow, width=width, allow_unicode=True)
    assert nesting_bound(text, 1000) <= depth(value)


@pytest.mark.parametrize(
    "text",
    [
        "a: " + "[" * 200_000,  # libyaml 0.2.5 refuses this itself, as a syntax error
        "a: " + "[\n" * 2000,
        "a: " + "{b: " * 2000,
        "- " * 2000 + "x",
        "a:\n  " + "[" * 40 + "]" * 40,
        "a: [x, &y [[[" + "[" * 20,
    ],
)
@pytest.mark.parametrize("loader", ["CSafeLoader", "SafeLoader"])
def test_the_depth_rule_is_skillogs_whatever_the_parser(
    text: str, loader: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    if not hasattr(yaml, loader):
        pytest.skip(f"PyYAML built without {loader}")
    monkeypatch.setattr(_frontmatter, "_Loader", getattr(yaml, loader))
    with pytest.raises(Finding) as info:
        load_frontmatter(text)
    assert info.value.rule == "yaml-depth"
    assert nesting_bound(text, MAX_DEPTH) > MAX_DEPTH  # found before the parser ran


@pytest.mark.parametrize(
    "text",
    [
        "a: '" + "[" * 40 + "'",
        'a: "' + "[" * 40 + '\\"' + "[" * 40 + '"',
        "a: x " + "[" * 40,
        "a: |\n  " + "[" * 40 + "\nb: c",
        "a: >-\n  " + "{" * 40 + "\n\n  more\nb: c",
        "a: [x # " + "[" * 40 + "\n  ]",
        "a: foo\n  " + "[" * 40,
        "a: [it's, " + "'[[[[[[[[[[[[[[[[[[[[[[', ok]",
    ],
)
def test_brackets_in_text_are_not_nesting(text: str) -> None:
    assert nesting_bound(text, MAX_DEPTH) <= 2
    assert isinstance(load_frontmatter(text), dict)
