"""Codec: canonical bytes, registration rules, schema versions and upcasting."""

from __future__ import annotations

from typing import Any, ClassVar

import msgspec
import pytest
from hypothesis import given
from hypothesis import strategies as st

from eventlog import Codec, CodecError, Event, NewEvent, UnknownEventTypeError, split_type


class Started(msgspec.Struct, frozen=True, kw_only=True):
    event_type: ClassVar[str] = "session.started"
    name: str
    tags: dict[str, str] = {}
    count: int = 0


class Renamed(msgspec.Struct, frozen=True, kw_only=True):
    event_type: ClassVar[str] = "session.renamed"
    schema_version: ClassVar[int] = 3
    new_name: str
    reason: str


def v1_to_v2(d: dict[str, Any]) -> dict[str, Any]:
    return {"new_name": d.pop("name"), **d}


def v2_to_v3(d: dict[str, Any]) -> dict[str, Any]:
    return {**d, "reason": d.get("reason", "unknown")}


CODEC = Codec(
    [Started, Renamed],
    upcasters={("session.renamed", 1): v1_to_v2, ("session.renamed", 2): v2_to_v3},
)


def stored(type_: str, body: bytes) -> Event:
    return Event(
        stream="s",
        seq=7,
        position=1,
        type=type_,
        recorded_at=0,
        body=body,
        prev_hash="0" * 64,
        hash="0" * 64,
    )


def test_encode_is_canonical_sorted_and_tagged_in_the_envelope() -> None:
    ev = CODEC.encode(Started(name="n", tags={"b": "2", "a": "1"}), recorded_at=5)
    assert ev == NewEvent(
        type="session.started",
        body=b'{"count":0,"name":"n","tags":{"a":"1","b":"2"}}',
        recorded_at=5,
    )
    assert CODEC.encode(Renamed(new_name="x", reason="r"), recorded_at=0).type == (
        "session.renamed@3"
    )
    assert CODEC.decode(stored(ev.type, ev.body)) == Started(name="n", tags={"b": "2", "a": "1"})


def test_old_versions_are_upcast_step_by_step() -> None:
    assert CODEC.decode(stored("session.renamed", b'{"name":"old"}')) == Renamed(
        new_name="old", reason="unknown"
    )
    assert CODEC.decode(stored("session.renamed@2", b'{"new_name":"a","reason":"r"}')) == (
        Renamed(new_name="a", reason="r")
    )


@pytest.mark.parametrize(
    ("type_", "body", "error", "match"),
    [
        ("nope", b"{}", UnknownEventTypeError, "stream 's' seq 7: type 'nope' is not known"),
        ("session.renamed@4", b"{}", UnknownEventTypeError, "upgrade skillog"),
        ("session.started", b'{"name":1}', CodecError, r"Expected `str`, got `int` - at `\$.name`"),
        ("session.started", b"{not json", CodecError, "does not decode"),
        ("session.started", b"", CodecError, "does not decode"),
        ("session.renamed", b"[1]", CodecError, "Expected `object`"),
        ("session.renamed", b'{"nam":"x"}', CodecError, "does not decode"),
    ],
)
def test_undecodable_bodies_name_stream_seq_and_type(
    type_: str, body: bytes, error: type[Exception], match: str
) -> None:
    with pytest.raises(error, match=match):
        CODEC.decode(stored(type_, body))


def test_split_type() -> None:
    assert split_type("a.b@12") == ("a.b", 12)
    assert split_type("a.b") == ("a.b", 1)
    assert split_type("a.b@x") == ("a.b@x", 1)
    assert split_type("a.b@01") == ("a.b@01", 1)


def make(name: str, annotation: Any, **config: Any) -> type:
    ns = {"__annotations__": {"x": annotation, "event_type": ClassVar[str]}, "event_type": name}
    return msgspec.defstruct(name, [("x", annotation)], namespace=ns, **config)  # type: ignore[no-any-return]


@pytest.mark.parametrize(
    ("cls", "match"),
    [
        (make("a", float, frozen=True, kw_only=True), r"float .* at \$\.x"),
        (make("b", list[dict[str, float | None]], frozen=True, kw_only=True), r"\$\.x\[\]\{\}"),
        (make("c", Any, frozen=True, kw_only=True), "untyped"),
        (make("d", int, frozen=False, kw_only=True), "frozen=True"),
        (make("e", int, frozen=True), "kw_only=True"),
        (make("f@x", int, frozen=True, kw_only=True), "must not contain '@'"),
        (int, "not a msgspec.Struct"),
    ],
)
def test_registration_rejects_floats_and_loose_types(cls: type, match: str) -> None:
    with pytest.raises(CodecError, match=match):
        Codec([cls])


def test_registration_rejects_duplicate_tags_and_stray_upcasters() -> None:
    with pytest.raises(CodecError, match="unique"):
        Codec([Started, make("session.started", int, frozen=True, kw_only=True)])
    with pytest.raises(CodecError, match="upcaster"):
        Codec([Started], upcasters={("session.started", 1): v1_to_v2})
    with pytest.raises(CodecError, match="not registered"):
        CODEC.encode(msgspec.Struct(), recorded_at=0)  # type: ignore[arg-type]


@given(
    name=st.text(),
    tags=st.dictionaries(st.text(), st.text(), max_size=5),
    count=st.integers(min_value=-(2**63), max_value=2**63 - 1),
)
def test_round_trip_and_bytes_are_stable(name: str, tags: dict[str, str], count: int) -> None:
    body = Started(name=name, tags=tags, count=count)
    ev = CODEC.encode(body, recorded_at=1)
    assert CODEC.decode(stored(ev.type, ev.body)) == body
    shuffled = Started(name=name, tags=dict(reversed(list(tags.items()))), count=count)
    assert CODEC.encode(shuffled, recorded_at=1).body == ev.body
