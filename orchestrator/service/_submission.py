"""What a submission may choose, checked against what the operator offers: one of the
server's models, a subset of its skills, one of its policy presets. Pure: the handler
builds the agent, these functions decide what it may record."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from .._display import shown_model as shown_model
from .._events import PolicyConfig
from .._loop import Agent
from ._errors import ApiError

NOT_SELECTED = "not selected by the submission"


def offered_model(choice: str | None, offers: Sequence[str]) -> str:
    """The server's model spec a submission chose, by its spec or as it is shown."""
    if choice is None:
        return offers[0]
    for spec in offers:
        if choice in (spec, shown_model(spec)):
            return spec
    offered(choice, [shown_model(s) for s in offers], "model", "$.model")  # raises: 422
    raise AssertionError("unreachable")


def offered(choice: str | None, offers: Sequence[str], what: str, field: str) -> str:
    """``choice`` when it is one of ``offers`` (the first when None); 422 otherwise,
    naming the field and the valid names."""
    if choice is None:
        return offers[0]
    if choice not in offers:
        raise ApiError(
            422, f"{what} {choice!r} is not offered here; one of: {', '.join(offers)}", field
        )
    return choice


def tailored(agent: Agent, skills: Sequence[str] | None, policy: PolicyConfig) -> Agent:
    """``agent`` with only the named ``skills`` in its catalog (every one when None; the
    others recorded as hidden, with the reason) and ``policy`` as the session's policy.
    What the session's start records is what every worker enforces: the catalog and
    the policy are read from the log, not from the worker's own agent."""
    names = [s.name for s in agent.skills]
    if skills is None:
        return dataclasses.replace(agent, policy=policy)
    twice = sorted({n for n in skills if skills.count(n) > 1})
    if twice:
        raise ApiError(422, f"skill(s) listed twice: {', '.join(twice)}", "$.skills")
    unknown = [n for n in skills if n not in names]
    if unknown:
        valid = ", ".join(sorted(names)) or "none"
        raise ApiError(
            422,
            f"unknown skill(s) {', '.join(map(repr, unknown))}; this server offers: {valid}",
            "$.skills",
        )
    chosen = set(skills)
    return dataclasses.replace(
        agent,
        skills=[s for s in agent.skills if s.name in chosen],
        hidden=[*agent.hidden, *((n, NOT_SELECTED) for n in names if n not in chosen)],
        policy=policy,
    )
