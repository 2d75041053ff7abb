"""Replay: prove from a log alone what a model was shown and what ran.

``replay_session`` re-renders every recorded request with the current composer and
compares it byte for byte; ``redrive`` runs the current runtime against the recorded
responses and effects and compares every event; ``drift``, ``timeline`` and
``fork_session`` are the audit views; ``audit_session`` and ``render_html`` make the
one-page audit report. See docs/replay.md.
"""

from ._audit import Audit as Audit
from ._audit import Check as Check
from ._audit import RecordedPrompt as RecordedPrompt
from ._audit import audit_session as audit_session
from ._compare import MEASURED as MEASURED
from ._compare import EventDivergence as EventDivergence
from ._effects import RecordedEffects as RecordedEffects
from ._errors import BlobError as BlobError
from ._errors import BrokenLogError as BrokenLogError
from ._errors import ReplayError as ReplayError
from ._errors import UnverifiedLogError as UnverifiedLogError
from ._fork import ForkLink as ForkLink
from ._fork import check_fork_link as check_fork_link
from ._fork import fork_session as fork_session
from ._html import CSP as CSP
from ._html import render_html as render_html
from ._prove import Divergence as Divergence
from ._prove import ReplayReport as ReplayReport
from ._prove import TurnCheck as TurnCheck
from ._prove import replay_session as replay_session
from ._recording import Recording as Recording
from ._recording import load_recording as load_recording
from ._recording import open_log as open_log
from ._recording import verify_recording as verify_recording
from ._redrive import RedriveReport as RedriveReport
from ._redrive import redrive as redrive
from ._request import request_diff as request_diff
from ._skills import Drift as Drift
from ._skills import FileChange as FileChange
from ._skills import PinnedSkill as PinnedSkill
from ._skills import drift as drift
from ._skills import pin_skill as pin_skill
from ._skills import pinned_skills as pinned_skills
from ._timeline import TimelineEntry as TimelineEntry
from ._timeline import render_timeline as render_timeline
from ._timeline import timeline as timeline

__all__ = [
    "CSP",
    "MEASURED",
    "Audit",
    "BlobError",
    "BrokenLogError",
    "Check",
    "Divergence",
    "Drift",
    "EventDivergence",
    "FileChange",
    "ForkLink",
    "PinnedSkill",
    "RecordedEffects",
    "RecordedPrompt",
    "Recording",
    "RedriveReport",
    "ReplayError",
    "ReplayReport",
    "TimelineEntry",
    "TurnCheck",
    "UnverifiedLogError",
    "audit_session",
    "check_fork_link",
    "drift",
    "fork_session",
    "load_recording",
    "open_log",
    "pin_skill",
    "pinned_skills",
    "redrive",
    "render_html",
    "render_timeline",
    "replay_session",
    "request_diff",
    "timeline",
    "verify_recording",
]
