"""The public surface of eventlog: everything in __all__ exists, nothing private leaks."""

from __future__ import annotations

import eventlog


def test_all_names_exist_and_are_public() -> None:
    for name in eventlog.__all__:
        assert hasattr(eventlog, name), name
        assert not name.startswith("_")
    public = {n for n in vars(eventlog) if not n.startswith("_")}
    modules = {n for n in public if type(getattr(eventlog, n)).__name__ == "module"}
    assert public - modules == set(eventlog.__all__)


def test_architecture_contract_names() -> None:
    for name in [
        "NewEvent",
        "Event",
        "Head",
        "StreamInfo",
        "EventStore",
        "MemoryStore",
        "open_sqlite_store",
        "Codec",
        "fold",
        "ConcurrencyError",
        "BlobNotFoundError",
        "SkillogError",
        "verify",
    ]:
        assert name in eventlog.__all__
    assert issubclass(eventlog.EventLogError, eventlog.SkillogError)
    assert isinstance(eventlog.MemoryStore(), eventlog.EventStore)
