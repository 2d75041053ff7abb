"""After-the-fact metrics: totals per session and per skill, from the mapping's measurements.

The same measurements feed live instruments (``_metrics.py``), so the summary of a log
agrees with what a live ``MeterProvider`` counted for it. Pure functions.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import msgspec

from eventlog import visible

from . import _semconv as sc
from ._spandata import Measurement

_SKILL_COUNTERS = {
    sc.M_ACTIVATIONS: "activations",
    sc.M_ACTIVATION_FAILURES: "activation_failures",
    sc.M_RESOURCE_READS: "resource_reads",
    sc.M_SCRIPT_RUNS: "script_runs",
    sc.M_SCRIPT_FAILURES: "script_failures",
    sc.M_POLICY_DENIALS: "policy_denials",
}


class SkillTotals(msgspec.Struct, kw_only=True):
    """Counts for one skill (or for a whole session, summed over skills)."""

    activations: int = 0
    activation_failures: int = 0
    resource_reads: int = 0
    script_runs: int = 0
    script_failures: int = 0
    policy_denials: int = 0

    def add(self, other: SkillTotals) -> None:
        for field in self.__struct_fields__:
            setattr(self, field, getattr(self, field) + getattr(other, field))


class SessionSummary(msgspec.Struct, kw_only=True):
    """What one session did, from its log. ``ended`` is False for a session in progress."""

    session: str
    ended: bool = False
    end_reason: str | None = None
    duration_s: float = 0.0
    turns: int = 0
    model_calls: int = 0
    model_failures: int = 0
    model_seconds: float = 0.0
    input_tokens: int = 0
    output_tokens: int = 0
    tool_calls: int = 0
    tool_errors: int = 0
    totals: SkillTotals = msgspec.field(default_factory=SkillTotals)
    skills: dict[str, SkillTotals] = msgspec.field(default_factory=dict)


class Summary(msgspec.Struct, kw_only=True):
    """Per-session summaries and per-skill totals over all of them."""

    sessions: list[SessionSummary]
    skills: dict[str, SkillTotals]


def summarize_session(session: str, measurements: Iterable[Measurement]) -> SessionSummary:
    """Fold one session's measurements into its summary."""
    s = SessionSummary(session=session)
    for m in measurements:
        name, attrs = m.instrument, m.attributes
        field = _SKILL_COUNTERS.get(name)
        if field is not None:
            value = int(m.value)
            setattr(s.totals, field, getattr(s.totals, field) + value)
            skill = attrs.get(sc.SKILL_NAME)
            if isinstance(skill, str):
                per = s.skills.setdefault(skill, SkillTotals())
                setattr(per, field, getattr(per, field) + value)
        elif name == sc.M_OPERATION_DURATION:
            s.model_calls += 1
            s.model_failures += sc.ERROR_TYPE in attrs
            s.model_seconds += m.value
        elif name == sc.M_TOKEN_USAGE:
            if attrs.get(sc.TOKEN_TYPE) == "input":
                s.input_tokens += int(m.value)
            else:
                s.output_tokens += int(m.value)
        elif name == sc.M_TOOL_CALLS:
            s.tool_calls += 1
            s.tool_errors += sc.ERROR_TYPE in attrs
        elif name == sc.M_SESSION_DURATION:
            s.ended = True
            s.duration_s = float(m.value)
            reason = attrs.get("skillog.session.end_reason")
            s.end_reason = reason if isinstance(reason, str) else None
        elif name == sc.M_SESSION_TURNS:
            s.turns = int(m.value)
    return s


def summarize(sessions: Sequence[SessionSummary]) -> Summary:
    """The per-skill totals over ``sessions``."""
    skills: dict[str, SkillTotals] = {}
    for s in sessions:
        for name, totals in s.skills.items():
            skills.setdefault(name, SkillTotals()).add(totals)
    return Summary(sessions=list(sessions), skills=dict(sorted(skills.items())))


def to_json(summary: Summary) -> bytes:
    """The summary as JSON (keys sorted, one object)."""
    return msgspec.json.format(msgspec.json.encode(summary, order="sorted"), indent=2)


_COLUMNS = (
    ("activations", "activations"),
    ("act.fail", "activation_failures"),
    ("reads", "resource_reads"),
    ("scripts", "script_runs"),
    ("scr.fail", "script_failures"),
    ("denials", "policy_denials"),
)


def _row(label: str, totals: SkillTotals, width: int) -> str:
    cells = "".join(f"{getattr(totals, f):>12}" for _, f in _COLUMNS)
    return f"  {visible(label):<{width}}{cells}"


def render_text(summary: Summary) -> str:
    """A human-readable report: one block per session, then the per-skill table. Names
    and ids from the log are shown with :func:`eventlog.visible`."""
    lines: list[str] = []
    header_cells = "".join(f"{h:>12}" for h, _ in _COLUMNS)
    for s in summary.sessions:
        status = f"ended ({visible(s.end_reason or '')})" if s.ended else "in progress"
        lines.append(
            f"session {visible(s.session)}: {status}, {s.turns} turns, {s.duration_s:.3f} s"
        )
        lines.append(
            f"  model calls {s.model_calls} (failed {s.model_failures}, {s.model_seconds:.3f} s), "
            f"tokens in {s.input_tokens} out {s.output_tokens}, "
            f"tool calls {s.tool_calls} (errors {s.tool_errors})"
        )
        width = max([len("all skills"), *(len(visible(n)) for n in s.skills)]) + 2
        lines.append(f"  {'skill':<{width}}{header_cells}")
        for name, totals in sorted(s.skills.items()):
            lines.append(_row(name, totals, width))
        lines.append(_row("all skills", s.totals, width))
    if len(summary.sessions) > 1 and summary.skills:
        width = max(len(visible(n)) for n in summary.skills) + 2
        lines.append(f"all sessions ({len(summary.sessions)})")
        lines.append(f"  {'skill':<{width}}{header_cells}")
        for name, totals in summary.skills.items():
            lines.append(_row(name, totals, width))
    if not summary.sessions:
        lines.append("no sessions")
    return "\n".join(lines) + "\n"
