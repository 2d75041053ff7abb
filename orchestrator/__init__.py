"""The skills domain and the runtime: the agent loop driver that programs embed.

Start with :class:`Agent` (docs/runtime.md). Skills as packages live in
:mod:`orchestrator.skills`; model adapters in :mod:`orchestrator.adapters`.

A reading order for the implementation (the layers: docs/architecture.md). The core is
flat private modules behind this face; read them roughly bottom-up:

- ``_model`` (the canonical request/response), ``_events`` (the event catalog) and
  ``_streams`` (stream names) are vocabulary;
- ``_state`` folds a session's events (``apply``), ``_grammar`` checks a stream's
  order, ``_verdict`` is the one verdict every reader asks,
  ``_transcript``/``_views``/``_session_list`` are read models over the log;
- ``_policy`` (``decide``: one decision per call), ``_policy_config`` and
  ``_visibility`` are pure decisions;
- ``_prompt`` composes the request from state;
- ``_loop`` (``Agent``, ``drive``) runs turns on a ``_session``; each tool call takes
  ``_pipeline.run_call`` (resolve, decide, approve, intent, effect, outcome), planned
  by ``_tools.plan_call`` (MCP calls: ``_mcp_calls``);
- ``_effects`` is the one door to the world (live and recorded); ``_host_tools``,
  ``_approvals``, ``_receipt`` and ``_output`` serve it; ``_fleet`` drives sessions
  across workers with leases.

Walled-off parts have a face each: ``skills/`` (the domain), ``adapters/`` (models),
``scripts/`` (running a script), ``mcp/`` (MCP servers as tool sources); ``runtime``
is the surface ``replay`` and ``otel`` re-derive with. The edges, ``cli/``,
``service/`` and ``mcp_server/``, sit on top; nothing here imports them.
"""

from ._approvals import ApprovalError as ApprovalError
from ._approvals import PendingApproval as PendingApproval
from ._approvals import RememberError as RememberError
from ._approvals import decide_approval as decide_approval
from ._approvals import pending_approvals as pending_approvals
from ._calls import ToolError as ToolError
from ._calls import idempotency_key as idempotency_key
from ._effects import ApprovalDecision as ApprovalDecision
from ._effects import ApprovalRequest as ApprovalRequest
from ._effects import Approver as Approver
from ._effects import Effects as Effects
from ._effects import ElicitationAnswer as ElicitationAnswer
from ._effects import ElicitationRequest as ElicitationRequest
from ._effects import Elicitor as Elicitor
from ._effects import InterruptedCall as InterruptedCall
from ._effects import LiveEffects as LiveEffects
from ._effects import LoadedSkill as LoadedSkill
from ._effects import McpOutcome as McpOutcome
from ._effects import McpProgress as McpProgress
from ._effects import ProgressSink as ProgressSink
from ._effects import Reconciler as Reconciler
from ._effects import ServerRequests as ServerRequests
from ._effects import SkillUnavailableError as SkillUnavailableError
from ._effects import deny_all as deny_all
from ._events import CODEC as CODEC
from ._events import EVENT_TYPES as EVENT_TYPES
from ._events import ApprovalRemembered as ApprovalRemembered
from ._events import ApprovalRequested as ApprovalRequested
from ._events import ApprovalResolved as ApprovalResolved
from ._events import Budget as Budget
from ._events import CatalogIndexed as CatalogIndexed
from ._events import CatalogSnapshot as CatalogSnapshot
from ._events import ContextCompacted as ContextCompacted
from ._events import ContextPolicy as ContextPolicy
from ._events import EffectClass as EffectClass
from ._events import Event as Event
from ._events import McpElicitationAnswered as McpElicitationAnswered
from ._events import McpElicited as McpElicited
from ._events import McpFormAnswered as McpFormAnswered
from ._events import McpResult as McpResult
from ._events import McpRoot as McpRoot
from ._events import McpRootsChanged as McpRootsChanged
from ._events import McpSampleAnswered as McpSampleAnswered
from ._events import McpSampled as McpSampled
from ._events import McpServerFailed as McpServerFailed
from ._events import McpTaskCreated as McpTaskCreated
from ._events import McpToolDef as McpToolDef
from ._events import McpToolRules as McpToolRules
from ._events import McpToolsListed as McpToolsListed
from ._events import ModelFailed as ModelFailed
from ._events import ModelInterrupted as ModelInterrupted
from ._events import ModelResponded as ModelResponded
from ._events import PolicyConfig as PolicyConfig
from ._events import PolicyDenied as PolicyDenied
from ._events import PolicyOverride as PolicyOverride
from ._events import PromptRendered as PromptRendered
from ._events import Replacement as Replacement
from ._events import ResourceRead as ResourceRead
from ._events import ScriptExecuted as ScriptExecuted
from ._events import ScriptStarted as ScriptStarted
from ._events import SessionEnded as SessionEnded
from ._events import SessionForked as SessionForked
from ._events import SessionStarted as SessionStarted
from ._events import SessionSuspended as SessionSuspended
from ._events import SkillActivated as SkillActivated
from ._events import SkillActivationFailed as SkillActivationFailed
from ._events import SkillChanged as SkillChanged
from ._events import SkillDeactivated as SkillDeactivated
from ._events import SkillEnvBuilt as SkillEnvBuilt
from ._events import SkillInfo as SkillInfo
from ._events import SkillsInstalled as SkillsInstalled
from ._events import SummaryAnswered as SummaryAnswered
from ._events import SummaryRequested as SummaryRequested
from ._events import ToolCalled as ToolCalled
from ._events import ToolCompleted as ToolCompleted
from ._events import ToolDef as ToolDef
from ._events import ToolImages as ToolImages
from ._events import ToolInterrupted as ToolInterrupted
from ._events import UserMessage as UserMessage
from ._forms import FormAnswerError as FormAnswerError
from ._forms import FormValuesError as FormValuesError
from ._forms import PendingForm as PendingForm
from ._forms import answer_form as answer_form
from ._forms import pending_forms as pending_forms
from ._grammar import RULES as GRAMMAR_RULES
from ._grammar import Violation as Violation
from ._grammar import check_stream as check_stream
from ._grammar import session_grammar as session_grammar
from ._host_tools import HostTool as HostTool
from ._host_tools import HostToolError as HostToolError
from ._host_tools import ToolContext as ToolContext
from ._host_tools import ToolOutcome as ToolOutcome
from ._index_log import record_index_run as record_index_run
from ._loop import Agent as Agent
from ._loop import AgentConfigError as AgentConfigError
from ._loop import RetryPolicy as RetryPolicy
from ._loop import drive as drive
from ._mcp_sampling import is_sampling_question as is_sampling_question
from ._model import Delta as Delta
from ._model import Message as Message
from ._model import ModelAdapter as ModelAdapter
from ._model import ModelError as ModelError
from ._model import ModelRequest as ModelRequest
from ._model import ModelResponse as ModelResponse
from ._model import StreamingAdapter as StreamingAdapter
from ._model import TextPart as TextPart
from ._model import ToolCall as ToolCall
from ._model import ToolImage as ToolImage
from ._model import ToolResult as ToolResult
from ._model import ToolSpec as ToolSpec
from ._model import Usage as Usage
from ._pipeline import ApproverError as ApproverError
from ._policy import ToolRule as ToolRule
from ._policy import parse_allowed_tools as parse_allowed_tools
from ._policy_config import load_policy as load_policy
from ._previews import Preview as Preview
from ._previews import PreviewBoard as PreviewBoard
from ._previews import PreviewTap as PreviewTap
from ._prompt import compose as compose
from ._prompt import request_bytes as request_bytes
from ._prompt import request_hash as request_hash
from ._session import Clock as Clock
from ._session import ContextExhaustedError as ContextExhaustedError
from ._session import Observer as Observer
from ._session import Session as Session
from ._session import SessionNotFoundError as SessionNotFoundError
from ._session import SessionStateError as SessionStateError
from ._state import ActiveSkill as ActiveSkill
from ._state import SessionState as SessionState
from ._state import apply as apply
from ._state import fold_events as fold_events
from ._streams import INDEX_STREAM as INDEX_STREAM
from ._streams import INSTALL_STREAM as INSTALL_STREAM
from ._transcript import transcript as transcript
from ._verdict import blob_references as blob_references
from ._verdict import verdict as verdict
from ._views import AUDIT_VIEWS as AUDIT_VIEWS
from .scripts import LimitsOverride as LimitsOverride
from .scripts import PathRefusedError as PathRefusedError
from .scripts import ScriptRefusedError as ScriptRefusedError
from .scripts import ScriptRequest as ScriptRequest
from .scripts import ScriptResult as ScriptResult
from .scripts import read_skill_file as read_skill_file
from .scripts import resolve_in_root as resolve_in_root
from .scripts import run_script as run_script
from .scripts import sandbox_available as sandbox_available

__all__ = [
    "AUDIT_VIEWS",
    "CODEC",
    "EVENT_TYPES",
    "GRAMMAR_RULES",
    "INDEX_STREAM",
    "INSTALL_STREAM",
    "ActiveSkill",
    "Agent",
    "AgentConfigError",
    "ApprovalDecision",
    "ApprovalError",
    "ApprovalRemembered",
    "ApprovalRequest",
    "ApprovalRequested",
    "ApprovalResolved",
    "Approver",
    "ApproverError",
    "Budget",
    "CatalogIndexed",
    "CatalogSnapshot",
    "Clock",
    "ContextCompacted",
    "ContextExhaustedError",
    "ContextPolicy",
    "Delta",
    "EffectClass",
    "Effects",
    "ElicitationAnswer",
    "ElicitationRequest",
    "Elicitor",
    "Event",
    "FormAnswerError",
    "FormValuesError",
    "HostTool",
    "HostToolError",
    "InterruptedCall",
    "LimitsOverride",
    "LiveEffects",
    "LoadedSkill",
    "McpElicitationAnswered",
    "McpElicited",
    "McpFormAnswered",
    "McpOutcome",
    "McpProgress",
    "McpResult",
    "McpRoot",
    "McpRootsChanged",
    "McpSampleAnswered",
    "McpSampled",
    "McpServerFailed",
    "McpTaskCreated",
    "McpToolDef",
    "McpToolRules",
    "McpToolsListed",
    "Message",
    "ModelAdapter",
    "ModelError",
    "ModelFailed",
    "ModelInterrupted",
    "ModelRequest",
    "ModelResponded",
    "ModelResponse",
    "Observer",
    "PathRefusedError",
    "PendingApproval",
    "PendingForm",
    "PolicyConfig",
    "PolicyDenied",
    "PolicyOverride",
    "Preview",
    "PreviewBoard",
    "PreviewTap",
    "ProgressSink",
    "PromptRendered",
    "Reconciler",
    "RememberError",
    "Replacement",
    "ResourceRead",
    "RetryPolicy",
    "ScriptExecuted",
    "ScriptRefusedError",
    "ScriptRequest",
    "ScriptResult",
    "ScriptStarted",
    "ServerRequests",
    "Session",
    "SessionEnded",
    "SessionForked",
    "SessionNotFoundError",
    "SessionStarted",
    "SessionState",
    "SessionStateError",
    "SessionSuspended",
    "SkillActivated",
    "SkillActivationFailed",
    "SkillChanged",
    "SkillDeactivated",
    "SkillEnvBuilt",
    "SkillInfo",
    "SkillUnavailableError",
    "SkillsInstalled",
    "StreamingAdapter",
    "SummaryAnswered",
    "SummaryRequested",
    "TextPart",
    "ToolCall",
    "ToolCalled",
    "ToolCompleted",
    "ToolContext",
    "ToolDef",
    "ToolError",
    "ToolImage",
    "ToolImages",
    "ToolInterrupted",
    "ToolOutcome",
    "ToolResult",
    "ToolRule",
    "ToolSpec",
    "Usage",
    "UserMessage",
    "Violation",
    "answer_form",
    "apply",
    "blob_references",
    "check_stream",
    "compose",
    "decide_approval",
    "deny_all",
    "drive",
    "fold_events",
    "idempotency_key",
    "is_sampling_question",
    "load_policy",
    "parse_allowed_tools",
    "pending_approvals",
    "pending_forms",
    "read_skill_file",
    "record_index_run",
    "request_bytes",
    "request_hash",
    "resolve_in_root",
    "run_script",
    "sandbox_available",
    "session_grammar",
    "transcript",
    "verdict",
]
