"""The crash-point suite (docs/effects.md): SIGKILL a real process at every event
boundary and inside every effect of three reference sessions, resume in a new process,
and count duplicate effects, unrecorded effects and divergent prompts: all must be 0.

CI runs every single crash point and a sample of double crashes (a crash, then a
crash of the resuming process); ``bench/crash_points.py`` runs every pair. The parts'
counts are summed in the report's summary (tests/conftest.py)."""

from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path

import crashpoints
import pytest

needs_bwrap = pytest.mark.skipif(shutil.which("bwrap") is None, reason="needs bubblewrap")

# Five parts, so a parallel run (pytest -n) spreads them over its workers: every single
# crash point of each reference session; a sample of double crashes (a crash, then a crash
# of the resuming process); the parallel session across a fleet, where each process is a
# worker and the next takes the session over when the killed one's lease expires.
PARTS = {
    **{f"single-{kind}": {"kinds": [kind]} for kind in crashpoints.KINDS},
    "double": {"kinds": ["parallel"], "double": True, "sample": 37},
    "fleet": {"kinds": ["parallel"], "fleet": True},
}


@needs_bwrap
@pytest.mark.parametrize("part", PARTS)
def test_no_duplicate_unrecorded_or_divergent_at_any_crash_point(
    tmp_path: Path, part: str, record_property: Callable[[str, object], None]
) -> None:
    tally = crashpoints.run_suite(tmp_path, **PARTS[part])
    record_property("crash_points", tally.counts())
    assert not tally.failures, "\n".join(tally.failures[:20])
    assert (tally.duplicates, tally.unrecorded, tally.divergent) == (0, 0, 0)
    assert tally.scenarios > 20
