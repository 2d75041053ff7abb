"""JSONL export/import through the library, on both stores."""

from __future__ import annotations

import io
from pathlib import Path

import pytest

from eventlog import (
    EventStore,
    ImportFormatError,
    MemoryStore,
    NewEvent,
    export_jsonl,
    import_jsonl,
    verify,
)


async def fill(store: EventStore) -> str:
    digest = await store.put_blob(b"payload")
    await store.append(
        "a",
        [NewEvent(type="x", body=b'{"d":"%s"}' % digest.encode(), recorded_at=1)],
        expected_seq=0,
    )
    await store.append("b", [NewEvent(type="x", body=b" 1", recorded_at=2)], expected_seq=0)
    await store.append(
        "a",
        [NewEvent(type="x", body=b'{"d":"%s"}' % digest.encode(), recorded_at=3)],
        expected_seq=1,
    )
    return digest


async def test_round_trip_from_any_store_into_any_store(store: EventStore, tmp_path: Path) -> None:
    digest = await fill(store)
    first = io.BytesIO()
    assert await export_jsonl(store, first) == 3
    assert first.getvalue().count(b'"blobs"') == 1  # each blob once
    dump = tmp_path / "dump.jsonl"
    dump.write_bytes(first.getvalue())
    target = MemoryStore()
    report = await import_jsonl(target, str(dump))
    assert (report.events, report.streams, report.blobs) == (3, ["a", "b"], 1)
    second = io.BytesIO()
    await export_jsonl(target, second)
    assert second.getvalue() == first.getvalue()
    assert (await verify(target)).ok and await target.get_blob(digest) == b"payload"


async def test_an_export_without_header_and_end_line_imports_but_is_not_known_whole(
    tmp_path: Path,
) -> None:
    src = MemoryStore()
    await fill(src)
    buf = io.BytesIO()
    await export_jsonl(src, buf)
    lines = buf.getvalue().splitlines(True)
    assert lines[0] == b'{"skillog_export":2}\n' and lines[-1] == b'{"end":{"events":3}}\n'
    legacy = tmp_path / "legacy.jsonl"
    legacy.write_bytes(b"".join(lines[1:-1]))
    report = await import_jsonl(MemoryStore(), str(legacy))
    assert report.events == 3 and not report.complete
    whole = tmp_path / "whole.jsonl"
    whole.write_bytes(buf.getvalue())
    assert (await import_jsonl(MemoryStore(), str(whole))).complete


@pytest.mark.parametrize(
    ("mutate", "match"),
    [
        (lambda b: b[:-5], ":5: the last line is not terminated: the file was cut"),
        (lambda b: b.replace(b'"recorded_at":3', b'"recorded_at":4'), ":4: .*hash does not match"),
        (lambda b: b.replace(b"cGF5bG9hZA==", b"cGF5bG9hZQ=="), ":2: blob"),
        (lambda b: b"{}\n" + b, ":1: not an event line"),
        (lambda b: b"\xff\xfe\n", ":1: not an event line"),
        (lambda b: b.replace(b'"stream":"b"', b'"stream":"b\\n"'), ":3: .*control character"),
        # Cut after a whole line: the end line is what says the file is whole.
        (lambda b: b[: b.rindex(b'{"end"')], ":4: the file is cut .truncated.: it ends after 3"),
        (
            lambda b: b"".join(b.splitlines(True)[:3]),
            ":3: the file is cut .truncated.: it ends after 2",
        ),
        (
            lambda b: b"".join(b.splitlines(True)[:1]),
            ":1: the file is cut .truncated.: it ends after 0",
        ),
        (lambda b: b.replace(b'"events":3', b'"events":4'), ":5: the end line says 4 events"),
        (lambda b: b + b, ":6: a line after the end line"),
        (lambda b: b"".join(b.splitlines(True)[1:]), ":4: an end line in a file without the"),
        (lambda b: b.replace(b'{"end":{"events":3}}', b'{"end":{"events":"3"}}'), ":5: not an end"),
    ],
)
async def test_bad_files_name_the_line_and_import_nothing(
    tmp_path: Path,
    mutate,
    match: str,  # type: ignore[no-untyped-def]
) -> None:
    src = MemoryStore()
    await fill(src)
    buf = io.BytesIO()
    await export_jsonl(src, buf)
    dump = tmp_path / "bad.jsonl"
    dump.write_bytes(mutate(buf.getvalue()))
    target = MemoryStore()
    with pytest.raises(ImportFormatError, match=match):
        await import_jsonl(target, str(dump))
    assert await target.streams() == []
