"""The tool-call pipeline: write-ahead, one forward path per call.

Every call walks the same stages, top to bottom (docs/effects.md)::

    plan      resolve the tool and decide (pure: _tools.plan_call)
    intent    commit tool.called, with the effect class, before anything runs
              (the intents of calls that start together in one transaction)
    approval  commit approval.requested, ask, commit approval.resolved
    effect    commit script.started for a script, then run the effect
    outcome   commit the call's events and tool.completed, as soon as it finishes

A call whose intent the log already holds (the process stopped mid-call) continues
from what the log says: decisions are reused, never asked twice; an effect that may
have started runs again only if its effect class allows it, otherwise the call
resolves as ``tool.interrupted`` (or as the embedding program reconciles it).

:func:`run_turn_tools` runs the calls of one model response: calls that change the
active skills (load, unload) in call order, the others concurrently, each from the
view at its position. Each call commits its own outcome; the next prompt orders the
results by call order, so timing never reaches the log's meaning or the prompt.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass

import msgspec
import trio

from eventlog import ConcurrencyError, SkillogError

from ._calls import CallContext, Recorded, ToolError, View, idempotency_key
from ._effects import ApprovalDecision, ApprovalRequest, InterruptedCall, Reconciler
from ._events import (
    ApprovalRemembered,
    ApprovalRequested,
    ApprovalResolved,
    ToolCalled,
    ToolCompleted,
    ToolInterrupted,
)
from ._model import ToolCall
from ._policy import remembered_grant
from ._state import SessionState
from ._tools import Plan, PolicyError, _deny, plan_call, with_install

INTERRUPTED = (
    "the call was interrupted by a restart; it may or may not have taken effect; "
    "check before retrying"
)


class ApproverError(SkillogError):
    """The embedding program's approver raised instead of deciding."""


SEQUENTIAL = frozenset({"skills.load", "skills.unload"})
"""Calls that change the view of the calls after them, so they run in call order."""

MakeContext = Callable[[int, View, Recorded], CallContext]


@dataclass(frozen=True)
class Hooks:
    """What the embedding program supplies to the pipeline beyond the effects: the
    clock for approval expiry and the reconciler of interrupted calls."""

    clock: Callable[[], int]
    reconcile: Reconciler | None = None


async def run_turn_tools(
    state: SessionState, make: MakeContext, hooks: Hooks, fresh: frozenset[str] = frozenset()
) -> list[str]:
    """Run every call of the last model response that has no outcome yet; returns the
    ids of the calls left waiting for an approval. ``fresh`` names the calls whose
    intents this process committed itself (with the model response) and nothing has
    acted on: unlike an intent found in the log, theirs says nothing has started.

    Consecutive calls that do not change the view form a group: their intents are
    committed together, in call order, and then they run concurrently. A load or
    unload runs alone, in order, and the calls after it see what it changed."""
    progress = state.turn_progress
    assert progress is not None and state.config is not None
    view = View(
        state.config,
        dict(progress.base_catalog),
        list(progress.base_active),
        progress.base_grants,
        state.mcp_tools,
    )
    waiting: list[str] = []

    async def proceed(ctx: CallContext, plan: Plan) -> None:
        if not await run_call(ctx, plan, hooks):
            waiting.append(ctx.call.id)

    try:
        await _run_calls(state, make, view, fresh, proceed)
    except BaseExceptionGroup as group:
        # One failure (say, the embedding program's approver raised) is raised as
        # itself, not as a group from deep inside the loop.
        leaves = _leaves(group)
        if len(leaves) == 1:
            raise leaves[0] from None
        raise
    return waiting


async def _run_calls(
    state: SessionState,
    make: MakeContext,
    view: View,
    fresh: frozenset[str],
    proceed: Callable[[CallContext, Plan], Awaitable[None]],
) -> None:
    progress = state.turn_progress
    assert progress is not None
    calls = state.pending_calls
    only = calls[0] if len(calls) == 1 else None
    if only and only.name not in SEQUENTIAL and only.id not in state.pending_results:
        # A turn of one call (the common case) runs it in this task, as the last call of
        # a turn does below, without the nursery nothing would be spawned into: its exit
        # is a scheduler pass of its own on every call.
        ctx = make(0, view.copy(), _recorded(state, only.id, fresh))
        plan = plan_call(ctx)
        await commit_intents([(ctx, plan)])
        ctx.alone = True
        await proceed(ctx, plan)
        return
    async with trio.open_nursery() as nursery:
        group: list[tuple[CallContext, Plan]] = []

        spawned = False

        async def start_group(last: bool = False) -> None:
            nonlocal spawned
            await commit_intents(group)
            if last and len(group) == 1:
                # The turn's last call, alone in its group (the common case): run it in
                # this task, without a task of its own to spawn and wait for; when no
                # call was spawned before it, nothing else of the session is appending.
                ctx, plan = group.pop()
                ctx.alone = not spawned
                await proceed(ctx, plan)
                return
            for ctx, plan in group:
                nursery.start_soon(proceed, ctx, plan)
                spawned = True
            group.clear()

        for index, call in enumerate(state.pending_calls):
            done = call.id in state.pending_results
            if call.name in SEQUENTIAL:
                await start_group()
                if done:  # its activations are in the log: later calls see them
                    for change in progress.changes.get(call.id, ()):
                        view.change_skills(change)
                else:
                    ctx = make(index, view, _recorded(state, call.id, fresh))
                    plan = plan_call(ctx)
                    await commit_intents([(ctx, plan)])
                    await proceed(ctx, plan)
            elif not done:
                ctx = make(index, view.copy(), _recorded(state, call.id, fresh))
                group.append((ctx, plan_call(ctx)))
        await start_group(last=True)


def _leaves(group: BaseExceptionGroup[BaseException]) -> list[BaseException]:
    out: list[BaseException] = []
    for error in group.exceptions:
        out += _leaves(error) if isinstance(error, BaseExceptionGroup) else [error]
    return out


def first_group(calls: Sequence[ToolCall]) -> Sequence[ToolCall]:
    """The calls a turn starts with: the first one if it changes the view, else every
    call up to the first that does. Their intents can be committed together with the
    model response that asks for them."""
    if calls and calls[0].name in SEQUENTIAL:
        return calls[:1]
    end = next((i for i, c in enumerate(calls) if c.name in SEQUENTIAL), len(calls))
    return calls[:end]


def _recorded(state: SessionState, call_id: str, fresh: frozenset[str]) -> Recorded:
    progress = state.turn_progress
    assert progress is not None
    return Recorded(
        called=progress.called.get(call_id),
        fresh=call_id in fresh,
        requested=state.pending_approvals.get(call_id),
        decision=progress.approvals.get(call_id),
        decided_while_suspended=call_id in progress.decided_while_suspended,
        started=progress.started.get(call_id),
        install=progress.installs.get(call_id),
        task=progress.tasks.get(call_id),
        forms=tuple(f for (c, _), f in sorted(progress.forms.items()) if c == call_id),
    )


async def run_call(ctx: CallContext, plan: Plan, hooks: Hooks) -> bool:
    """Walk one call, its intent committed, through the rest of the pipeline; False
    when it is left waiting for an approval (nothing of it ran), True once its outcome
    is committed."""
    start = time.monotonic_ns()
    try:
        if plan.refusal is not None:
            raise plan.refusal
        if plan.install and await _env_missing(ctx, plan):
            plan = with_install(ctx, plan)
        if plan.approval is not None:
            decision = await _approval(ctx, plan, hooks)
            if decision is None:
                return False
            if not decision.approved:
                raise _deny(
                    ctx,
                    "approval",
                    f"not approved ({decision.decided_by}): {plan.approval.action}",
                    plan.approval.skill,
                )
        # A call whose MCP task the log names took effect once, as that task: it
        # resumes by polling the task, whatever its class (mcp/_tasks.py).
        if (
            _may_have_started(ctx, plan)
            and plan.effect == "at-most-once"
            and ctx.recorded.task is None
        ):
            await _interrupted(ctx, hooks)
            return True
        if plan.script is not None:
            # Every run of a script commits its own start, a re-run after a restart
            # too (only a pure one gets here): the log shows each process that ran.
            await ctx.commit([plan.script])
        assert plan.act is not None
        content = await plan.act(ctx)
        is_error, error_type = False, None
    except ToolError as e:
        if isinstance(e, PolicyError):
            ctx.rec.add(e.event)
        content, is_error, error_type = str(e), True, e.error_type
    await ctx.commit(
        [
            ToolCompleted(
                call_id=ctx.call.id,
                tool=ctx.call.name,
                is_error=is_error,
                content=content,
                duration_ms=(time.monotonic_ns() - start) // 1_000_000,
                error_type=error_type,
            )
        ]
    )
    return True


async def _env_missing(ctx: CallContext, plan: Plan) -> bool:
    """Whether a script's environment must be installed first (``policy.lazy_install``):
    as the call's approval request says when the log has one (asked once, answered by
    whoever resolves it, and what a resume or a re-drive goes by), else as the
    environments on disk say now."""
    recorded = ctx.recorded.install
    if recorded is not None:
        return bool(recorded)
    return await ctx.effects.env_missing(plan.install, ctx.call.id)


async def commit_intents(calls: list[tuple[CallContext, Plan]]) -> None:
    """Commit ``tool.called`` for each call the log does not have yet, in one
    transaction, in call order: the calls are taken up."""
    intents = [intent(ctx, plan) for ctx, plan in calls if ctx.recorded.called is None]
    if intents:
        await calls[0][0].commit(intents)


def intent(ctx: CallContext, plan: Plan) -> ToolCalled:
    """The ``tool.called`` event of a planned call."""
    call = ctx.call
    return ToolCalled(
        turn=ctx.turn,
        call_id=call.id,
        tool=call.name,
        arguments=call.arguments,
        skills=ctx.view.active_names,
        effect=plan.effect,
        idempotency_key=idempotency_key(ctx.session_id, call.id)
        if plan.effect == "idempotent"
        else None,
    )


def without_effect(plan: Plan) -> bool:
    """Whether a planned call has nothing that write-ahead protects: it is ``pure``,
    asks nobody, starts no script and installs nothing. Such a call may run before
    its intent is durable; its intent and outcome are then committed together, and
    a process that dies before that commit leaves no trace of it and no effect."""
    return (
        plan.effect == "pure" and plan.approval is None and plan.script is None and not plan.install
    )


def _may_have_started(ctx: CallContext, plan: Plan) -> bool:
    """Whether an earlier process may have started this call's effect: its last
    durable step before the effect is in the log. For a script that is
    ``script.started``; for other calls the intent, and the approval when one was
    needed, unless that approval was given while the session was suspended (so no
    process has acted on it)."""
    recorded = ctx.recorded
    if plan.script is not None:
        return recorded.started is not None
    if recorded.called is None or recorded.fresh:
        return False
    if plan.approval is None:
        return True
    return recorded.decision is not None and not recorded.decided_while_suspended


async def _approval(ctx: CallContext, plan: Plan, hooks: Hooks) -> ApprovalDecision | None:
    """The decision on a call that needs one: from the log when it is there, else
    asked (the request committed first). None when nobody can decide now."""
    assert plan.approval is not None
    recorded = ctx.recorded
    if recorded.decision is not None:
        return ApprovalDecision(
            approved=recorded.decision.approved,
            decided_by=recorded.decision.decided_by,
            reason=recorded.decision.reason,
        )
    requested = recorded.requested
    by = plan.approval.preapproved_by
    refused = plan.approval.denied_by
    if requested is None and refused is not None:
        # A remembered denial covers it: recorded as decided, nobody asked.
        await ctx.commit(
            [
                _request_event(ctx, plan, hooks.clock()),
                ApprovalResolved(call_id=ctx.call.id, approved=False, decided_by=refused),
            ]
        )
        return ApprovalDecision(approved=False, decided_by=refused)
    if requested is None and by is not None:
        # A trusted skill's allowed-tools allow it: recorded as decided, nobody asked.
        await ctx.commit(
            [
                _request_event(ctx, plan, hooks.clock()),
                ApprovalResolved(call_id=ctx.call.id, approved=True, decided_by=by),
            ]
        )
        return ApprovalDecision(approved=True, decided_by=by)
    if requested is None:
        requested = _request_event(ctx, plan, hooks.clock())
        await ctx.commit([requested])
    expires_at = requested.expires_at
    decision: ApprovalDecision | None = None
    if expires_at is None or hooks.clock() < expires_at:
        timeout = (expires_at - hooks.clock()) / 1e9 if expires_at is not None else float("inf")
        with trio.move_on_after(timeout):
            try:
                decision, elsewhere = await _ask(ctx, _request(ctx, requested))
            except Exception as e:  # the embedding program's code: name it, plainly
                raise ApproverError(
                    f"the approver raised {type(e).__name__}: {e} (asked about call "
                    f"{ctx.call.id}, {requested.action[:200]!r}); the request stays pending "
                    "and the session resumable"
                ) from e
            if elsewhere:
                return decision  # recorded by the process that decided
    if decision is None and expires_at is not None and hooks.clock() >= expires_at:
        decision = ApprovalDecision(
            approved=False,
            decided_by="expired",
            reason="no decision before the request expired",
        )
    if decision is not None:
        grant = _grant(requested, decision)
        resolved = ApprovalResolved(
            call_id=ctx.call.id,
            approved=decision.approved,
            decided_by=decision.decided_by,
            reason=decision.reason,
        )
        try:
            await ctx.commit([resolved, *([grant] if grant is not None else [])])
        except ConcurrencyError:
            # Another process decided between the answer and its commit: its decision
            # holds (it is in the log); anything else it wrote means the session moved on.
            first = await _elsewhere(ctx, wait=False)
            if first is None:
                raise
            ctx.effects.approval_withdrawn(_request(ctx, requested), first)
            return first
    return decision


async def _elsewhere(ctx: CallContext, *, wait: bool) -> ApprovalDecision | None:
    assert ctx.decided_elsewhere is not None
    found = await ctx.decided_elsewhere(ctx.call.id, wait=wait)
    if found is None:
        return None
    return ApprovalDecision(
        approved=found.approved, decided_by=found.decided_by, reason=found.reason
    )


async def _ask(ctx: CallContext, request: ApprovalRequest) -> tuple[ApprovalDecision | None, bool]:
    """The in-process approver's decision (the terminal's), raced against one recorded
    meanwhile by another process (``skillog approve``, the service), which writes to
    the session's stream as it does for a suspended session: the first in the log
    holds, and the approver whose question it answered is told (``withdrawn``).
    Returns the decision and whether it came from elsewhere. An approver that cannot
    decide (None) suspends the session, as before."""
    if ctx.decided_elsewhere is None:
        return await ctx.effects.approve(request), False
    first: ApprovalDecision | None = None
    mine: ApprovalDecision | None = None

    async def watch(nursery: trio.Nursery) -> None:
        nonlocal first
        first = await _elsewhere(ctx, wait=True)
        nursery.cancel_scope.cancel()  # the approver's question is withdrawn

    failed: Exception | None = None  # raised bare, as without the watch beside it
    async with trio.open_nursery() as nursery:
        nursery.start_soon(watch, nursery)
        try:
            mine = await ctx.effects.approve(request)
        except Exception as e:
            failed = e
        nursery.cancel_scope.cancel()
    if first is None:
        if failed is not None:
            raise failed
        return mine, False
    ctx.effects.approval_withdrawn(request, first)
    return first, True


def _grant(requested: ApprovalRequested, decision: ApprovalDecision) -> ApprovalRemembered | None:
    """What an in-process approver's "always" records: a grant, or for a denial a
    remembered denial (the same scopes)."""
    if decision.remember is None:
        return None
    try:
        grant = remembered_grant(decision.remember, requested, decision.decided_by)
        return grant if decision.approved else msgspec.structs.replace(grant, approved=False)
    except ValueError as e:
        raise ApproverError(
            f"the approver's remember={decision.remember!r} for call {requested.call_id} "
            f"cannot be recorded: {e}; the request stays pending and the session resumable"
        ) from e


def _request_event(ctx: CallContext, plan: Plan, now: int) -> ApprovalRequested:
    assert plan.approval is not None
    skill = plan.approval.skill
    ttl = ctx.view.config.policy.approval_timeout_ms
    return ApprovalRequested(
        call_id=ctx.call.id,
        tool=ctx.call.name,
        action=plan.approval.action,
        skill=skill.name if skill else None,
        tier=skill.tier if skill else None,
        arguments=ctx.call.arguments,
        expires_at=now + ttl * 1_000_000 if ttl is not None else None,
        path=plan.approval.path,
        args=plan.approval.args,
        skill_hash=skill.hash if skill else None,
        install=plan.approval.install,
    )


def _request(ctx: CallContext, event: ApprovalRequested) -> ApprovalRequest:
    return ApprovalRequest(
        session_id=ctx.session_id,
        call_id=event.call_id,
        tool=event.tool,
        action=event.action,
        skill=event.skill,
        tier=event.tier,
        arguments=event.arguments,
        expires_at=event.expires_at,
        path=event.path,
        args=event.args,
        skill_hash=event.skill_hash,
        install=event.install,
    )


async def _interrupted(ctx: CallContext, hooks: Hooks) -> None:
    """Resolve an at-most-once call that may have run: as the embedding program's
    reconciler says, or as ``tool.interrupted``."""
    outcome = None
    if hooks.reconcile is not None:
        outcome = await hooks.reconcile(
            InterruptedCall(
                session_id=ctx.session_id,
                call_id=ctx.call.id,
                tool=ctx.call.name,
                arguments=ctx.call.arguments,
            )
        )
    if outcome is None:
        await ctx.commit(
            [ToolInterrupted(call_id=ctx.call.id, tool=ctx.call.name, content=INTERRUPTED)]
        )
        return
    await ctx.commit(
        [
            ToolCompleted(
                call_id=ctx.call.id,
                tool=ctx.call.name,
                is_error=outcome.is_error,
                content=outcome.content,
                duration_ms=0,
                error_type=outcome.error_type,
                reconciled=True,
            )
        ]
    )
