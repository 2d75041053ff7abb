"""Canonical encoding of event bodies, schema versions and upcasting."""

from __future__ import annotations

import inspect
from collections.abc import Callable, Iterable, Mapping
from typing import Any, Generic, TypeVar

import msgspec
from msgspec import inspect as mi

from ._errors import CodecError, InvalidEventError, UnknownEventTypeError
from ._hashchain import check_int, check_name
from ._types import Event, NewEvent

Upcaster = Callable[[dict[str, Any]], dict[str, Any]]
B = TypeVar("B", bound=msgspec.Struct)


def split_type(type_: str) -> tuple[str, int]:
    """Split an envelope type into (tag, schema version): ``"a.b@3"`` -> ``("a.b", 3)``."""
    tag, sep, version = type_.rpartition("@")
    if sep and version.isdigit() and version.isascii() and not version.startswith("0"):
        return tag, int(version)
    return type_, 1


def _float_path(t: mi.Type, path: str, seen: set[type]) -> str | None:
    """The path of the first float (or untyped value that could hold one) inside ``t``."""
    if isinstance(t, (mi.FloatType, mi.AnyType, mi.RawType)):
        return path
    if isinstance(t, mi.StructType):
        if t.cls in seen:
            return None
        seen.add(t.cls)
        for f in t.fields:
            found = _float_path(f.type, f"{path}.{f.name}", seen)
            if found:
                return found
        return None
    if isinstance(t, (mi.ListType, mi.SetType, mi.FrozenSetType, mi.VarTupleType)):
        return _float_path(t.item_type, f"{path}[]", seen)
    if isinstance(t, mi.TupleType):
        for i, item in enumerate(t.item_types):
            found = _float_path(item, f"{path}[{i}]", seen)
            if found:
                return found
        return None
    if isinstance(t, mi.DictType):
        return _float_path(t.key_type, f"{path}{{key}}", seen) or _float_path(
            t.value_type, f"{path}{{}}", seen
        )
    if isinstance(t, mi.UnionType):
        for item in t.types:
            found = _float_path(item, path, seen)
            if found:
                return found
        return None
    if isinstance(t, mi.Metadata):
        return _float_path(t.type, path, seen)
    if isinstance(t, (mi.DataclassType, mi.TypedDictType, mi.NamedTupleType)):
        for f in t.fields:
            found = _float_path(f.type, f"{path}.{f.name}", seen)
            if found:
                return found
    return None


class Codec(Generic[B]):
    """Encodes event bodies to canonical bytes once, and decodes (upcasting) them back.

    A body type is a frozen, ``kw_only`` :class:`msgspec.Struct` that declares its tag
    and schema version as class variables::

        class SkillActivated(msgspec.Struct, frozen=True, kw_only=True):
            event_type: ClassVar[str] = "skill.activated"
            schema_version: ClassVar[int] = 2     # optional, default 1
            name: str

    (Class variables rather than msgspec's ``tag=`` so the tag is not repeated inside the
    body: it is already the envelope ``type``.) The envelope type is the tag for schema
    version 1 and ``tag@N`` for version N > 1. Body bytes are msgspec JSON with keys
    sorted; registration rejects types that could hold a float (``float``, ``Any``,
    ``Raw``) because hashed content must be the same bytes on every machine.

    ``upcasters[(tag, v)]`` turns the decoded dict of version ``v`` into version ``v+1``;
    :meth:`decode` applies them in order, then converts to the current struct. An unknown
    tag, a version newer than the code, or a body that does not fit raises an error
    naming the stream, seq and type.
    """

    def __init__(
        self,
        types: Iterable[type[B]],
        upcasters: Mapping[tuple[str, int], Upcaster] | None = None,
    ) -> None:
        self._encoder = msgspec.json.Encoder(order="sorted")
        self._by_tag: dict[str, tuple[type[B], int, msgspec.json.Decoder[B]]] = {}
        self._type_of: dict[type[B], str] = {}
        for cls in types:
            tag, version = self._register(cls)
            if tag in self._by_tag:
                raise CodecError(
                    f"tag {tag!r} is declared by both {self._by_tag[tag][0].__qualname__} "
                    f"and {cls.__qualname__}; tags must be unique"
                )
            self._by_tag[tag] = (cls, version, msgspec.json.Decoder(cls))
            self._type_of[cls] = tag if version == 1 else f"{tag}@{version}"
        self._upcasters = dict(upcasters or {})
        for key, fn in self._upcasters.items():
            tag, from_version = key
            known = self._by_tag.get(tag)
            if known is None or not 1 <= from_version < known[1] or not callable(fn):
                raise CodecError(
                    f"upcaster {key!r} does not upgrade a registered older version; keys are "
                    "(tag, from_version) with 1 <= from_version < the type's schema_version"
                )

    @staticmethod
    def _register(cls: type[B]) -> tuple[str, int]:
        name = getattr(cls, "__qualname__", repr(cls))
        if not (isinstance(cls, type) and issubclass(cls, msgspec.Struct)):
            raise CodecError(f"{name} is not a msgspec.Struct subclass")
        config = cls.__struct_config__
        kw_only = all(
            p.kind is inspect.Parameter.KEYWORD_ONLY
            for p in inspect.signature(cls).parameters.values()
        )
        if not (config.frozen and kw_only) or config.tag is not None:
            raise CodecError(
                f"{name} must be declared frozen=True, kw_only=True and without tag=; "
                "the tag is the class variable event_type"
            )
        try:
            tag = check_name(f"{name}.event_type", cls.__dict__.get("event_type"))
            version = check_int(f"{name}.schema_version", cls.__dict__.get("schema_version", 1))
        except InvalidEventError as e:
            raise CodecError(
                f"{name} needs class variables event_type: str and schema_version: int ({e})"
            ) from e
        if "@" in tag:
            raise CodecError(f"{name}.event_type {tag!r} must not contain '@'")
        if version < 1:
            raise CodecError(f"{name}.schema_version must be >= 1, got {version}")
        found = _float_path(mi.type_info(cls), "$", set())
        if found:
            raise CodecError(
                f"{name} can hold a float or untyped value at {found}; hashed bodies must "
                "be identical on every machine - use integer ns, integer micro-units or "
                "decimal strings"
            )
        return tag, version

    @property
    def types(self) -> tuple[type[B], ...]:
        """The registered body types."""
        return tuple(self._type_of)

    def type_of(self, cls: type[B]) -> str:
        """The envelope type string written for bodies of ``cls``."""
        try:
            return self._type_of[cls]
        except KeyError:
            raise CodecError(f"{cls.__qualname__} is not registered with this codec") from None

    def encode(self, body: B, *, recorded_at: int) -> NewEvent:
        """Canonical bytes of ``body`` in a :class:`NewEvent` stamped ``recorded_at`` (ns)."""
        type_ = self._type_of.get(type(body))
        if type_ is None:
            raise CodecError(f"{type(body).__qualname__} is not registered with this codec")
        return NewEvent(type=type_, body=self._encoder.encode(body), recorded_at=recorded_at)

    def decode(self, event: Event | NewEvent) -> B:
        """The current-version struct of ``event``'s body, upcast from older versions."""
        tag, version = split_type(event.type)
        known = self._by_tag.get(tag)
        if known is None:
            raise UnknownEventTypeError(
                f"{_where(event)}: type {event.type!r} is not known to this codec; "
                "register its body type or upgrade skillog"
            )
        cls, current, decoder = known
        if version > current:
            raise UnknownEventTypeError(
                f"{_where(event)}: type {event.type!r} is schema version {version} but this "
                f"code knows only up to {current}; upgrade skillog to read it"
            )
        try:
            if version == current:
                return decoder.decode(event.body)
            data = msgspec.json.decode(event.body)
            if not isinstance(data, dict):
                raise msgspec.ValidationError("Expected `object` at `$`")
            for v in range(version, current):
                up = self._upcasters.get((tag, v))
                if up is None:
                    raise UnknownEventTypeError(
                        f"{_where(event)}: no upcaster from {tag!r} version {v} to {v + 1}; "
                        "register one in the Codec"
                    )
                try:
                    data = up(data)
                except Exception as e:  # a body the upcaster cannot handle
                    raise CodecError(
                        f"{_where(event)}: body of type {event.type!r} does not decode: "
                        f"upcaster ({tag!r}, {v}) failed: {e!r}"
                    ) from e
            return msgspec.convert(data, cls)
        except msgspec.MsgspecError as e:
            raise CodecError(
                f"{_where(event)}: body of type {event.type!r} does not decode: {e}"
            ) from e


def _where(event: Event | NewEvent) -> str:
    if isinstance(event, Event):
        return f"stream {event.stream!r} seq {event.seq}"
    return "new event"
