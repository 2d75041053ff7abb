"""The append checks: the fast path agrees with the full checks."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from eventlog import InvalidEventError, NewEvent
from eventlog._hashchain import MAX_INT, _all_valid, _is_name, check_name

names = st.one_of(
    st.text(max_size=300),
    st.text(alphabet=st.characters(codec="utf-8"), min_size=250, max_size=260),
    st.sampled_from(["", "a\nb", "\x7f", "s\ud800", "x" * 256, "x" * 257, "é" * 256]),
)


def accepted(value: str) -> bool:
    try:
        check_name("name", value)
    except InvalidEventError:
        return False
    return True


@given(names)
def test_the_name_predicate_is_check_name(value: str) -> None:
    assert _is_name(value) == accepted(value)


@given(
    names,
    st.lists(st.tuples(names, st.integers(-1, MAX_INT + 1)), max_size=4),
    st.integers(-1, MAX_INT + 1),
)
def test_the_fast_path_accepts_only_what_the_full_checks_accept(
    stream: str, events: list[tuple[str, int]], expected_seq: int
) -> None:
    new = [NewEvent(type=t, body=b"{}", recorded_at=r) for t, r in events]
    if _all_valid(stream, new, expected_seq):
        assert accepted(stream) and new and 0 <= expected_seq <= MAX_INT
        assert all(accepted(e.type) and 0 <= e.recorded_at <= MAX_INT for e in new)
