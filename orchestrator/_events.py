"""The event catalog of a session: every step the runtime takes, as frozen structs.

A session is one stream in the log; these are its event bodies. Fields are only ever
added (with defaults), never changed; a change of meaning is a new ``schema_version``
with an upcaster in :data:`CODEC`. The catalog is documented in docs/events.md.

Conversation facts (user text, model responses, tool results as the model saw them)
are inline; large or repeated content (skill files, resources read, script output,
rendered requests) lives in the blob store and events carry its sha256 digest.
"""

from __future__ import annotations

from typing import ClassVar, Literal

import msgspec

from eventlog import Codec

from ._model import ModelResponse
from .scripts import Enforcement, LimitsOverride, ScriptLimits
from .skills import CatalogRecord, EnvRecord, ManifestEntry, SkillProperties, Triggers


class Event(msgspec.Struct, frozen=True, kw_only=True):
    """Base of every session event body."""

    event_type: ClassVar[str]


EffectClass = Literal["pure", "idempotent", "at-most-once"]
"""What a tool does to the world, and so what resume does with a call whose intent is
recorded but whose outcome is not (docs/effects.md): ``pure`` calls run again,
``idempotent`` ones run again with the same idempotency key, ``at-most-once`` ones never
run again and resolve as ``tool.interrupted`` (or as the embedding program reconciles)."""


class Budget(msgspec.Struct, frozen=True, kw_only=True):
    """Per-session limits, checked before each model call; 0 means no limit. Cost is
    estimated from the session's token use and ``prices``: ``(model, micro-USD per
    million input tokens, micro-USD per million output tokens)`` (integers: recorded
    bodies hold no floats); ``cache_prices``: ``(model, micro-USD per million input
    tokens read from the prompt cache, per million written to it)``, without which
    cached tokens cost what other input tokens cost. A session over budget ends with
    ``budget_exceeded``."""

    input_tokens: int = 0
    output_tokens: int = 0
    cost_micro_usd: int = 0
    wall_ms: int = 0
    prices: tuple[tuple[str, int, int], ...] = ()
    cache_prices: tuple[tuple[str, int, int], ...] = ()


Sandbox = Literal["required", "preferred", "off"]


class PolicyOverride(msgspec.Struct, frozen=True, kw_only=True):
    """Settings for the skills of one tier, one source or one name (``policy.tiers``,
    ``policy.sources``, ``policy.skills``); a field left out inherits. ``approve`` and
    ``network`` replace the tier lists' answer for these skills; ``preapprove`` whether
    their ``allowed-tools`` pre-approve; ``allow`` adds pre-approving rules
    (``allowed-tools`` syntax). Third-party floors hold whatever an override says:
    approval needed, no network, sandbox required (docs/policy.md)."""

    approve: bool | msgspec.UnsetType = msgspec.UNSET
    network: bool | msgspec.UnsetType = msgspec.UNSET
    sandbox: Sandbox | msgspec.UnsetType = msgspec.UNSET
    script_timeout_ms: int | msgspec.UnsetType = msgspec.UNSET
    output_cap_bytes: int | msgspec.UnsetType = msgspec.UNSET
    read_max_bytes: int | msgspec.UnsetType = msgspec.UNSET
    nested_paths: bool | msgspec.UnsetType = msgspec.UNSET
    preapprove: bool | msgspec.UnsetType = msgspec.UNSET
    allow: tuple[str, ...] | msgspec.UnsetType = msgspec.UNSET
    script_limits: LimitsOverride | msgspec.UnsetType = msgspec.UNSET


class McpToolRules(msgspec.Struct, frozen=True, kw_only=True):
    """Policy for MCP servers' tools (``policy.mcp``). ``approve``: the MCP tools that
    need an approval, named as in ``allowed-tools``: ``mcp__github`` (every tool of the
    server), ``mcp__github__create_*``, ``mcp__github__create_issue``, ``mcp__*`` (every
    MCP tool); ``approve_host_tools`` may name them too. ``sampling``: the servers
    (by name, ``*`` for every one) whose ``sampling/createMessage`` requests the
    session's model answers during their calls (docs/mcp.md); other servers' requests
    are refused, and recorded. ``max_samples_per_call``: the most a server may ask
    during one call; later ones are refused, and recorded. ``roots``: the servers (by
    name, ``*``) told the active skills' folders as ``roots/list``; others are told
    none. ``elicitation_timeout_ms``: how long a server's form (``elicitation/create``)
    waits for a human before it is answered ``cancel``. ``sampling_ask``: the servers
    (by name, ``*``) whose sampling requests a human approves or denies first, through
    the forms' channel (the terminal, ``skillog approvals``, the API, the console):
    skillog's own form, ``approve`` and ``reason``, recorded as a form of the call;
    such a server need not be named in ``sampling``."""

    approve: tuple[str, ...] = ()
    sampling: tuple[str, ...] = ()
    max_samples_per_call: int = 4
    roots: tuple[str, ...] = ()
    elicitation_timeout_ms: int = 120_000
    sampling_ask: tuple[str, ...] = ()


class ContextPolicy(msgspec.Struct, frozen=True, kw_only=True):
    """How a session keeps its requests inside the model's context window
    (``policy.context``, docs/context.md). Before a request whose estimated size is
    over ``compact_at_percent`` of the budget (the window less ``max_tokens``, the
    reserve for the answer), the runtime compacts: it clears the tool results of the
    turns before the last ``keep_turns`` (fewer when that is not enough, never the last
    turn's; each leaves a stub saying how to get it back),
    then the ``skills.load`` results carrying the instructions of skills no longer
    active, then (``drop_turns``) the older half of the turns before the last
    ``keep_turns``, leaving a note in the first message; each step only while the
    estimate is over ``compact_to_percent`` of the budget (so that compactions, each a
    break of the provider's prompt cache, are rare). A request that still does
    not fit the budget ends the session with ``context_exhausted``. With ``summarise``,
    the older turns are summarised by a recorded model call instead of dropped (the
    answer at most ``summary_max_tokens``, 1024 when 0), while the session's summary
    calls have used fewer than ``summary_budget_tokens`` (input plus output); past it,
    or when the call fails, they are dropped (when ``drop_turns``)."""

    compact_at_percent: int = 80
    compact_to_percent: int = 60
    keep_turns: int = 3
    drop_turns: bool = True
    summarise: bool = False
    summary_max_tokens: int = 0
    summary_budget_tokens: int = 100_000


class PolicyConfig(msgspec.Struct, frozen=True, kw_only=True):
    """The policy a session runs under, recorded when it starts.

    ``approve`` lists the trust tiers whose scripts need an approval; ``network`` the
    tiers whose scripts may use the network (never third-party, whatever is asked).
    ``nested_paths`` allows ``skills.read`` below the first level of a skill's folders
    (``references/a/b.md``); seed 000 R5 recommends one level deep unless enabled.
    ``approval_timeout_ms`` makes approval requests expire: a request still undecided
    that long after it was recorded resolves as denied (``decided_by`` ``expired``).
    ``preapprove_tiers``: the tiers whose skills' ``allowed-tools`` pre-approve the
    calls they list (add ``"user"`` to trust user skills' lists; never third-party).
    ``output_cap_bytes`` caps the tool result the model reads (after JSON encoding);
    ``script_limits`` are the scripts' resource limits (a session recorded before they
    existed reads as the defaults). ``require_signatures``: the tiers whose skills the
    session sees and loads only with a valid signature by a trusted signer (off by
    default; docs/skills.md, "Versions and signatures"). ``allow``: rules in
    ``allowed-tools`` syntax (``Bash(python:*)``, ``send_email``) that pre-approve
    matching calls of every tier but third-party, as a Claude Code settings file's
    ``permissions.allow`` does. ``tiers``, ``sources``, ``skills``: per-tier, per-source
    and per-skill overrides, applied in that order (the most specific last). Every key
    is in docs/policy.md. ``scripts`` ``off`` refuses every script run. What an action
    does asks whatever the tier (issue 29): with ``ask_destructive``, destructive tools
    (an MCP tool annotated ``destructiveHint`` and not ``readOnlyHint``, a host tool
    declared ``destructive``) and scripts given network; ``approve_effects`` names
    effect classes whose host and MCP tools ask (``at-most-once``). Only an ``allow``
    rule or a remembered decision answers those without asking, never a skill's own
    ``allowed-tools``. ``lazy_install`` ``ask``: a script of a skill whose ``python:``
    requirements have no environment yet asks to install them (one approval, recorded
    as asked; a builtin or org skill's install is pre-approved like its scripts) and
    builds the environment before it runs (docs/skills.md, "Lazy install").
    """

    approve: tuple[str, ...] = ("user", "third-party")
    network: tuple[str, ...] = ()
    sandbox: Sandbox = "required"
    script_timeout_ms: int = 30_000
    output_cap_bytes: int = 1 << 20
    read_max_bytes: int = 256 * 1024
    approve_host_tools: tuple[str, ...] = ()
    nested_paths: bool = False
    approval_timeout_ms: int | None = None
    preapprove_tiers: tuple[str, ...] = ("builtin", "org")
    budget: Budget = Budget()
    script_limits: ScriptLimits = ScriptLimits()
    require_signatures: tuple[str, ...] = ()
    allow: tuple[str, ...] = ()
    tiers: dict[str, PolicyOverride] = msgspec.field(default_factory=dict)
    sources: dict[str, PolicyOverride] = msgspec.field(default_factory=dict)
    skills: dict[str, PolicyOverride] = msgspec.field(default_factory=dict)
    mcp: McpToolRules = McpToolRules()
    scripts: Literal["on", "off"] = "on"
    ask_destructive: bool = True
    approve_effects: tuple[EffectClass, ...] = ()
    context: ContextPolicy = ContextPolicy()
    lazy_install: Literal["off", "ask"] = "off"


class SkillInfo(msgspec.Struct, frozen=True, kw_only=True):
    """A skill as the session's catalog shows it (tier 1 of progressive disclosure).
    ``version`` is its declared ``metadata.version``; ``tools`` the tools loading it
    unlocks (an inline skill's own tools); ``signed_by`` the trusted key (hex) whose
    signature over its hash verified, None when unsigned or not verified;
    ``summary`` its ``metadata.summary``, the line the compact catalog shows instead of
    the shortened description (seed 004 K4)."""

    name: str
    description: str
    hash: str
    tier: str
    source: str
    location: str | None = None
    version: str | None = None
    tools: tuple[str, ...] = ()
    signed_by: str | None = None
    summary: str | None = None
    triggers: Triggers | None = None
    """What activates it by itself (``metadata.trigger-*``, seed 003 PL2)."""


class ToolDef(msgspec.Struct, frozen=True, kw_only=True):
    """A tool definition as offered to the model; the JSON Schema is canonical JSON text.
    ``effect`` is not offered to the model: it tells resume what to do with the tool's
    unfinished calls."""

    name: str
    description: str
    input_schema: str
    effect: EffectClass = "at-most-once"
    destructive: bool = False
    script: str | None = None
    """A skill folder's tool (``tools.yaml``): the script of the skill it runs."""


class McpToolDef(ToolDef, frozen=True, kw_only=True):
    """A tool an MCP server offered, as the session offers it: ``name`` is the session's
    (``mcp__<server>__<tool>``), ``mcp_name`` the server's own; ``effect`` is derived
    from the tool's annotations or the configuration's override, and ``annotations``
    is the tool's annotations as canonical JSON text (empty when it had none).
    ``task``: the server runs the tool only as a task (``execution.taskSupport:
    "required"``, MCP 2025-11-25), so it is called task-augmented (``mcp.task_created``)."""

    server: str
    mcp_name: str
    annotations: str = ""
    task: bool = False


InstructionsMode = Literal["system", "results"]
"""Where the active skills' instructions reach the model: ``system``, the
``<active_skills>`` block of the system prompt (every session recorded before modes
existed); ``results``, only the ``skills.load`` results in the history, the system
prompt unchanged by a load or unload (an active skill whose instructions no result
shows any more, one loaded by the user's ``/skill`` or a trigger, or one whose result
a compaction dropped, is shown in the block instead; docs/context.md)."""


CatalogMode = Literal["", "full", "compact", "names", "search"]
"""How ``<available_skills>`` shows the catalog: ``full`` descriptions, ``compact``
one-liners, ``names`` only, or ``search`` (no list: the model asks ``skills.search``).
Any mode but ``""`` also offers ``skills.search`` and ``skills.list``; ``""`` (every
session recorded before modes existed) is full up to ``compact_catalog_over`` skills,
compact above, without those tools."""


class SessionStarted(Event, frozen=True, kw_only=True):
    """The session's fixed configuration. Everything the composer needs besides the
    events that follow is here, so replay needs nothing but the log. ``params`` are
    the values the embedding program passed (``Agent.params``): inline skill templates
    were rendered with them and enabled predicates see them.
    ``instructions_in_results``: ``skills.load`` also returns the instructions of the
    skills it activates, for a model side skillog writes no system prompt for (an MCP
    client of ``skillog mcp serve``). ``context_window``: the model's context window
    in tokens (0: unknown, the session is not compacted before a request, only after a
    provider says a request was too long; docs/context.md). ``summaries``: the runtime
    that started the session summarises older turns when ``policy.context.summarise``
    asks for it (sessions recorded before it could compacted as if it were false, and
    re-drive so). ``estimator``: how the runtime counts tokens for the context budget
    (``bytes/4``, or ``tiktoken:<encoding>``; empty in sessions recorded before it was
    recorded: ``bytes/4``), so a re-drive counts the same way. ``instructions_mode``:
    where the active skills' instructions go (:data:`InstructionsMode`).
    ``context_rules``: the version of the context budget's rules the session estimates
    and compacts by (``orchestrator._context.CONTEXT_RULES``; 0 in sessions recorded
    before it), so a re-drive decides as the session did (docs/context.md).
    ``cancel_rules``: how a cancel of the session is recorded (:data:`CANCEL_RULES`; 0
    in sessions recorded before it), so verify and re-drive know whether its
    ``session.ended`` (``cancelled``) must say which events the cancel wrote."""

    event_type: ClassVar[str] = "session.started"
    agent: str
    provider: str
    model: str
    max_tokens: int
    max_turns: int
    max_active_skills: int
    file_access: bool
    policy: PolicyConfig
    host_tools: tuple[ToolDef, ...] = ()
    compact_catalog_over: int = 50
    version: str = ""
    params: dict[str, str] = msgspec.field(default_factory=dict)
    instructions_in_results: bool = False
    catalog_mode: CatalogMode = ""
    warnings: tuple[str, ...] = ()
    context_window: int = 0
    summaries: bool = False
    estimator: str = ""
    instructions_mode: InstructionsMode = "system"
    context_rules: int = 0
    cancel_rules: int = 0


CANCEL_RULES = 1
"""How a new session's cancel is recorded, kept in ``session.started.cancel_rules``.
0: the cancel's ``session.ended`` says nothing of the events before it that the
cancel's transaction wrote (re-drive finds them as it did then: the trailing events of
a cancel's kinds stamped like the end; docs/replay.md). 1: it says how many
(``session.ended.closes``), verify checks it and re-drive starts the cancel there."""


class SessionForked(Event, frozen=True, kw_only=True):
    """The first event of a session forked from another one's log."""

    event_type: ClassVar[str] = "session.forked"
    from_session: str
    at_seq: int
    at_hash: str


class CatalogSnapshot(Event, frozen=True, kw_only=True):
    """The skills the session can see, and the ones hidden from it with the reason."""

    event_type: ClassVar[str] = "catalog.snapshot"
    skills: tuple[SkillInfo, ...]
    hidden: tuple[tuple[str, str], ...] = ()


class UserMessage(Event, frozen=True, kw_only=True):
    event_type: ClassVar[str] = "message.user"
    text: str


class PromptRendered(Event, frozen=True, kw_only=True):
    """A model request was composed. ``request_hash`` is the sha256 of its canonical
    bytes; those bytes are the blobs of ``message_digests`` (all messages so far, in
    order, the new ones listed here) followed by the ``tail_digest`` blob."""

    event_type: ClassVar[str] = "prompt.rendered"
    turn: int
    request_hash: str
    message_count: int
    new_message_digests: tuple[str, ...]
    tail_digest: str


class ModelResponded(Event, frozen=True, kw_only=True):
    event_type: ClassVar[str] = "model.responded"
    turn: int
    response: ModelResponse
    duration_ms: int


class ModelFailed(Event, frozen=True, kw_only=True):
    """A model call failed. ``kind`` ``context_overflow``: the provider said the request
    was too long; the prompt is closed, the session compacts and renders the same
    turn again (once), or ends with ``context_exhausted``."""

    event_type: ClassVar[str] = "model.failed"
    turn: int
    kind: str
    message: str
    attempt: int
    will_retry: bool
    retry_after_ms: int | None = None
    duration_ms: int = 0


class ModelInterrupted(Event, frozen=True, kw_only=True):
    """The model call of ``turn`` was cancelled while it ran (the session cancelled,
    Ctrl-C, a worker stopped): what had arrived is kept, the request stays unanswered
    and the process that resumes sends it again. ``text_digest`` is the blob of the
    text received so far (the text parts' deltas, joined; empty when none came),
    ``text_size`` its bytes, ``calls`` the names of the tool calls that had started
    streaming; ``attempt`` the call's attempt in the turn."""

    event_type: ClassVar[str] = "model.interrupted"
    turn: int
    attempt: int
    text_digest: str = ""
    text_size: int = 0
    calls: tuple[str, ...] = ()
    duration_ms: int = 0


class ToolCalled(Event, frozen=True, kw_only=True):
    """The runtime took up a tool call, committed before anything of the call runs;
    ``skills`` is the active skill context, ``effect`` the tool's effect class and
    ``idempotency_key`` the key an idempotent tool receives (derived from the session
    and call ids, so a re-run after a crash passes the same one)."""

    event_type: ClassVar[str] = "tool.called"
    turn: int
    call_id: str
    tool: str
    arguments: str
    skills: tuple[str, ...]
    effect: EffectClass = "at-most-once"
    idempotency_key: str | None = None


class ToolCompleted(Event, frozen=True, kw_only=True):
    """The result the model will read for a call (errors included)."""

    event_type: ClassVar[str] = "tool.completed"
    call_id: str
    tool: str
    is_error: bool
    content: str
    duration_ms: int
    error_type: str | None = None
    reconciled: bool = False


class ToolInterrupted(Event, frozen=True, kw_only=True):
    """The outcome of an at-most-once call whose intent was recorded but whose outcome
    was not when the process stopped: it may or may not have taken effect, so it is not
    run again. The model reads ``content``."""

    event_type: ClassVar[str] = "tool.interrupted"
    call_id: str
    tool: str
    content: str


class PolicyDenied(Event, frozen=True, kw_only=True):
    event_type: ClassVar[str] = "policy.denied"
    call_id: str
    tool: str
    rule: str
    reason: str
    skill: str | None = None


class ApprovalRequested(Event, frozen=True, kw_only=True):
    """Committed before the approver is asked; pending until ``approval.resolved``,
    which any process may record (``skillog approve``). ``expires_at`` (ns, from the
    policy's ``approval_timeout_ms``) is when an undecided request counts as denied.
    ``path``, ``args`` and ``skill_hash`` name a script run concretely (empty for a
    host tool)."""

    event_type: ClassVar[str] = "approval.requested"
    call_id: str
    tool: str
    action: str
    skill: str | None = None
    tier: str | None = None
    arguments: str = ""
    expires_at: int | None = None
    path: str | None = None
    args: tuple[str, ...] = ()
    skill_hash: str | None = None
    install: tuple[str, ...] = ()
    """The ``python:`` requirements a lazy install would put into the skill's own
    environment before the script runs (``policy.lazy_install``); empty otherwise."""


class ApprovalResolved(Event, frozen=True, kw_only=True):
    event_type: ClassVar[str] = "approval.resolved"
    call_id: str
    approved: bool
    decided_by: str
    reason: str | None = None


class ApprovalRemembered(Event, frozen=True, kw_only=True):
    """The approver said "always": later calls of this session that the grant covers
    are approved without asking (``decided_by`` ``remembered: ...``), on resume and
    replay too; with ``approved`` false it said "never", and they are denied without
    asking (``remembered denial: ...``). ``scope`` ``skill``: every call of the skill
    ``skill`` with the content hash ``skill_hash``; ``pattern``: the calls that
    ``pattern`` (one ``allowed-tools`` rule) matches, of that same skill, or of host
    tools when ``skill`` is None.
    Recorded with the ``approval.resolved`` of ``call_id`` (docs/policy.md)."""

    event_type: ClassVar[str] = "approval.remembered"
    call_id: str
    scope: Literal["skill", "pattern"]
    skill: str | None = None
    skill_hash: str | None = None
    pattern: str | None = None
    decided_by: str = ""
    approved: bool = True  # False: a remembered denial (refuses what it covers)


ActivationTrigger = Literal["tool", "user", "file-read", "triggered"]


class SkillActivated(Event, frozen=True, kw_only=True):
    """A skill's instructions enter the context. ``body_digest`` is the blob of the
    SKILL.md body; ``files`` the snapshot of every file, each in the blob store;
    ``properties`` its frontmatter (the load receipt shows it), ``version`` its
    declared ``metadata.version``, ``signed_by`` the trusted key whose signature over
    ``hash`` verified when it was loaded (None: unsigned or not verified). ``fired``:
    for trigger ``triggered``, which of its declared triggers fired (``keyword:csv``,
    ``pattern:...``, ``file:*.csv``)."""

    event_type: ClassVar[str] = "skill.activated"
    name: str
    hash: str
    tier: str
    source: str
    mode: Literal["replace", "add"]
    trigger: ActivationTrigger
    body_digest: str
    files: tuple[ManifestEntry, ...]
    allowed_tools: str | None = None
    tools: tuple[ToolDef, ...] = ()
    call_id: str | None = None
    version: str | None = None
    properties: SkillProperties | None = None
    signed_by: str | None = None
    fired: str | None = None


class SkillDeactivated(Event, frozen=True, kw_only=True):
    event_type: ClassVar[str] = "skill.deactivated"
    name: str
    hash: str
    reason: Literal["unload", "replace"]
    call_id: str | None = None


class SkillActivationFailed(Event, frozen=True, kw_only=True):
    event_type: ClassVar[str] = "skill.activation_failed"
    name: str
    reason: str
    call_id: str | None = None


class ImageRef(msgspec.Struct, frozen=True, kw_only=True):
    """An image in the blob store: its media type, sha256 ``digest`` and ``size``."""

    media_type: str
    digest: str
    size: int


class ToolImages(Event, frozen=True, kw_only=True):
    """With a call's outcome: the images the model is shown with its result (an MCP
    tool's image blocks, an image file ``skills.read`` returned), each a blob."""

    event_type: ClassVar[str] = "tool.images"
    call_id: str
    images: tuple[ImageRef, ...]


class ResourceRead(Event, frozen=True, kw_only=True):
    event_type: ClassVar[str] = "resource.read"
    call_id: str
    skill: str
    path: str
    size: int
    digest: str


class ScriptStarted(Event, frozen=True, kw_only=True):
    """A script is about to start: committed before its process exists, so a long
    script is visible while it runs. ``sandbox`` and ``network`` are what policy
    demands; ``script.executed`` records what was enforced."""

    event_type: ClassVar[str] = "script.started"
    call_id: str
    skill: str
    path: str
    args: tuple[str, ...]
    sandbox: str
    network: bool
    timeout_ms: int


class ScriptExecuted(Event, frozen=True, kw_only=True):
    """A script ran (or was refused). ``network`` says whether it could reach a network;
    ``killed`` names the limit that stopped it; ``enforced`` is what was really in force
    (sandbox, network and PID isolation, limits); None in events recorded before it
    existed. Its stdout and stderr blobs hold all it printed, up to the storage cap."""

    event_type: ClassVar[str] = "script.executed"
    call_id: str
    skill: str
    path: str
    args: tuple[str, ...]
    exit_code: int | None
    duration_ms: int
    stdout_digest: str
    stderr_digest: str
    sandbox: str
    network: bool
    timed_out: bool
    truncated: bool
    refused: str | None = None
    killed: str | None = None
    enforced: Enforcement | None = None
    env: str | None = None  # the key of the skill's own environment it ran with


class SkillChanged(Event, frozen=True, kw_only=True):
    """The session's catalog changed: a skill was added (``old_hash`` None), removed
    (``skill`` None) or replaced by new contents. ``cause`` says what found it:
    None when loading a skill found its files changed, ``rescan`` for a between-turns
    rescan of the sources (``watch``), ``predicate`` when an enabled predicate changed
    its answer; ``reason`` says why, in words. An active skill stays pinned to the
    hash it was loaded with until it is loaded again."""

    event_type: ClassVar[str] = "skill.changed"
    name: str
    old_hash: str | None
    new_hash: str | None
    skill: SkillInfo | None = None
    call_id: str | None = None
    cause: Literal["rescan", "predicate"] | None = None
    reason: str | None = None


class CatalogIndexed(Event, frozen=True, kw_only=True):
    """One indexing run of the skill sources (stream ``skills-index``, not a session):
    every skill found with its hash and status, what was rejected and why, what was
    shadowed."""

    event_type: ClassVar[str] = "catalog.indexed"
    record: CatalogRecord


class SkillsInstalled(Event, frozen=True, kw_only=True):
    """A skill was installed, updated or removed (``skillog skills install``, ``update``,
    ``remove``; stream ``skills-installed``, not a session): its name, where it came
    from (``origin``, ``kind``: folder, zip or git; ``ref``), its tier and the hash of
    the contents installed (for ``remove``, of the contents removed). ``previous_hash``
    is what an update or a replacing install replaced (seed 004 EV1)."""

    event_type: ClassVar[str] = "skills.installed"
    action: Literal["install", "update", "remove"]
    name: str
    origin: str
    kind: str
    tier: str
    hash: str
    ref: str | None = None
    previous_hash: str | None = None


class SkillEnvBuilt(Event, frozen=True, kw_only=True):
    """A skill's own Python environment was built: the key (sha256 of requirements,
    interpreter, platform), what was asked for, the exact versions installed (the lock)
    and the tree hash scripts are checked against. In stream ``skills-index`` when
    ``skillog skills deps NAME --install`` built it; in a session, with the
    ``call_id`` of the ``skills.run_script`` call whose approved lazy install built it
    (``policy.lazy_install``)."""

    event_type: ClassVar[str] = "skill.env_built"
    skill: str
    key: str
    requirements: tuple[str, ...]
    interpreter: str
    platform: str
    lock: tuple[str, ...]
    tree_hash: str
    call_id: str | None = None

    @classmethod
    def of(cls, skill: str, env: EnvRecord, call_id: str | None = None) -> SkillEnvBuilt:
        """The event recording ``env``, built for ``skill`` (by call ``call_id``)."""
        fields = msgspec.structs.asdict(env)
        return cls(skill=skill, call_id=call_id, **fields)

    def record(self) -> EnvRecord:
        """The environment record this event holds."""
        fields = msgspec.structs.asdict(self)
        del fields["skill"], fields["call_id"]
        return EnvRecord(**fields)


class McpToolsListed(Event, frozen=True, kw_only=True):
    """The tools an MCP server offers the session from now on (canonical definitions,
    in the server's order), recorded before the first prompt that offers them: when
    the session starts or resumes, and whenever the server said its list changed.
    ``hash`` is the sha256 of the canonical ``tools``; ``rejected`` names the tools
    the session does not offer, with the reason (an odd or colliding name, an invalid
    schema)."""

    event_type: ClassVar[str] = "mcp.tools_listed"
    server: str
    transport: Literal["stdio", "http"]
    reason: Literal["connected", "list_changed"]
    tools: tuple[McpToolDef, ...]
    hash: str
    rejected: tuple[tuple[str, str], ...] = ()
    server_info: str = ""


class McpServerFailed(Event, frozen=True, kw_only=True):
    """An MCP server the session cannot use (from now on): it did not connect or list
    its tools in time, or its connection broke. Its tools are no longer offered."""

    event_type: ClassVar[str] = "mcp.server_failed"
    server: str
    stage: Literal["connect", "list", "call"]
    error: str


class McpResult(Event, frozen=True, kw_only=True):
    """What an MCP server answered to one call (or why it did not): the result as MCP
    returned it (text, images, resource links, structured content) is the blob
    ``digest``, canonical JSON, ``size`` bytes in full, cut to the policy's stored
    output cap when ``truncated``. ``failure``: ``timeout``, ``disconnected``,
    ``unavailable``, ``protocol``, ``cancelled`` or ``task_lost`` when there is no
    result. ``notes``: the blob of what the server said besides while the call ran (its
    progress notifications and log messages, capped), or None when it said nothing."""

    event_type: ClassVar[str] = "mcp.result"
    call_id: str
    server: str
    tool: str
    is_error: bool
    digest: str
    size: int
    truncated: bool = False
    duration_ms: int = 0
    failure: str | None = None
    notes: str | None = None


class McpSampled(Event, frozen=True, kw_only=True):
    """An MCP server asked, during the call ``call_id``, for the session's model to
    answer (``sampling/createMessage``), its ``index``-th request of the call: its
    parameters as it sent them (canonical JSON) are the blob ``params``; ``allowed``
    whether policy let the model answer, ``reason`` why not. Committed before the
    model is asked (write-ahead); ``request_hash`` is the sha256 of the canonical
    model request made of it (empty when refused before one was made)."""

    event_type: ClassVar[str] = "mcp.sampled"
    call_id: str
    server: str
    index: int
    params: str
    allowed: bool
    request_hash: str = ""
    reason: str = ""


class McpSampleAnswered(Event, frozen=True, kw_only=True):
    """The model's answer to the sampling request ``index`` of the call ``call_id``
    (its usage counts towards the session's budget), or ``error`` when the model call
    failed; the server received the answer or the error."""

    event_type: ClassVar[str] = "mcp.sample_answered"
    call_id: str
    server: str
    index: int
    response: ModelResponse | None = None
    error: str | None = None
    duration_ms: int = 0


class McpElicited(Event, frozen=True, kw_only=True):
    """An MCP server asked, during the call ``call_id``, for a human's answer to a form
    (``elicitation/create``), its ``index``-th of the call: its parameters as sent
    (message, ``requestedSchema``; canonical JSON) are the blob ``params``. Committed
    before anyone is asked. ``valid`` false: skillog refused it (``reason``: a
    malformed schema, a URL-mode request) and answered the server with an error or a
    decline."""

    event_type: ClassVar[str] = "mcp.elicited"
    call_id: str
    server: str
    index: int
    params: str
    valid: bool
    reason: str = ""


class McpElicitationAnswered(Event, frozen=True, kw_only=True):
    """The answer the server received to the form ``index`` of the call ``call_id``:
    ``action`` ``accept`` (with ``content``, the form's values as canonical JSON),
    ``decline`` or ``cancel``; ``decided_by`` who answered (``terminal``, the embedding
    program's name, ``timeout``, ``nobody``, or the human who answered through
    ``skillog approvals answer``, the API or the console), ``reason`` why when nobody
    did. An ``accept`` with a ``reason`` did not fit the form: the server received
    ``cancel``. ``answer``: the hash of the ``mcp.form_answered`` event in the stream
    ``forms/<session>`` the answer came from (empty when it came from this process);
    ``log verify`` checks that it exists and says the same."""

    event_type: ClassVar[str] = "mcp.elicitation_answered"
    call_id: str
    server: str
    index: int
    action: Literal["accept", "decline", "cancel"]
    content: str | None = None
    decided_by: str = ""
    reason: str = ""
    answer: str = ""


class McpFormAnswered(Event, frozen=True, kw_only=True):
    """A human's answer to a pending MCP form of ``session`` (the form ``index`` of the
    call ``call_id``, whose parameters are the blob ``params``), recorded in the stream
    ``forms/<session>`` by another process than the session's driver (``skillog
    approvals answer``, the service), or by the driver for its own elicitor's answer
    (the terminal: the first answer appended holds): ``action`` ``accept`` with
    ``content`` (the values; canonical JSON checked against the form when another
    process gives them), ``decline``, or ``cancel`` (the driver's own elicitor only: the
    terminal's default); ``decided_by`` who. The driver waiting on the form takes it
    and records ``mcp.elicitation_answered`` naming this event's hash."""

    event_type: ClassVar[str] = "mcp.form_answered"
    session: str
    call_id: str
    index: int
    params: str
    action: Literal["accept", "decline", "cancel"]
    content: str | None = None
    decided_by: str


class McpRoot(msgspec.Struct, frozen=True, kw_only=True):
    """One root an MCP server is told: a ``file://`` URI and its name (the skill's)."""

    uri: str
    name: str


class McpRootsChanged(Event, frozen=True, kw_only=True):
    """What an MCP server is told from now on when it asks ``roots/list`` (the active
    skills' folders policy lets it see), recorded between turns before the server is
    sent ``notifications/roots/list_changed``."""

    event_type: ClassVar[str] = "mcp.roots_changed"
    server: str
    roots: tuple[McpRoot, ...]


class McpTaskCreated(Event, frozen=True, kw_only=True):
    """An MCP server took a task-augmented call (MCP 2025-11-25 tasks) and named its
    task ``task_id``: committed before the call's result is asked for, so a process
    that resumes the session polls this task instead of creating a second one.
    ``ttl_ms``: how long the server said it keeps the task (None: no limit given)."""

    event_type: ClassVar[str] = "mcp.task_created"
    call_id: str
    server: str
    tool: str
    task_id: str
    ttl_ms: int | None = None


class Replacement(msgspec.Struct, frozen=True, kw_only=True):
    """One tool result a compaction replaced: the ``call_id`` of the result in the
    history message at ``message`` (its index), the sha256 and size in bytes of the
    content it had, and the ``stub`` the model reads instead."""

    message: int
    call_id: str
    tool: str
    digest: str
    size: int
    stub: str


class ContextCompacted(Event, frozen=True, kw_only=True):
    """The runtime shrank the history before the next request (docs/context.md).
    ``step``: ``tool_results`` (results of turns before the last ``keep_turns``),
    ``skill_instructions`` (``skills.load`` results carrying the instructions of skills
    no longer active) or ``drop_turns``: the ``dropped`` messages after the first
    (the task) are removed, whole turns, and ``note`` is added to the first message
    as a text part, saying so. ``reason``: ``budget`` (the estimate was over the threshold) or
    ``overflow`` (the provider said the last request was too long). ``tokens_before``
    and ``tokens_after`` are the runtime's estimates (deterministic, docs/context.md),
    ``budget`` the window less the reserve, ``threshold`` the size that triggers
    compaction. Every later request is rendered from the history with ``replaced``
    applied, so replay reproduces it byte for byte."""

    event_type: ClassVar[str] = "context.compacted"
    step: Literal["tool_results", "skill_instructions", "drop_turns", "summarise"]
    reason: Literal["budget", "overflow"]
    replaced: tuple[Replacement, ...]
    tokens_before: int
    tokens_after: int
    budget: int
    threshold: int
    dropped: int = 0
    note: str = ""
    summary_digest: str = ""


class SummaryRequested(Event, frozen=True, kw_only=True):
    """The intent of a summary call (``policy.context.summarise``, docs/context.md),
    committed before the model is asked: the ``dropped`` messages after the first are
    to be summarised by the request whose canonical bytes hash to ``request_hash`` (a
    blob of the session), composed from the history as folded here. ``reason``,
    ``tokens_before``, ``budget`` and ``threshold`` are the compaction's that asked for
    it. A process that stops before the answer asks again when resumed."""

    event_type: ClassVar[str] = "context.summary_requested"
    dropped: int
    request_hash: str
    reason: Literal["budget", "overflow"]
    tokens_before: int
    budget: int
    threshold: int


class SummaryAnswered(Event, frozen=True, kw_only=True):
    """The answer to the pending summary call: the model's ``response`` (recorded like
    ``model.responded``'s, its usage counted in the session's tokens and its summary
    budget), or the ``error`` it failed with after retries (the turns are then dropped
    instead, when ``policy.context.drop_turns``)."""

    event_type: ClassVar[str] = "context.summary_answered"
    response: ModelResponse | None = None
    error: str = ""
    duration_ms: int = 0


class SessionSuspended(Event, frozen=True, kw_only=True):
    """The session stopped to wait for approvals nobody in this process could give;
    ``skillog approve``/``deny`` decide them from any process and ``skillog resume``
    continues."""

    event_type: ClassVar[str] = "session.suspended"
    reason: Literal["awaiting_approval"]
    call_ids: tuple[str, ...]


class LeaseAcquired(Event, frozen=True, kw_only=True):
    """A worker took a session (stream ``lease/<session>``, not the session's own):
    it may act on the session until ``until`` (ns), renewing before then."""

    event_type: ClassVar[str] = "lease.acquired"
    session: str
    worker: str
    until: int


class LeaseRenewed(Event, frozen=True, kw_only=True):
    """The holder's heartbeat: its lease now runs until ``until`` (ns)."""

    event_type: ClassVar[str] = "lease.renewed"
    worker: str
    until: int


class LeaseReleased(Event, frozen=True, kw_only=True):
    """The holder let the session go: ``ended``, ``suspended`` (awaiting approval),
    ``handed back`` (shutdown), or ``failed: ...``; or, first in the stream, ``queued``
    by ``submitter`` (who asked) with the named ``policy`` preset."""

    event_type: ClassVar[str] = "lease.released"
    worker: str
    outcome: str
    submitter: str = ""
    policy: str = ""


class SessionEnded(Event, frozen=True, kw_only=True):
    """The session is over. ``closes``, written by a cancel only (``orchestrator._cancel``,
    :data:`CANCEL_RULES` 1): how many events right before this one the cancel wrote in
    its transaction (the outcomes of the open calls, the denials of pending approvals);
    absent from every other end, so their bytes are as before."""

    event_type: ClassVar[str] = "session.ended"
    reason: Literal[
        "completed",
        "max_turns",
        "error",
        "cancelled",
        "budget_exceeded",
        "closed",
        "context_exhausted",
    ]
    turns: int
    error: str | None = None
    closes: int | msgspec.UnsetType = msgspec.UNSET


class WebhookSending(Event, frozen=True, kw_only=True):
    """The service is about to POST a notification, written ahead in the stream
    ``webhook/<delivery>`` (never in a session's: a session's hashes do not depend on a
    receiver): ``delivery`` the notified event's hash, ``attempt`` from 1, ``kind`` the
    notification, ``session`` and ``seq`` the event notified, ``sender`` the server."""

    event_type: ClassVar[str] = "webhook.sending"
    delivery: str
    attempt: int
    kind: str
    session: str
    seq: int
    sender: str


class WebhookSent(Event, frozen=True, kw_only=True):
    """The outcome of the attempt just announced: ``status`` the receiver's HTTP status
    (0 when none came), ``error`` why it failed, ``outcome`` ``delivered``, ``retrying``
    (another attempt follows) or ``failed`` (the last one). ``taken_over_by``: another
    server closed the attempt, open past its bound (its sender stopped mid-attempt):
    its outcome is unknown, and that server makes the next attempt."""

    event_type: ClassVar[str] = "webhook.sent"
    delivery: str
    attempt: int
    outcome: Literal["delivered", "retrying", "failed"]
    status: int = 0
    error: str | None = None
    taken_over_by: str | None = None


EVENT_TYPES: tuple[type[Event], ...] = (
    SessionStarted,
    SessionForked,
    CatalogSnapshot,
    UserMessage,
    PromptRendered,
    ModelResponded,
    ModelFailed,
    ModelInterrupted,
    ToolCalled,
    ToolCompleted,
    ToolInterrupted,
    PolicyDenied,
    ApprovalRequested,
    ApprovalResolved,
    ApprovalRemembered,
    SkillActivated,
    SkillDeactivated,
    SkillActivationFailed,
    ResourceRead,
    ScriptStarted,
    ScriptExecuted,
    SkillChanged,
    CatalogIndexed,
    SkillEnvBuilt,
    SkillsInstalled,
    SessionSuspended,
    ContextCompacted,
    SummaryRequested,
    SummaryAnswered,
    McpToolsListed,
    McpServerFailed,
    McpTaskCreated,
    McpResult,
    McpSampled,
    McpSampleAnswered,
    McpRootsChanged,
    McpElicited,
    McpElicitationAnswered,
    McpFormAnswered,
    ToolImages,
    LeaseAcquired,
    LeaseRenewed,
    LeaseReleased,
    SessionEnded,
    WebhookSending,
    WebhookSent,
)

CODEC: Codec[Event] = Codec(EVENT_TYPES)
"""The one codec for session events: canonical bytes in, typed bodies out."""
