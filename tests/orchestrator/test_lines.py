"""The bounded line splitter both stdio ends use (orchestrator/_lines.py)."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from orchestrator._lines import LineSplitter


def _split(chunks: list[bytes], limit: int = 10) -> tuple[list[bytes | None], bytes | None]:
    splitter = LineSplitter(limit)
    lines: list[bytes | None] = []
    for chunk in chunks:
        lines += splitter.feed(chunk)
        assert splitter.buffered <= limit
    return lines, splitter.end()


def test_lines_come_whole_wherever_the_chunks_break() -> None:
    wire = b'{"a":1}\n\n{"b":2}\nlast'
    expected = [b'{"a":1}', b"", b'{"b":2}']
    for at in range(len(wire) + 1):
        assert _split([wire[:at], wire[at:]]) == (expected, b"last")
    # a byte at a time, and a chunk that is only "\n"
    assert _split([bytes([b]) for b in wire]) == (expected, b"last")
    assert _split([b"ab", b"\n", b"\n", b"cd\n"]) == ([b"ab", b"", b"cd"], None)


def test_empty_lines_and_the_last_line() -> None:
    assert _split([b"\n\n"]) == ([b"", b""], None)
    assert _split([b"x\n"]) == ([b"x"], None)  # ended: nothing left at the end
    assert _split([b"x"]) == ([], b"x")  # a last line without "\n"
    assert _split([]) == ([], None)


def test_a_line_of_exactly_the_limit_is_kept_and_one_byte_more_is_dropped() -> None:
    at, over = b"a" * 10, b"b" * 11
    assert _split([at + b"\n"]) == ([at], None)
    assert _split([over + b"\nok\n"]) == ([None, b"ok"], None)
    # in pieces: the same, the bytes held never over the limit
    assert _split([at[:4], at[4:], b"\n"]) == ([at], None)
    assert _split([over[:4], over[4:], b"\nok\n"]) == ([None, b"ok"], None)
    assert _split([over[:10], over[10:] + b"\nok\n"]) == ([None, b"ok"], None)
    # the last line too
    assert _split([at]) == ([], at)
    assert _split([over]) == ([None], None)


def test_a_long_line_in_many_chunks_is_reported_once_as_it_passes_the_limit() -> None:
    splitter = LineSplitter(100)
    reports = [splitter.feed(b"x" * 30) for _ in range(1000)]
    # the line passed the limit at its fourth chunk: reported there, never again
    assert reports[3] == [None] and [r for r in reports if r] == [[None]]
    assert splitter.buffered == 0
    assert splitter.feed(b"xx\n" + b'{"next":1}\n') == [b'{"next":1}']
    assert splitter.end() is None


@settings(max_examples=200, deadline=None)
@given(
    lines=st.lists(st.binary(max_size=14).map(lambda b: b.replace(b"\n", b"")), max_size=6),
    ended=st.booleans(),
    cuts=st.lists(st.integers(min_value=0, max_value=120), max_size=8),
)
def test_any_chunking_gives_the_lines_with_those_over_the_limit_reported(
    lines: list[bytes], ended: bool, cuts: list[int]
) -> None:
    wire = b"\n".join(lines) + (b"\n" if ended and lines else b"")
    at = sorted({min(c, len(wire)) for c in cuts})
    chunks = [wire[a:b] for a, b in zip([0, *at], [*at, len(wire)], strict=True)]
    got, last = _split(chunks)
    complete = lines if ended else lines[:-1]
    assert got[: len(complete)] == [line if len(line) <= 10 else None for line in complete]
    if not ended and lines:
        tail = lines[-1]
        # a last line over the limit is reported as it passes it, not at the end
        assert (last, got[len(complete) :]) == (
            (tail or None, []) if len(tail) <= 10 else (None, [None])
        )
