"""docs/api.md lists exactly the fields and parameters of the embedding API."""

from __future__ import annotations

import inspect
import re
from pathlib import Path

import msgspec
import pytest

import orchestrator as o

DOC = (Path(__file__).parents[2] / "docs" / "api.md").read_text()


def documented(heading: str) -> list[str]:
    """The first column of the table under the ``## `heading``` section."""
    section = DOC.split(f"## `{heading}", 1)[1].split("\n## ", 1)[0]
    return re.findall(r"^\| `(\w+)` \|", section, re.M)


def parameters(fn: object, skip: tuple[str, ...] = ("self", "cls")) -> list[str]:
    return [p for p in inspect.signature(fn).parameters if p not in skip]  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("heading", "names"),
    [
        ("Agent", parameters(o.Agent)),
        ("HostTool.from_function", parameters(o.HostTool.from_function)),
        *[
            (struct.__name__, list(struct.__struct_fields__))
            for struct in (
                o.ToolContext,
                o.ToolOutcome,
                o.ApprovalRequest,
                o.ApprovalDecision,
                o.PendingApproval,
                o.PendingForm,
                o.InterruptedCall,
            )
        ],
    ],
)
def test_the_tables_match_the_code(heading: str, names: list[str]) -> None:
    assert documented(heading) == names


def test_the_documented_names_are_importable_from_the_package() -> None:
    for name in re.findall(r"^## `(\w+)", DOC, re.M):
        assert name in o.__all__, name
    assert issubclass(o.ApprovalRequest, msgspec.Struct)
