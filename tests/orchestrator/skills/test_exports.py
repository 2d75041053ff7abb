"""The public surface of ``orchestrator.skills``: everything in ``__all__`` exists and is public."""

from __future__ import annotations

import orchestrator.skills as skills
from eventlog import SkillogError


def test_all_names_exist_and_nothing_private_leaks() -> None:
    assert sorted(skills.__all__) == skills.__all__
    for name in skills.__all__:
        assert hasattr(skills, name), name
        assert not name.startswith("_")
    public = {
        n for n in dir(skills) if (not n.startswith("_") and not n.islower()) or n in skills.__all__
    }
    assert {n for n in public if n[0].isupper()} <= set(skills.__all__)


def test_errors_subclass_the_project_base() -> None:
    for name in skills.__all__:
        obj = getattr(skills, name)
        if isinstance(obj, type) and issubclass(obj, Exception):
            assert issubclass(obj, SkillogError), name
