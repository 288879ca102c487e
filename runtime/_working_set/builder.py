"""`WorkingSetBuilder`: what the model sees at each step, built in the six numbered steps of
`build()`."""

from __future__ import annotations

import gc
from collections.abc import Mapping, Sequence
from operator import attrgetter
from typing import Any

from .._tokens import REPLY_PRIMING_TOKENS, CalibratedCounter, TokenCounter, default_counter
from ..errors import ConfigError, ContextOverflowError
from .config import LEVELS, Budget, ContextStrategy, Fidelity, message_text
from .memory import MessageMemory
from .records import ContextDecision, PinBlock, Summarizer, WorkingSet, render_pin
from .report import Plan, context_report, explanation, sent_messages_and_decisions
from .slots import ALARM, BASE_SCORE, MessageInfo, Slot, keywords_of, scoring_text
from .summary import try_summarize

_LEVEL_INDEX = {level: i for i, level in enumerate(LEVELS)}
_INT_COUNTERS = (TokenCounter, CalibratedCounter)
_L0 = attrgetter("l0")


# ---------------------------------------------------------------------------------------------
# The builder
# ---------------------------------------------------------------------------------------------
class WorkingSetBuilder:
    """Builds the working set of each step. One builder can serve many sessions (it keeps no
    per-conversation state; token counts are cached in the shared `TokenCounter`).

    Examples:

        builder = WorkingSetBuilder(context_window=8000)
        ws = await builder.build(history, tools=schemas, pins=[PinBlock("p_1a2b3c4d", "facts", "...")],
                                 turn=3, step=1, summarize=my_summarizer)
        await provider.complete(ws.messages, tools=schemas)
        writer.emit("context_decision", metadata={..., **ws.decision.to_metadata()})
    """

    #: Reuse the previous build's per-message results where they are provably the same (see
    #: `MessageMemory.slots`); False builds every step from the per-message cache alone (the
    #: reference the tests compare against).
    incremental = True

    def __init__(
        self,
        counter: TokenCounter | None = None,
        *,
        context_window: int,
        strategy: ContextStrategy | None = None,
        response_reserve: int | None = None,
        fidelity: Fidelity | None = None,
    ) -> None:
        self.counter = counter if counter is not None else default_counter()
        self.budget = Budget(context_window, response_reserve)
        self.strategy = strategy if strategy is not None else ContextStrategy()
        self.fidelity = fidelity if fidelity is not None else Fidelity()
        # The per-message cache, and what the previous build found for the next one to take.
        self._memory = MessageMemory()
        # The last goal graded for (its keywords), see `_grade`.
        self._goal: frozenset[str] | None = None

    @property
    def context_window(self) -> int:
        return self.budget.context_window

    async def build(
        self,
        history: Sequence[Mapping[str, Any]],
        *,
        tools: Sequence[Mapping[str, Any]] | None = None,
        pins: Sequence[PinBlock] = (),
        turn: int,
        step: int,
        summarize: Summarizer | None = None,
        message_turns: Sequence[int] | None = None,
    ) -> WorkingSet:
        """Build the messages for one LLM call.

        `history` is the full conversation in OpenAI shape (it is not modified). `message_turns[i]`,
        if given, is the 1-based turn of `history[i]` (shown in L3 stubs so the model can `recall`
        it); by default turn = number of user messages up to and including that message.
        `summarize` receives a ready summarizer request (a system and a user message, asking for at
        most `SUMMARY_MAX_TOKENS` tokens) and returns the summary text; it is awaited at most once.

        1. Split the layers: identity = leading system messages, task = the last user message,
           working = the rest; group each assistant `tool_calls` message with its tool results into
           one unit (units are only ever dropped whole).
        2. Count exactly: every message at L0 (cached), the tool schemas, each rendered pin.
           `budget = window − reserve − tools`; the floor (identity + task + pins + reply priming)
           must fit it, else `ContextOverflowError`.
        3. Select the strategy from the demand ratio (all at L0 / window). Passthrough is kept only
           if everything fits; otherwise it escalates to tail_preserve.
        4. Apply it. tail_preserve: tail = last `keep_recent` messages (widened to whole units),
           middle messages scored for relevance to the task and graded L0–L3. llm_summarize: one
           summary call replaces the middle (too small a middle, no room, no `summarize`, or a
           failing call → tail_preserve, and the decision says so). aggressive_truncate: drop
           everything before the last `aggressive_keep_turns` user turns.
        5. Fit: while over budget, demote middle messages (least relevant first) one level at a time,
           then drop middle units, then demote tail messages (oldest first), then drop tail units.
           Identity, task and pins are never touched, so this always ends within budget.
        6. Assemble identity, pins, then the rest in order; write one decision per input message
           and per pin, and the report.
        """
        paused = _pause_collector()
        try:
            plan = self._layers(history, message_turns, list(tools or ()), pins)  # 1
            self._count(plan)  # 2
            self._select(plan)  # 3
            if plan.used == "llm_summarize" and paused:
                gc.enable()  # the summarizer is awaited with the collector on
                try:
                    await self._apply(plan, summarize)  # 4
                finally:
                    paused = _pause_collector()
            else:
                await self._apply(plan, summarize)  # 4 (nothing is awaited without a summary)
            self._fit_all(plan)  # 5
            ws = self._assemble(plan, turn, step)  # 6
            del plan  # its slots are freed before the collector runs again
        finally:
            if paused:
                gc.enable()
        return ws

    # -- the six steps of build() ---------------------------------------------------------------
    def _layers(
        self,
        history: Sequence[Mapping[str, Any]],
        message_turns: Sequence[int] | None,
        tools: list[Mapping[str, Any]],
        pins: Sequence[PinBlock],
    ) -> Plan:
        """Step 1: layers and units."""
        n = len(history)
        k = 0
        while k < n and history[k].get("role") == "system":
            k += 1
        task_idx: int | None = None
        for i in range(n - 1, k - 1, -1):
            if history[i].get("role") == "user":
                task_idx = i
                break
        turns = self._turns(history, k, message_turns)
        slots, units, texts = self._memory.slots(history, turns, k, self.counter, self.incremental)
        for u, members in enumerate(units):
            for i in members:
                slots[i].unit = u
        for i in range(k):
            slots[i].region = "identity"
        if task_idx is not None:
            slots[task_idx].region = "task"
        plan = Plan(n=n, k=k, task_idx=task_idx, slots=slots, units=units, tools=tools, pins=pins)
        plan.l0_texts = texts
        return plan

    def _count(self, plan: Plan) -> None:
        """Step 2: counts and the floor (identity + task + pins + reply priming must fit)."""
        counter = self.counter
        slots, k, task_idx = plan.slots, plan.k, plan.task_idx
        plan.tools_tokens = tools_tokens = counter.count_tools(plan.tools)
        reserve = self.budget.reserve
        plan.budget_total = self.budget.for_messages(tools_tokens)
        plan.pin_msgs = [render_pin(p) for p in plan.pins]
        plan.pin_counts = [counter.count_message(m) for m in plan.pin_msgs]
        plan.pin_tokens = pin_tokens = sum(plan.pin_counts)
        identity_tokens = sum(s.l0 for s in slots[:k])
        task_tokens = slots[task_idx].l0 if task_idx is not None else 0
        floor = identity_tokens + task_tokens + pin_tokens + REPLY_PRIMING_TOKENS
        if floor > plan.budget_total:
            raise ContextOverflowError(
                f"the minimum working set does not fit a context window of {self.context_window} tokens: "
                f"identity {identity_tokens} + latest user message {task_tokens} + pins {pin_tokens} "
                f"+ reply priming {REPLY_PRIMING_TOKENS} + tool schemas {tools_tokens} "
                f"+ response reserve {reserve} = {floor + tools_tokens + reserve} tokens. "
                "Shorten the message, unpin content, send fewer tools or raise context_window."
            )

    def _select(self, plan: Plan) -> None:
        """Step 3: strategy selection from the demand ratio; passthrough only if all fits at L0."""
        history_l0 = sum(map(_L0, plan.slots))
        plan.demand = history_l0 + REPLY_PRIMING_TOKENS + plan.pin_tokens + plan.tools_tokens
        plan.demand_ratio = plan.demand / self.context_window
        plan.requested = plan.used = self.strategy.select(plan.demand_ratio)
        fits_at_l0 = history_l0 + REPLY_PRIMING_TOKENS + plan.pin_tokens <= plan.budget_total
        if plan.requested == "passthrough" and not fits_at_l0:
            plan.used = "tail_preserve"
            plan.note = "passthrough requested but the history does not fit at L0; used tail_preserve"

    async def _apply(self, plan: Plan, summarize: Summarizer | None) -> None:
        """Step 4: apply the strategy. `plan.fixed` = tokens of everything sent besides the input
        messages."""
        slots, k, task_idx = plan.slots, plan.k, plan.task_idx
        plan.fixed = plan.pin_tokens + REPLY_PRIMING_TOKENS
        if plan.used == "passthrough":
            for s in slots[k:]:
                if s.region != "task":
                    s.reason = "passthrough"
        elif plan.used == "aggressive_truncate":
            self._aggressive(slots, k)
        else:
            # Identity comes before `k`, the tail from `tail_start` (>= k) on; the task is its own.
            tail_start = self._tail_start(slots, plan.units, k)
            for s in slots[tail_start:]:
                if s.region == "middle":
                    s.region = "tail"
            middle = [s for s in slots[k:tail_start] if s.region == "middle"]
            if plan.used == "llm_summarize":
                outcome = await try_summarize(
                    self.counter,
                    self.strategy.summarize_min_tokens,
                    slots,
                    middle,
                    plan.budget_total,
                    plan.fixed,
                    summarize,
                )
                (
                    plan.summary_msg,
                    plan.summary_call_made,
                    plan.summary_error,
                    plan.summary_request,
                    fail_note,
                ) = outcome
                if plan.summary_msg is None:
                    plan.used = "tail_preserve"
                    plan.note = f"llm_summarize requested but {fail_note}; used tail_preserve"
            if plan.used == "tail_preserve":
                self._grade(slots, middle, task_idx)
            for s in slots[tail_start:]:
                if s.region == "tail":
                    s.reason = "tail_preserve_tail"

        for s in slots[:k]:
            s.reason = "identity"
        if task_idx is not None:
            slots[task_idx].reason = "task"

    def _fit_all(self, plan: Plan) -> None:
        """Step 5: fit the budget (see `_fit`); drop the summary only as a safety net."""
        slots, budget_total = plan.slots, plan.budget_total
        summary_msg = plan.summary_msg
        summary_tokens = self.counter.count_message(summary_msg) if summary_msg is not None else 0
        total = plan.fixed + summary_tokens
        for s in slots:
            if s.outcome == "kept" or s.outcome == "compressed":  # s.sent
                total += s.info.rungs[s.rung][2]
        total = self._fit(slots, plan.units, total, budget_total)
        if total > budget_total and summary_msg is not None:
            # The summary was sized to fit beside the L0 tail, so this is only a safety net.
            total -= summary_tokens
            summary_tokens = 0
            plan.summary_msg = None
            for s in slots:
                if s.outcome == "summarized":
                    s.outcome, s.reason = "dropped", "dropped_to_fit"
        if total > budget_total:  # pragma: no cover - the floor check makes this unreachable
            raise ContextOverflowError(f"working set of {total} tokens exceeds budget {budget_total}")
        plan.total, plan.summary_tokens = total, summary_tokens

    def _assemble(self, plan: Plan, turn: int, step: int) -> WorkingSet:
        """Step 6: assemble identity, pins, then the rest in order; one decision per input message
        and per pin, and the report."""
        # A decision made before is taken again only with a plain counter's int counts.
        remember = self.incremental and self.counter.__class__ in _INT_COUNTERS
        messages, decisions, sources, texts = sent_messages_and_decisions(plan, remember=remember)
        # `total` was kept as a running sum of exact, additive counts, so it equals
        # count_messages(messages) (tests check the identity) without recounting here.
        budget_used = plan.total

        report = context_report(
            plan, turn=turn, step=step, window=self.context_window, encoding=self.counter.encoding
        )
        compressed_count = report.messages_compressed
        decision = ContextDecision(
            turn=turn,
            step=step,
            strategy=plan.used,
            budget_total=plan.budget_total,
            budget_used=budget_used,
            budget_tools=plan.tools_tokens,
            budget_reserve=self.budget.reserve,
            messages_in=plan.n,
            messages_out=len(messages),
            compressed_count=compressed_count,
            decisions=tuple(decisions),
            explanation=explanation(plan, report),
            report=report,
        )
        # Pins are never compressed: the input messages' count is the decisions' count.
        decision.__dict__["_compressed_sent"] = plan.outcomes.get("compressed", 0)
        return WorkingSet(
            messages=messages,
            decision=decision,
            prompt_tokens=budget_used + plan.tools_tokens,
            summary_call_made=plan.summary_call_made,
            summary_error=plan.summary_error,
            summary_request=plan.summary_request,
            sources=tuple(sources),
            message_texts=tuple(texts) if texts is not None else None,
        )

    # -- step 1 helpers -----------------------------------------------------------------------
    @staticmethod
    def _turns(history: Sequence[Mapping[str, Any]], k: int, given: Sequence[int] | None) -> list[int]:
        if given is not None:
            if len(given) != len(history):
                raise ConfigError(f"message_turns has {len(given)} entries for {len(history)} messages")
            return list(map(int, given))
        turns = []
        t = 0
        for i, m in enumerate(history):
            if i >= k and m.get("role") == "user":
                t += 1
            turns.append(max(t, 1))
        return turns

    # -- step 4 helpers -----------------------------------------------------------------------
    def _tail_start(self, slots: list[Slot], units: list[list[int]], k: int) -> int:
        n = len(slots)
        start = max(k, n - self.strategy.keep_recent)
        if start < n:
            start = units[slots[start].unit][0]
        return start

    def _aggressive(self, slots: list[Slot], k: int) -> None:
        user_idx = [s.index for s in slots[k:] if s.role == "user"]
        keep = self.strategy.aggressive_keep_turns
        cut = user_idx[-keep] if len(user_idx) >= keep else k
        for s in slots[k:]:
            if s.region == "task":
                continue
            if s.index >= cut:
                s.region, s.reason = "tail", "aggressive_truncate_kept"
            else:
                s.region, s.outcome, s.reason = "middle", "dropped", "aggressive_truncate_drop"

    @staticmethod
    def _relevance(s: Slot, goal: frozenset[str]) -> float:
        """A slot's score before its position term (`_relevance_of`), kept on the message's info for
        the goal and role it was worked out for."""
        kept = s.info.relevance
        if kept is not None and kept[1] is s.role and (kept[0] is goal or kept[0] == goal):
            return kept[2]
        score = WorkingSetBuilder._relevance_of(s, goal)
        s.info.relevance = (goal, s.role, score)
        return score

    @staticmethod
    def _relevance_of(s: Slot, goal: frozenset[str]) -> float:
        """A slot's score before its position term: by role, keywords shared with the goal and alarm
        words."""
        info = s.info
        if info.keywords is None:
            text = scoring_text(info.msg)
            info.alarm = ALARM.search(text) is not None
            info.keywords = keywords_of(text)
        score = BASE_SCORE.get(s.role, 0.0)
        if goal:
            score += min(0.4, 0.1 * len(info.keywords & goal))
        if info.alarm:
            score += 0.3
        return score

    def _grade(self, slots: list[Slot], middle: list[Slot], task_idx: int | None) -> None:
        goal = keywords_of(message_text(slots[task_idx].msg)) if task_idx is not None else frozenset()
        # The goal of the step before when equal, so each kept relevance is found by identity.
        last = self._goal if self.incremental else None
        if last is not None and last == goal:
            goal = last
        else:
            self._goal = goal
        n = max(len(slots) - 1, 1)
        fidelity = self.fidelity
        grade = fidelity.grade
        # Fidelity's own grade, compared inline (a subclass's is called).
        inline = fidelity.__class__.grade is Fidelity.grade
        l0_min, l1_min, l2_min = fidelity.l0_min_score, fidelity.l1_min_score, fidelity.l2_min_score
        # Without `incremental`, every score and rung is worked out again (the reference).
        incremental = self.incremental
        relevance = self._relevance if incremental else self._relevance_of
        for s in middle:
            if s.outcome != "kept":
                continue
            info = s.info
            kept = info.relevance if incremental else None
            if kept is not None and kept[1] is s.role and (kept[0] is goal or kept[0] == goal):
                before = kept[2]
            else:
                before = relevance(s, goal)
            # Newer messages win ties: up to +0.1 by position in the conversation.
            score = before + 0.1 * (s.index / n)
            s.score = score = round(score if score < 1.0 else 1.0, 3)
            if inline:
                target = 0 if score >= l0_min else 1 if score >= l1_min else 2 if score >= l2_min else 3
            else:
                target = _LEVEL_INDEX[grade(score)]
            if target == 0:  # L0: no rung to render; the ladder's first rung is L0
                s.rung = 0
                s.reason = "tail_preserve_middle_kept"
                continue
            rung = info.rung_for.get(target) if incremental else None
            if rung is None:
                rung = info.rung_for[target] = self._rung_for(info, target)
            s.rung = rung
            if rung:
                s.outcome, s.reason = "compressed", "tail_preserve_middle_compressed"
            else:
                s.reason = "tail_preserve_middle_kept"

    def _rung_for(self, info: MessageInfo, target: int) -> int:
        """The ladder's last rung at or above level `target` (index in LEVELS), the ladder extended
        as far as it needs; later extensions only add lower levels, so the answer stays."""
        rungs = info.rungs
        while LEVELS.index(rungs[-1][0]) < target and self._extend(info):
            pass
        rung = 0
        while rung + 1 < len(rungs) and LEVELS.index(rungs[rung + 1][0]) <= target:
            rung += 1
        return rung

    # -- per-message memory and fidelity ladder ----------------------------------------------
    def base_tokens(self, ws: WorkingSet, base: TokenCounter) -> int:
        """`base.count_messages(ws.messages)` for a `ws` this builder built, `base` a plain
        `TokenCounter` (the one a `CalibratedCounter` scales): each input message's count at each
        rung is remembered on its cached info (an L0 message has the fields its info was found
        under, a lower rung is the info's own render), so a step counts only pins and the summary."""
        return self._memory.base_tokens(ws, base, self.incremental)

    def _extend(self, info: MessageInfo) -> bool:
        """Render the next fidelity level that is strictly smaller than the last rung; False when
        there is none (the message cannot shrink further and can only be dropped)."""
        return self._memory.extend(info, self.fidelity, self.counter)

    def _tokens(self, s: Slot) -> int:
        return s.tokens

    # -- step 5 -------------------------------------------------------------------------------
    def _fit(self, slots: list[Slot], units: list[list[int]], total: int, budget: int) -> int:
        if total <= budget:
            return total
        middle = [s for s in slots if s.region == "middle" and s.sent]
        tail = [s for s in slots if s.region == "tail" and s.sent]

        def demote(order: list[Slot], reason: str) -> None:
            nonlocal total
            for s in order:
                rungs = s.info.rungs
                while total > budget and (s.rung + 1 < len(rungs) or self._extend(s.info)):
                    before = self._tokens(s)
                    s.rung += 1
                    total -= before - self._tokens(s)
                    s.outcome, s.reason = "compressed", reason
                if total <= budget:
                    return

        def drop(unit_order: list[list[int]], reason: str) -> None:
            nonlocal total
            for members in unit_order:
                if total <= budget:
                    return
                for i in members:
                    s = slots[i]
                    if s.sent:
                        total -= self._tokens(s)
                        s.outcome, s.reason = "dropped", reason
                        s.rung = 0

        def score(s: Slot) -> float:
            return s.score if s.score is not None else 0.0

        # a. demote middle, least relevant (then oldest) first
        demote(sorted(middle, key=lambda s: (score(s), s.index)), "tail_preserve_middle_compressed")
        # b. drop middle units, least relevant (best member) first
        mid_units = sorted(
            {s.unit for s in middle},
            key=lambda u: (max(score(slots[i]) for i in units[u]), units[u][0]),
        )
        drop(
            [[i for i in units[u] if slots[i].region == "middle"] for u in mid_units],
            "tail_preserve_middle_dropped",
        )
        # c. demote tail, oldest first
        demote(tail, "demoted_to_fit")
        # d. drop tail units, oldest first
        tail_units = sorted({s.unit for s in tail}, key=lambda u: units[u][0])
        drop([[i for i in units[u] if slots[i].region == "tail"] for u in tail_units], "dropped_to_fit")
        return total


def _pause_collector() -> bool:
    """Pause Python's cyclic garbage collector for a build; True when this call paused it (the
    build then runs `gc.enable()` when done), False when it was paused already (left as it is).
    Objects are still freed by reference counting.

    Why: a build makes a few objects per message of the history (its slot, the message's copy, new
    decisions), most freed when the build ends and none in a cycle; with the collector on, a history
    of 1,000 messages set off a collection every 700 of them, each walking the build's live objects
    again (about a tenth of a build's instructions)."""
    if gc.isenabled():
        gc.disable()
        return True
    return False
