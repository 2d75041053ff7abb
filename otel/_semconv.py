"""Attribute and instrument names: the GenAI conventions, OpenInference, and skillog's own.

``gen_ai.skill.*`` follows the names proposed upstream for Agent Skills and is
**experimental**: it may be renamed when the conventions adopt it. ``skillog.*`` names
are this project's and documented in docs/telemetry.md.
"""

from __future__ import annotations

# GenAI semantic conventions (gen-ai-spans.md, gen-ai-agent-spans.md).
OPERATION = "gen_ai.operation.name"
PROVIDER = "gen_ai.provider.name"
REQUEST_MODEL = "gen_ai.request.model"
REQUEST_MAX_TOKENS = "gen_ai.request.max_tokens"
RESPONSE_MODEL = "gen_ai.response.model"
RESPONSE_ID = "gen_ai.response.id"
TIME_TO_FIRST_CHUNK = "gen_ai.response.time_to_first_chunk"
FINISH_REASONS = "gen_ai.response.finish_reasons"
CONVERSATION_ID = "gen_ai.conversation.id"
AGENT_NAME = "gen_ai.agent.name"
AGENT_VERSION = "gen_ai.agent.version"
TOOL_NAME = "gen_ai.tool.name"
TOOL_CALL_ID = "gen_ai.tool.call.id"
TOOL_TYPE = "gen_ai.tool.type"
INPUT_TOKENS = "gen_ai.usage.input_tokens"
OUTPUT_TOKENS = "gen_ai.usage.output_tokens"
CACHE_READ_TOKENS = "gen_ai.usage.cache_read.input_tokens"
CACHE_CREATION_TOKENS = "gen_ai.usage.cache_creation.input_tokens"
TOKEN_TYPE = "gen_ai.token.type"
ERROR_TYPE = "error.type"
ERROR_OTHER = "_OTHER"
# Opt-in content attributes.
INPUT_MESSAGES = "gen_ai.input.messages"
OUTPUT_MESSAGES = "gen_ai.output.messages"
SYSTEM_INSTRUCTIONS = "gen_ai.system_instructions"
TOOL_CALL_ARGUMENTS = "gen_ai.tool.call.arguments"
TOOL_CALL_RESULT = "gen_ai.tool.call.result"

# Experimental skill attributes (as proposed upstream).
SKILL_NAME = "gen_ai.skill.name"
SKILL_HASH = "gen_ai.skill.hash"
SKILL_SOURCE = "gen_ai.skill.source"
SKILL_TRUST_TIER = "gen_ai.skill.trust_tier"

# General conventions.
SESSION_ID = "session.id"
PROCESS_EXIT_CODE = "process.exit.code"

# OpenInference (Phoenix, Langfuse and Arize read these to draw the agent tree).
OI_KIND = "openinference.span.kind"
OI_MODEL = "llm.model_name"
OI_PROMPT_TOKENS = "llm.token_count.prompt"
OI_COMPLETION_TOKENS = "llm.token_count.completion"
OI_TOOL_NAME = "tool.name"

# Instruments (see _metrics.INSTRUMENTS).
M_OPERATION_DURATION = "gen_ai.client.operation.duration"
M_TOKEN_USAGE = "gen_ai.client.token.usage"
M_TIME_TO_FIRST_CHUNK = "gen_ai.client.operation.time_to_first_chunk"
M_ACTIVATIONS = "skillog.skill.activations"
M_ACTIVATION_FAILURES = "skillog.skill.activation_failures"
M_RESOURCE_READS = "skillog.skill.resource_reads"
M_SCRIPT_RUNS = "skillog.skill.script_runs"
M_SCRIPT_FAILURES = "skillog.skill.script_failures"
M_SCRIPT_DURATION = "skillog.skill.script.duration"
M_POLICY_DENIALS = "skillog.policy.denials"
M_TOOL_CALLS = "skillog.tool.calls"
M_SESSION_DURATION = "skillog.session.duration"
M_SESSION_TURNS = "skillog.session.turns"
