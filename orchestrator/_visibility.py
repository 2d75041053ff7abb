"""Which skills a session's catalog shows, and how it changes between turns (pure).

A skill is visible unless policy requires a signature for its tier and it has no
valid one, or its enabled predicate (seed 004) says no. A predicate sees only
:class:`SkillContext`: the values the embedding program passed (``Agent.params``,
recorded in ``session.started``), the turn and the active skills, all folded from
the log, so it answers the same whenever the same log is read. Its answers are
recorded anyway (``catalog.snapshot``'s ``hidden`` at the start, ``skill.changed``
with cause ``predicate`` later): replay and re-drive read the decisions, they never
call the embedding program's code.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import Literal

from ._events import SkillChanged, SkillInfo


@dataclass(frozen=True)
class SkillContext:
    """What an enabled predicate may look at: recorded session state only."""

    params: Mapping[str, str]
    turn: int
    active: tuple[str, ...]


Predicate = Callable[[SkillContext], bool]


@dataclass(frozen=True)
class RefreshContext:
    """What a between-turns refresh decides from: the recorded catalog, the predicate
    context, and the parts of the recorded configuration that matter."""

    catalog: Mapping[str, SkillInfo]
    skill_context: SkillContext
    require_signatures: tuple[str, ...]
    file_access: bool


def visible(
    infos: Sequence[SkillInfo],
    predicates: Mapping[str, Predicate],
    context: SkillContext,
    require_signatures: Collection[str],
    signature_details: Mapping[str, str] = {},
) -> tuple[dict[str, SkillInfo], list[tuple[str, str]]]:
    """The visible skills by name (sorted) and the ``(name, reason)`` of the others."""
    shown: dict[str, SkillInfo] = {}
    hidden: list[tuple[str, str]] = []
    for info in sorted(infos, key=lambda i: i.name):
        if info.tier in require_signatures and info.signed_by is None:
            detail = signature_details.get(info.name, "not signed")
            hidden.append(
                (
                    info.name,
                    f"unsigned: policy requires a valid signature for tier {info.tier} ({detail})",
                )
            )
            continue
        predicate = predicates.get(info.name)
        if predicate is not None:
            try:
                enabled = bool(predicate(context))
                reason = "not enabled: its enabled predicate is false"
            except Exception as e:  # the embedding program's code: recorded, not raised
                enabled = False
                reason = f"not enabled: its enabled predicate raised {type(e).__name__}: {e}"
            if not enabled:
                hidden.append((info.name, reason))
                continue
        shown[info.name] = info
    return shown, hidden


def catalog_changes(
    current: Mapping[str, SkillInfo],
    wanted: Mapping[str, SkillInfo],
    hidden: Sequence[tuple[str, str]],
    rescanned: Collection[str],
) -> list[SkillChanged]:
    """The ``skill.changed`` events that turn ``current`` into ``wanted``, by name.
    ``rescanned`` names the skills whose sources changed (cause ``rescan``); any other
    difference is a visibility decision (cause ``predicate``)."""
    reasons = dict(hidden)
    out: list[SkillChanged] = []
    for name in sorted(current.keys() | wanted.keys()):
        old, new = current.get(name), wanted.get(name)
        if old == new:
            continue
        cause: Literal["rescan", "predicate"] = "rescan" if name in rescanned else "predicate"
        if new is None:
            reason = reasons.get(name, "no longer in its sources")
        elif old is None:
            reason = "found in its source" if cause == "rescan" else "now enabled"
        elif old.hash == new.hash:
            reason = "its catalog entry changed (signature, version or location)"
        else:
            reason = f"its files changed (sha256:{old.hash[:12]} is now sha256:{new.hash[:12]})"
        out.append(
            SkillChanged(
                name=name,
                old_hash=old.hash if old else None,
                new_hash=new.hash if new else None,
                skill=new,
                cause=cause,
                reason=reason,
            )
        )
    return out
