"""docs/events.md stays true to the catalog: every type and every field is documented."""

from pathlib import Path

import msgspec

from orchestrator._events import CODEC, EVENT_TYPES

DOC = (Path(__file__).parents[2] / "docs" / "events.md").read_text()


def test_every_event_type_and_field_is_documented() -> None:
    for kind in EVENT_TYPES:
        row = next(
            (line for line in DOC.splitlines() if line.startswith(f"| `{kind.event_type}` |")), None
        )
        assert row is not None, f"{kind.event_type} missing from docs/events.md"
        for field in msgspec.structs.fields(kind):
            assert f"`{field.name}`" in row, f"{kind.event_type}.{field.name} undocumented"


def test_the_codec_knows_every_type() -> None:
    assert {t.event_type for t in EVENT_TYPES} == {t.event_type for t in CODEC.types}
