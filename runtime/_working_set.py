"""The working-set builder: what the model sees at each step, and why.

Before every LLM call the session hands the whole conversation history to
`WorkingSetBuilder.build()`, which returns the messages to send (`WorkingSet.messages`) and a
`ContextDecision` recording, for every input message, what happened to it.

Layers (DESIGN.md §5):

- **Identity**: the leading `system` message(s) of the history. Never compressed, never dropped.
- **Task**: the *latest* `user` message, i.e. the request the model is answering now. Never
  compressed or dropped; its words are the goal that relevance scoring compares against. (The first
  user message of a long chat is usually stale; the latest one is what the step must answer.)
- **Working**: every other history message (earlier turns, assistant tool calls, tool results),
  plus the pinned blocks and, with `llm_summarize`, the summary message.
- **External**: the tool schemas sent with the request.

Output order: identity messages, then pinned blocks (one `system` message each, in the order given),
then the rest of the history in its original order (the summary, if any, takes the place of the
first message it replaces). So pin block *j* sits at index `len(identity) + j` of
`WorkingSet.messages`, and that is the `index` of its `MessageDecision`.

Guarantees (each is a test):

1. The working set fits: `count_messages(messages) <= context_window - response_reserve -
   count_tools(tools)`, head and tail included; the builder degrades further rather than exceed.
2. Identity, the task message and pins are always sent at L0. If they cannot fit with the tools and
   the reserve, `ContextOverflowError` is raised; nothing is truncated silently.
3. The OpenAI message contract holds at every fidelity: an assistant message with `tool_calls` and
   its tool results are kept or dropped together; roles, `tool_call_id` and `tool_calls` ids are kept.
4. Exactly one `MessageDecision` per input message, in input order (`index` = input position), then
   one per pin block (`index` = its position in the output).
5. Counts are exact tiktoken counts (see `runtime._tokens`), and `ContextReport.utilization` is the one
   utilization figure: prompt tokens really sent (messages + pins + tools) / `context_window`.
"""

from __future__ import annotations

import functools
import json
import re
import threading
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Hashable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from ._tokens import REPLY_PRIMING_TOKENS, TokenCounter, default_counter
from .errors import ConfigError, ContextOverflowError

__all__ = [
    "Budget",
    "ContextDecision",
    "ContextReport",
    "ContextStrategy",
    "Fidelity",
    "MessageDecision",
    "PinBlock",
    "REASONS",
    "SUMMARY_MAX_TOKENS",
    "STRATEGIES",
    "Summarizer",
    "WorkingSet",
    "WorkingSetBuilder",
    "render_pin",
]

StrategyName = Literal["passthrough", "tail_preserve", "llm_summarize", "aggressive_truncate"]
Outcome = Literal["kept", "compressed", "dropped", "summarized"]
Summarizer = Callable[[list[dict[str, Any]]], Awaitable[str]]

STRATEGIES: tuple[str, ...] = ("passthrough", "tail_preserve", "llm_summarize", "aggressive_truncate")
LEVELS: tuple[str, ...] = ("L0", "L1", "L2", "L3")

#: Every `MessageDecision.reason` the builder writes.
REASONS: tuple[str, ...] = (
    "identity",  # leading system message, always L0
    "task",  # the latest user message, always L0
    "pinned",  # a pin block, always L0
    "passthrough",  # everything fits under the passthrough threshold
    "tail_preserve_tail",  # one of the `keep_recent` last messages, kept at L0
    "tail_preserve_middle_kept",  # middle message relevant enough to stay at L0
    "tail_preserve_middle_compressed",  # middle message graded / demoted to L1-L3
    "tail_preserve_middle_dropped",  # middle message (with its tool pair) dropped to fit
    "llm_summarized_into_single",  # replaced by the one summary message
    "aggressive_truncate_kept",  # within the last `aggressive_keep_turns` turns
    "aggressive_truncate_drop",  # before them
    "demoted_to_fit",  # a tail message demoted because head + tail alone did not fit
    "dropped_to_fit",  # a tail message (with its tool pair) dropped for the same reason
)

#: Longest summary the builder asks for; the caller may pass it as `max_tokens` to the provider.
SUMMARY_MAX_TOKENS = 500
# Below this many free tokens a summary is not worth a model call.
_MIN_SUMMARY_TOKENS = 64
_SUMMARY_LINE_CHARS = 1000
_SUMMARY_SYSTEM = "You are a conversation summarizer. Be concise."
# Messages whose count, ladder and keywords a builder remembers between steps.
_INFO_CACHE_SIZE = 32_768


# ---------------------------------------------------------------------------------------------
# Configuration
# ---------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Fidelity:
    """How messages are rendered at each fidelity level, and how relevance grades them.

    - L0: the original message, unchanged.
    - L1: the first `l1_chars` characters of its text (+ "..."); tool-call arguments longer than that
      become `{"_compressed": "<first l1_chars chars>..."}` (still valid JSON).
    - L2: `"[compressed] "` + the first `l2_chars` characters (+ "..."); arguments likewise.
    - L3: a one-line stub, `"[assistant · turn 3] (earlier message, 1,204 tokens)"`; arguments `"{}"`.

    Every level keeps the role, `name`, `tool_call_id`, and each tool call's `id` and function name,
    so a compressed history is still a valid OpenAI request. A level is only used when it is strictly
    smaller than the level above it (a stub can be longer than a short message).

    Initial grade from the relevance score: `>= l0_min_score` L0, `>= l1_min_score` L1,
    `>= l2_min_score` L2, else L3.

    Examples:

        >>> Fidelity()
        Fidelity(l1_chars=300, l2_chars=80, l0_min_score=0.7, l1_min_score=0.4, l2_min_score=0.2)
        >>> Fidelity(l1_chars=500).render({"role": "user", "content": "hi"}, "L3", turn=2, tokens=5)
        {'role': 'user', 'content': '[user · turn 2] (earlier message, 5 tokens)'}
        >>> Fidelity().grade(0.5)
        'L1'
    """

    l1_chars: int = 300
    l2_chars: int = 80
    l0_min_score: float = 0.7
    l1_min_score: float = 0.4
    l2_min_score: float = 0.2

    def __post_init__(self) -> None:
        if self.l1_chars < 1 or self.l2_chars < 1:
            raise ConfigError("Fidelity l1_chars and l2_chars must be at least 1")
        if not self.l0_min_score >= self.l1_min_score >= self.l2_min_score:
            raise ConfigError("Fidelity scores must satisfy l0_min_score >= l1_min_score >= l2_min_score")

    def grade(self, score: float) -> str:
        """The initial fidelity level for a relevance score."""
        if score >= self.l0_min_score:
            return "L0"
        if score >= self.l1_min_score:
            return "L1"
        if score >= self.l2_min_score:
            return "L2"
        return "L3"

    def render(self, msg: Mapping[str, Any], level: str, *, turn: int, tokens: int) -> dict[str, Any]:
        """`msg` at `level`. `turn` and `tokens` (its L0 token count) appear in the L3 stub."""
        if level == "L0":
            return dict(msg)
        role = str(msg.get("role") or "user")
        out: dict[str, Any] = {"role": role}
        if level == "L3":
            what = "earlier tool result" if role == "tool" else "earlier message"
            out["content"] = f"[{role} · turn {turn}] ({what}, {tokens:,} tokens)"
            arg_chars = 0
        else:
            limit = self.l1_chars if level == "L1" else self.l2_chars
            text = _message_text(msg)
            cut = text[:limit] + ("..." if len(text) > limit else "")
            out["content"] = cut if level == "L1" else f"[compressed] {cut}"
            arg_chars = limit
        for key in ("name", "tool_call_id"):
            if key in msg:
                out[key] = msg[key]
        if msg.get("tool_calls"):
            out["tool_calls"] = [_compress_tool_call(tc, arg_chars) for tc in msg["tool_calls"]]
        return out


@dataclass(frozen=True)
class ContextStrategy:
    """Which strategy runs, chosen by the *demand ratio*: the prompt tokens the step would need if
    every message were sent at L0 (history + pins + tools) divided by the context window.

    `demand < passthrough_below` → passthrough (if it also fits the budget; otherwise tail_preserve),
    `< tail_preserve_below` → tail_preserve, `< llm_summarize_below` → llm_summarize, else
    aggressive_truncate. `force` pins one strategy regardless of demand (it is still escalated if
    passthrough would not fit). `keep_recent` messages at the end are the tail (widened to whole tool
    pairs); `aggressive_keep_turns` user turns survive aggressive truncation; `summarize_min_tokens`
    is the least middle size worth a summary call.

    Examples:

        >>> ContextStrategy().select(0.62)
        'tail_preserve'
        >>> ContextStrategy(passthrough_below=0.7).select(0.62)
        'passthrough'
        >>> ContextStrategy(force="aggressive_truncate").select(0.01)
        'aggressive_truncate'
    """

    passthrough_below: float = 0.5
    tail_preserve_below: float = 0.75
    llm_summarize_below: float = 0.9
    keep_recent: int = 6
    aggressive_keep_turns: int = 2
    summarize_min_tokens: int = 2000
    force: StrategyName | None = None

    def __post_init__(self) -> None:
        if not 0 <= self.passthrough_below <= self.tail_preserve_below <= self.llm_summarize_below:
            raise ConfigError(
                "ContextStrategy thresholds must satisfy 0 <= passthrough_below <= tail_preserve_below "
                f"<= llm_summarize_below, got {self.passthrough_below}, {self.tail_preserve_below}, "
                f"{self.llm_summarize_below}"
            )
        if self.keep_recent < 0:
            raise ConfigError(f"keep_recent must be >= 0, got {self.keep_recent}")
        if self.aggressive_keep_turns < 1:
            raise ConfigError(f"aggressive_keep_turns must be >= 1, got {self.aggressive_keep_turns}")
        if self.summarize_min_tokens < 0:
            raise ConfigError(f"summarize_min_tokens must be >= 0, got {self.summarize_min_tokens}")
        if self.force is not None and self.force not in STRATEGIES:
            raise ConfigError(f"unknown strategy {self.force!r}; expected one of {', '.join(STRATEGIES)}")

    def select(self, demand_ratio: float) -> str:
        """The strategy for a demand ratio (before the fit check)."""
        if self.force is not None:
            return self.force
        if demand_ratio < self.passthrough_below:
            return "passthrough"
        if demand_ratio < self.tail_preserve_below:
            return "tail_preserve"
        if demand_ratio < self.llm_summarize_below:
            return "llm_summarize"
        return "aggressive_truncate"


@dataclass(frozen=True)
class Budget:
    """The context window and the tokens kept free for the reply.

    `response_reserve=None` means `min(4096, context_window // 4)`: OpenAI-style models need room
    for the answer, but a small local window should not lose more than a quarter of itself to it.

    Examples:

        >>> Budget(128_000).reserve
        4096
        >>> Budget(8000).reserve
        2000
        >>> Budget(8000, response_reserve=500).for_messages(tools_tokens=300)
        7200
    """

    context_window: int
    response_reserve: int | None = None

    def __post_init__(self) -> None:
        if self.context_window < 1:
            raise ConfigError(f"context_window must be positive, got {self.context_window}")
        if self.response_reserve is not None and not 0 <= self.response_reserve < self.context_window:
            raise ConfigError(
                f"response_reserve must be in [0, context_window), got {self.response_reserve} "
                f"for a window of {self.context_window}"
            )

    @property
    def reserve(self) -> int:
        if self.response_reserve is not None:
            return self.response_reserve
        return min(4096, self.context_window // 4)

    def for_messages(self, tools_tokens: int) -> int:
        """Tokens all messages of a request (pins and reply priming included) may use."""
        return self.context_window - self.reserve - tools_tokens


# ---------------------------------------------------------------------------------------------
# Pins
# ---------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class PinBlock:
    """An active pin as the builder renders it. `pin_id` is `p_` + 8 hex."""

    pin_id: str
    label: str | None
    content: str


def render_pin(pin: PinBlock) -> dict[str, Any]:
    """The system message a pin is sent as, showing its id (so the model can `unpin` it) and label.

    >>> render_pin(PinBlock("p_a1b2c3d4", "key facts", "Budget is 40k."))
    {'role': 'system', 'content': '[pinned p_a1b2c3d4 · key facts]\\nBudget is 40k.'}
    >>> render_pin(PinBlock("p_a1b2c3d4", None, "x"))["content"]
    '[pinned p_a1b2c3d4]\\nx'
    """
    header = f"[pinned {pin.pin_id} · {pin.label}]" if pin.label else f"[pinned {pin.pin_id}]"
    return {"role": "system", "content": f"{header}\n{pin.content}"}


# ---------------------------------------------------------------------------------------------
# Decisions and report
# ---------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class MessageDecision:
    """What the builder did with one input message (or one pin block)."""

    index: int
    role: str
    outcome: Outcome
    fidelity: str | None
    relevance_score: float | None
    token_count_before: int
    token_count_after: int
    reason: str
    pinned: bool = False
    pin_id: str | None = None

    def to_dict(self) -> dict[str, Any]:
        """The trace shape; `pinned` / `pin_id` only appear on pin blocks (as docs/trace-format.md)."""
        d: dict[str, Any] = {
            "index": self.index,
            "role": self.role,
            "outcome": self.outcome,
            "fidelity": self.fidelity,
            "relevance_score": self.relevance_score,
            "token_count_before": self.token_count_before,
            "token_count_after": self.token_count_after,
            "reason": self.reason,
        }
        if self.pinned:
            d["pinned"] = True
            d["pin_id"] = self.pin_id
        return d

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> MessageDecision:
        return cls(
            index=int(d["index"]),
            role=str(d["role"]),
            outcome=d["outcome"],
            fidelity=d.get("fidelity"),
            relevance_score=d.get("relevance_score"),
            token_count_before=int(d.get("token_count_before") or 0),
            token_count_after=int(d.get("token_count_after") or 0),
            reason=str(d.get("reason") or ""),
            pinned=bool(d.get("pinned", False)),
            pin_id=d.get("pin_id"),
        )


@dataclass(frozen=True)
class ContextReport:
    """Budget figures of one step. `utilization` is the one utilization figure: `total_tokens /
    window_size`, where `total_tokens` = tokens of the messages really sent (pins, summary and reply
    priming included) + tool schemas. `demand_ratio` is what strategy selection used: the same
    figure had every message been sent at L0. `tokens_by_layer` sums to `total_tokens` (reply
    priming is counted in `working`). Keys shared with Arcana's ContextReport keep Arcana's names."""

    turn: int
    step: int
    strategy_used: str
    strategy_requested: str
    strategy_note: str | None
    window_size: int
    budget: int
    total_tokens: int
    utilization: float
    demand_tokens: int
    demand_ratio: float
    identity_tokens: int
    task_tokens: int
    tools_tokens: int
    pin_tokens: int
    history_tokens: int
    summary_tokens: int
    compression_applied: bool
    compression_savings: int
    messages_compressed: int
    fidelity_distribution: dict[str, int]
    tokens_by_layer: dict[str, int]
    encoding: str
    tools_loaded: int
    pinned_count: int

    def to_dict(self) -> dict[str, Any]:
        return {
            "turn": self.turn,
            "step": self.step,
            "strategy_used": self.strategy_used,
            "strategy_requested": self.strategy_requested,
            "strategy_note": self.strategy_note,
            "total_tokens": self.total_tokens,
            "identity_tokens": self.identity_tokens,
            "task_tokens": self.task_tokens,
            "tools_tokens": self.tools_tokens,
            "history_tokens": self.history_tokens,
            "memory_tokens": 0,
            "pin_tokens": self.pin_tokens,
            "summary_tokens": self.summary_tokens,
            "compression_applied": self.compression_applied,
            "compression_savings": self.compression_savings,
            "messages_compressed": self.messages_compressed,
            "window_size": self.window_size,
            "budget": self.budget,
            "utilization": self.utilization,
            "demand_tokens": self.demand_tokens,
            "demand_ratio": self.demand_ratio,
            "tool_results_pruned": 0,
            "tool_results_tokens_saved": 0,
            "fidelity_distribution": dict(self.fidelity_distribution),
            "tokens_by_layer": dict(self.tokens_by_layer),
            "encoding": self.encoding,
            "tools_loaded": self.tools_loaded,
            "tools_available": self.tools_loaded,
            "skills_loaded": 0,
            "skills_available": 0,
            "skills_tokens": 0,
            "pinned_count": self.pinned_count,
        }


@dataclass(frozen=True)
class ContextDecision:
    """The builder's record of one step. `budget_total` = window − reserve − tools (what all messages,
    pins included, may use); `budget_used` = tokens of the messages sent (pins, summary, reply priming
    included), always `<= budget_total`. `compressed_count` = input messages not sent at L0
    (compressed, summarized or dropped)."""

    turn: int
    step: int
    strategy: str
    budget_total: int
    budget_used: int
    budget_tools: int
    budget_reserve: int
    messages_in: int
    messages_out: int
    compressed_count: int
    decisions: tuple[MessageDecision, ...]
    explanation: str
    report: ContextReport

    @property
    def history_compressed(self) -> bool:
        return self.compressed_count > 0

    def to_dict(self) -> dict[str, Any]:
        """`metadata.context_decision` of a `context_decision` trace event (docs/trace-format.md)."""
        return {
            "turn": self.turn,
            "step": self.step,
            "strategy": self.strategy,
            "budget_total": self.budget_total,
            "budget_used": self.budget_used,
            "budget_tools": self.budget_tools,
            "budget_reserve": self.budget_reserve,
            "messages_in": self.messages_in,
            "messages_out": self.messages_out,
            "compressed_count": self.compressed_count,
            "memory_injected": False,
            "history_compressed": self.history_compressed,
            "decisions": [d.to_dict() for d in self.decisions],
            "skill_selections": [],
            "compressed_messages": [],
            "explanation": self.explanation,
        }

    def to_metadata(self) -> dict[str, Any]:
        """The whole `metadata` of a `context_decision` event except `producer`, `turn`, `step` and
        `source_agent`, which the session adds: the decision, Arcana's top-level back-compat copies
        and `context_report`."""
        return {
            "context_decision": self.to_dict(),
            "explanation": self.explanation,
            "compressed_count": self.compressed_count,
            "messages_in": self.messages_in,
            "messages_out": self.messages_out,
            "context_report": self.report.to_dict(),
        }


@dataclass(frozen=True)
class WorkingSet:
    """The result of one build. `messages` go to the provider as they are, with `tools`.
    `prompt_tokens` = `count_messages(messages) + count_tools(tools)` (exact).
    `summary_call_made` is true when `summarize` was awaited (even if it failed);
    `summary_error` then says why it failed, and `summary_request` is what it was given."""

    messages: list[dict[str, Any]]
    decision: ContextDecision
    prompt_tokens: int
    summary_call_made: bool = False
    summary_error: str | None = None
    summary_request: list[dict[str, Any]] | None = None

    @property
    def report(self) -> ContextReport:
        return self.decision.report


# ---------------------------------------------------------------------------------------------
# Helpers
# ---------------------------------------------------------------------------------------------
def _message_text(msg: Mapping[str, Any]) -> str:
    content = msg.get("content")
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = []
        for part in content:
            if isinstance(part, Mapping) and part.get("type") == "text":
                parts.append(str(part.get("text") or ""))
            elif isinstance(part, str):
                parts.append(part)
        return "\n".join(parts)
    return str(content)


def _compress_tool_call(tc: Any, arg_chars: int) -> Any:
    """A tool call with its id and function name kept and its arguments shortened to valid JSON."""
    if not isinstance(tc, Mapping):
        return tc
    out = dict(tc)
    fn = tc.get("function")
    if isinstance(fn, Mapping):
        fn2 = dict(fn)
        args = fn.get("arguments")
        args = args if isinstance(args, str) else json.dumps(args or {})
        if arg_chars == 0:
            fn2["arguments"] = "{}"
        elif len(args) > arg_chars:
            fn2["arguments"] = json.dumps({"_compressed": args[:arg_chars] + "..."}, ensure_ascii=False)
        out["function"] = fn2
    return out


_WORD = re.compile(r"[a-zA-Z_]\w{2,}")
_ALARM = re.compile(r"error|failed|recovery|exception", re.IGNORECASE)
_BASE_SCORE = {"tool": 0.5, "assistant": 0.3, "user": 0.2}


# Words too common to say two messages are about the same thing.
_STOPWORDS = frozenset(
    "the and for you are was were with that this have has had not but all any can from they them their "
    "there what when where which who will would should could about into than then also just like some "
    "our your its his her she him how why yes please thanks thank been being does did done".split()
)


@functools.lru_cache(maxsize=32_768)
def _keywords(text: str) -> frozenset[str]:
    return frozenset(_WORD.findall(text.lower())) - _STOPWORDS


def _scoring_text(msg: Mapping[str, Any]) -> str:
    text = _message_text(msg)
    calls = msg.get("tool_calls")
    if calls:
        bits = [text]
        for tc in calls:
            fn = tc.get("function") if isinstance(tc, Mapping) else None
            if isinstance(fn, Mapping):
                bits.append(f"{fn.get('name') or ''} {fn.get('arguments') or ''}")
        text = " ".join(bits)
    return text


Rung = tuple[str, dict[str, Any] | None, int]


class _MessageInfo:
    """What the builder knows about one message that does not change from step to step: its L0
    count, its fidelity ladder (levels rendered so far, strictly decreasing in tokens; extended
    lazily, only as far as grading and demotion need) and its scoring keywords. Cached by the
    builder, so a steady-state step neither re-renders nor re-counts old messages."""

    __slots__ = ("msg", "turn", "rungs", "probe", "keywords", "alarm")

    def __init__(self, msg: Mapping[str, Any], turn: int, l0: int) -> None:
        self.msg = msg
        self.turn = turn
        self.rungs: list[Rung] = [("L0", None, l0)]
        self.probe = 1  # index in LEVELS of the next level to try
        self.keywords: frozenset[str] | None = None
        self.alarm = False


class _Slot:
    """Builder-internal state of one input message in one build."""

    __slots__ = (
        "index",
        "msg",
        "role",
        "turn",
        "l0",
        "info",
        "region",
        "unit",
        "score",
        "rung",
        "outcome",
        "reason",
    )

    def __init__(self, index: int, msg: Mapping[str, Any], info: _MessageInfo) -> None:
        self.index = index
        self.msg = msg
        self.role = str(msg.get("role") or "")
        self.turn = info.turn
        self.l0 = info.rungs[0][2]
        self.info = info
        self.region = "middle"
        self.unit = -1
        self.score: float | None = None
        self.rung = 0  # position in info.rungs currently used
        self.outcome: Outcome = "kept"
        self.reason = ""

    @property
    def level(self) -> str:
        return self.info.rungs[self.rung][0]

    @property
    def sent(self) -> bool:
        return self.outcome in ("kept", "compressed")


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
        self._infos: OrderedDict[Hashable, _MessageInfo] = OrderedDict()
        self._lock = threading.Lock()

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
        counter = self.counter
        n = len(history)
        tools_list = list(tools or ())

        # 1. Layers and units.
        k = 0
        while k < n and history[k].get("role") == "system":
            k += 1
        task_idx: int | None = None
        for i in range(n - 1, k - 1, -1):
            if history[i].get("role") == "user":
                task_idx = i
                break
        turns = self._turns(history, k, message_turns)
        slots = [_Slot(i, m, self._info(m, turns[i])) for i, m in enumerate(history)]
        units = _units(history, k)
        for u, members in enumerate(units):
            for i in members:
                slots[i].unit = u
        for i in range(k):
            slots[i].region = "identity"
        if task_idx is not None:
            slots[task_idx].region = "task"

        # 2. Counts and the floor.
        tools_tokens = counter.count_tools(tools_list)
        reserve = self.budget.reserve
        budget_total = self.budget.for_messages(tools_tokens)
        pin_msgs = [render_pin(p) for p in pins]
        pin_counts = [counter.count_message(m) for m in pin_msgs]
        pin_tokens = sum(pin_counts)
        identity_tokens = sum(s.l0 for s in slots[:k])
        task_tokens = slots[task_idx].l0 if task_idx is not None else 0
        floor = identity_tokens + task_tokens + pin_tokens + REPLY_PRIMING_TOKENS
        if floor > budget_total:
            raise ContextOverflowError(
                f"the minimum working set does not fit a context window of {self.context_window} tokens: "
                f"identity {identity_tokens} + latest user message {task_tokens} + pins {pin_tokens} "
                f"+ reply priming {REPLY_PRIMING_TOKENS} + tool schemas {tools_tokens} "
                f"+ response reserve {reserve} = {floor + tools_tokens + reserve} tokens. "
                "Shorten the message, unpin content, send fewer tools or raise context_window."
            )

        # 3. Strategy selection.
        history_l0 = sum(s.l0 for s in slots)
        demand = history_l0 + REPLY_PRIMING_TOKENS + pin_tokens + tools_tokens
        demand_ratio = demand / self.context_window
        requested = self.strategy.select(demand_ratio)
        fits_at_l0 = history_l0 + REPLY_PRIMING_TOKENS + pin_tokens <= budget_total
        used = requested
        note: str | None = None
        if requested == "passthrough" and not fits_at_l0:
            used = "tail_preserve"
            note = "passthrough requested but the history does not fit at L0; used tail_preserve"

        # 4. Apply the strategy. `fixed` = tokens of everything sent besides the input messages.
        fixed = pin_tokens + REPLY_PRIMING_TOKENS
        summary_msg: dict[str, Any] | None = None
        summary_call_made = False
        summary_error: str | None = None
        summary_request: list[dict[str, Any]] | None = None

        if used == "passthrough":
            for s in slots[k:]:
                if s.region != "task":
                    s.reason = "passthrough"
        elif used == "aggressive_truncate":
            self._aggressive(slots, k)
        else:
            tail_start = self._tail_start(slots, units, k)
            for s in slots[k:]:
                if s.region == "middle" and s.index >= tail_start:
                    s.region = "tail"
            middle = [s for s in slots if s.region == "middle"]
            if used == "llm_summarize":
                outcome = await self._try_summarize(slots, middle, budget_total, fixed, summarize)
                summary_msg, summary_call_made, summary_error, summary_request, fail_note = outcome
                if summary_msg is None:
                    used = "tail_preserve"
                    note = f"llm_summarize requested but {fail_note}; used tail_preserve"
            if used == "tail_preserve":
                self._grade(slots, middle, task_idx)
            for s in slots:
                if s.region == "tail":
                    s.reason = "tail_preserve_tail"

        for s in slots[:k]:
            s.reason = "identity"
        if task_idx is not None:
            slots[task_idx].reason = "task"

        # 5. Fit.
        summary_tokens = counter.count_message(summary_msg) if summary_msg is not None else 0
        total = fixed + summary_tokens + sum(self._tokens(s) for s in slots if s.sent)
        total = self._fit(slots, units, total, budget_total)
        if total > budget_total and summary_msg is not None:
            # The summary was sized to fit beside the L0 tail, so this is only a safety net.
            total -= summary_tokens
            summary_tokens = 0
            summary_msg = None
            for s in slots:
                if s.outcome == "summarized":
                    s.outcome, s.reason = "dropped", "dropped_to_fit"
        if total > budget_total:  # pragma: no cover - the floor check makes this unreachable
            raise ContextOverflowError(f"working set of {total} tokens exceeds budget {budget_total}")

        # 6. Assemble and report.
        messages: list[dict[str, Any]] = [dict(s.msg) for s in slots[:k]]
        messages.extend(pin_msgs)
        placed_summary = False
        for s in slots[k:]:
            if s.outcome == "summarized" and not placed_summary and summary_msg is not None:
                messages.append(summary_msg)
                placed_summary = True
            if s.sent:
                messages.append(self._rendered(s))

        # `total` was kept as a running sum of exact, additive counts, so it equals
        # count_messages(messages) (tests check the identity) without recounting here.
        budget_used = total
        decisions = [self._decision(s) for s in slots]
        for j, p in enumerate(pins):
            decisions.append(
                MessageDecision(
                    index=k + j,
                    role="system",
                    outcome="kept",
                    fidelity="L0",
                    relevance_score=None,
                    token_count_before=pin_counts[j],
                    token_count_after=pin_counts[j],
                    reason="pinned",
                    pinned=True,
                    pin_id=p.pin_id,
                )
            )

        report = self._report(
            slots=slots,
            k=k,
            task_idx=task_idx,
            turn=turn,
            step=step,
            used=used,
            requested=requested,
            note=note,
            budget_total=budget_total,
            budget_used=budget_used,
            tools_tokens=tools_tokens,
            tools_count=len(tools_list),
            pin_tokens=pin_tokens,
            pin_count=len(pin_msgs),
            summary_tokens=summary_tokens,
            demand=demand,
            demand_ratio=demand_ratio,
        )
        compressed_count = sum(1 for s in slots if s.outcome != "kept")
        decision = ContextDecision(
            turn=turn,
            step=step,
            strategy=used,
            budget_total=budget_total,
            budget_used=budget_used,
            budget_tools=tools_tokens,
            budget_reserve=reserve,
            messages_in=n,
            messages_out=len(messages),
            compressed_count=compressed_count,
            decisions=tuple(decisions),
            explanation=self._explain(slots, used, note, budget_used, budget_total, report, len(pin_msgs)),
            report=report,
        )
        return WorkingSet(
            messages=messages,
            decision=decision,
            prompt_tokens=budget_used + tools_tokens,
            summary_call_made=summary_call_made,
            summary_error=summary_error,
            summary_request=summary_request,
        )

    # -- step 1 helpers -----------------------------------------------------------------------
    @staticmethod
    def _turns(history: Sequence[Mapping[str, Any]], k: int, given: Sequence[int] | None) -> list[int]:
        if given is not None:
            if len(given) != len(history):
                raise ConfigError(f"message_turns has {len(given)} entries for {len(history)} messages")
            return [int(t) for t in given]
        turns = []
        t = 0
        for i, m in enumerate(history):
            if i >= k and m.get("role") == "user":
                t += 1
            turns.append(max(t, 1))
        return turns

    # -- step 4 helpers -----------------------------------------------------------------------
    def _tail_start(self, slots: list[_Slot], units: list[list[int]], k: int) -> int:
        n = len(slots)
        start = max(k, n - self.strategy.keep_recent)
        if start < n:
            start = units[slots[start].unit][0]
        return start

    def _aggressive(self, slots: list[_Slot], k: int) -> None:
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

    def _score(self, s: _Slot, goal: frozenset[str], position: float) -> float:
        info = s.info
        if info.keywords is None:
            text = _scoring_text(info.msg)
            info.alarm = _ALARM.search(text) is not None
            info.keywords = _keywords(text)
        score = _BASE_SCORE.get(s.role, 0.0)
        if goal:
            score += min(0.4, 0.1 * len(info.keywords & goal))
        if info.alarm:
            score += 0.3
        # Newer messages win ties: up to +0.1 by position in the conversation.
        score += 0.1 * position
        return round(min(score, 1.0), 3)

    def _grade(self, slots: list[_Slot], middle: list[_Slot], task_idx: int | None) -> None:
        goal = _keywords(_message_text(slots[task_idx].msg)) if task_idx is not None else frozenset()
        n = max(len(slots) - 1, 1)
        for s in middle:
            if s.outcome != "kept":
                continue
            s.score = self._score(s, goal, s.index / n)
            target = LEVELS.index(self.fidelity.grade(s.score))
            rungs = s.info.rungs
            while LEVELS.index(rungs[-1][0]) < target and self._extend(s.info):
                pass
            rung = 0
            while rung + 1 < len(rungs) and LEVELS.index(rungs[rung + 1][0]) <= target:
                rung += 1
            s.rung = rung
            if rung:
                s.outcome, s.reason = "compressed", "tail_preserve_middle_compressed"
            else:
                s.reason = "tail_preserve_middle_kept"

    async def _try_summarize(
        self,
        slots: list[_Slot],
        middle: list[_Slot],
        budget_total: int,
        fixed: int,
        summarize: Summarizer | None,
    ) -> tuple[dict[str, Any] | None, bool, str | None, list[dict[str, Any]] | None, str]:
        """One summary call replacing the middle. Returns (summary message or None, call made,
        error, request, why-not note)."""
        middle_tokens = sum(s.l0 for s in middle)
        if summarize is None:
            return None, False, None, None, "no summarizer is available"
        if not middle:
            return None, False, None, None, "there is no middle to summarize"
        if middle_tokens < self.strategy.summarize_min_tokens:
            return (
                None,
                False,
                None,
                None,
                f"the middle holds only {middle_tokens} tokens (< summarize_min_tokens "
                f"{self.strategy.summarize_min_tokens})",
            )
        rest = fixed + sum(s.l0 for s in slots if s.region != "middle")
        header = self._summary_header(middle)
        header_tokens = self.counter.count_message({"role": "system", "content": header + "\n"})
        room = budget_total - rest - header_tokens
        if room < _MIN_SUMMARY_TOKENS:
            return None, False, None, None, f"only {max(room, 0)} tokens are free for a summary"
        want = min(room, SUMMARY_MAX_TOKENS)
        request = self._summary_request(slots, middle, want)
        try:
            text = await summarize(request)
        except Exception as exc:  # any provider failure: fall back, and say so truthfully
            err = f"{type(exc).__name__}: {exc}"
            return None, True, err, request, f"the summary call failed ({err})"
        if not isinstance(text, str) or not text.strip():
            err = "empty summary"
            return None, True, err, request, "the summary call returned no text"
        # Trim an over-long reply at a token boundary until the message fits the room it was given.
        limit = room + header_tokens
        body = text.strip()
        msg = {"role": "system", "content": f"{header}\n{body}"}
        while (excess := self.counter.count_message(msg) - limit) > 0 and body:
            body = self.counter.truncate_text(body, self.counter.count_text(body) - excess)
            msg = {"role": "system", "content": f"{header}\n{body}"}
        for s in middle:
            s.outcome, s.reason = "summarized", "llm_summarized_into_single"
        return msg, True, None, request, ""

    @staticmethod
    def _summary_header(middle: list[_Slot]) -> str:
        first, last = middle[0].turn, middle[-1].turn
        span = f"turn {first}" if first == last else f"turns {first}–{last}"
        return f"[Earlier conversation — summary of {len(middle)} messages, {span}]"

    @staticmethod
    def _summary_request(slots: list[_Slot], middle: list[_Slot], want: int) -> list[dict[str, Any]]:
        goal = next((_message_text(s.msg) for s in slots if s.region == "task"), "")
        lines = []
        for s in middle:
            text = _scoring_text(s.msg)
            if len(text) > _SUMMARY_LINE_CHARS:
                text = text[:_SUMMARY_LINE_CHARS] + "..."
            lines.append(f"[{s.role} · turn {s.turn}] {text}")
        prompt = (
            f"Summarize this earlier part of a conversation in at most {want} tokens "
            f"(about {want * 3} characters). Keep facts, numbers, names, identifiers, decisions and "
            "open questions; drop pleasantries.\n"
            f"Current request: {goal}\n\n" + "\n".join(lines)
        )
        return [{"role": "system", "content": _SUMMARY_SYSTEM}, {"role": "user", "content": prompt}]

    # -- per-message cache and fidelity ladder ------------------------------------------------
    def _info(self, msg: Mapping[str, Any], turn: int) -> _MessageInfo:
        key = self.counter.message_key(msg)
        calls = msg.get("tool_calls")
        # Tool-call ids are not counted (so not in the counter's key) but renders carry them.
        ids = tuple(tc.get("id") for tc in calls if isinstance(tc, Mapping)) if calls else None
        ikey = (key, turn, ids)
        with self._lock:
            info = self._infos.get(ikey)
            if info is not None:
                self._infos.move_to_end(ikey)
                return info
        # A shallow snapshot: a caller mutating its dict later must not change cached renders.
        info = _MessageInfo(dict(msg), turn, self.counter.count_message(msg, key=key))
        with self._lock:
            self._infos[ikey] = info
            if len(self._infos) > _INFO_CACHE_SIZE:
                self._infos.popitem(last=False)
        return info

    def _extend(self, info: _MessageInfo) -> bool:
        """Render the next fidelity level that is strictly smaller than the last rung; False when
        there is none (the message cannot shrink further and can only be dropped)."""
        with self._lock:
            while info.probe < len(LEVELS):
                level = LEVELS[info.probe]
                info.probe += 1
                rendered = self.fidelity.render(info.msg, level, turn=info.turn, tokens=info.rungs[0][2])
                tokens = self.counter.count_message(rendered)
                if tokens < info.rungs[-1][2]:
                    info.rungs.append((level, rendered, tokens))
                    return True
            return False

    def _tokens(self, s: _Slot) -> int:
        return s.info.rungs[s.rung][2]

    def _rendered(self, s: _Slot) -> dict[str, Any]:
        rendered = s.info.rungs[s.rung][1]
        # L0 sends this step's own message; lower levels a copy of the cached render.
        return dict(s.msg) if rendered is None else dict(rendered)

    # -- step 5 -------------------------------------------------------------------------------
    def _fit(self, slots: list[_Slot], units: list[list[int]], total: int, budget: int) -> int:
        if total <= budget:
            return total
        middle = [s for s in slots if s.region == "middle" and s.sent]
        tail = [s for s in slots if s.region == "tail" and s.sent]

        def demote(order: list[_Slot], reason: str) -> None:
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

        def score(s: _Slot) -> float:
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

    # -- step 6 -------------------------------------------------------------------------------
    def _decision(self, s: _Slot) -> MessageDecision:
        sent = s.sent
        level = s.level if sent else None
        return MessageDecision(
            index=s.index,
            role=s.role,
            outcome=s.outcome,
            fidelity=level,
            relevance_score=s.score,
            token_count_before=s.l0,
            token_count_after=self._tokens(s) if sent else 0,
            reason=s.reason,
        )

    def _report(
        self,
        *,
        slots: list[_Slot],
        k: int,
        task_idx: int | None,
        turn: int,
        step: int,
        used: str,
        requested: str,
        note: str | None,
        budget_total: int,
        budget_used: int,
        tools_tokens: int,
        tools_count: int,
        pin_tokens: int,
        pin_count: int,
        summary_tokens: int,
        demand: int,
        demand_ratio: float,
    ) -> ContextReport:
        identity = sum(s.l0 for s in slots[:k])
        task = slots[task_idx].l0 if task_idx is not None else 0
        working = budget_used - identity - task
        total = budget_used + tools_tokens
        dist = {lvl: 0 for lvl in LEVELS}
        dist["L0"] += pin_count
        sent_input = 0
        for s in slots:
            if s.sent:
                dist[s.level] += 1
                sent_input += self._tokens(s)
        l0_total = sum(s.l0 for s in slots)
        return ContextReport(
            turn=turn,
            step=step,
            strategy_used=used,
            strategy_requested=requested,
            strategy_note=note,
            window_size=self.context_window,
            budget=budget_total,
            total_tokens=total,
            utilization=round(total / self.context_window, 6),
            demand_tokens=demand,
            demand_ratio=round(demand_ratio, 6),
            identity_tokens=identity,
            task_tokens=task,
            tools_tokens=tools_tokens,
            pin_tokens=pin_tokens,
            history_tokens=sent_input - identity + summary_tokens,
            summary_tokens=summary_tokens,
            compression_applied=any(s.outcome != "kept" for s in slots),
            compression_savings=l0_total - sent_input - summary_tokens,
            messages_compressed=sum(1 for s in slots if s.outcome != "kept"),
            fidelity_distribution=dist,
            tokens_by_layer={
                "identity": identity,
                "task": task,
                "working": working,
                "external": tools_tokens,
            },
            encoding=self.counter.encoding,
            tools_loaded=tools_count,
            pinned_count=pin_count,
        )

    @staticmethod
    def _explain(
        slots: list[_Slot],
        used: str,
        note: str | None,
        budget_used: int,
        budget_total: int,
        report: ContextReport,
        pin_count: int,
    ) -> str:
        pct = round(report.utilization * 100)
        figures = f"budget {budget_used}/{budget_total} tokens ({pct}% of the window)"
        compressed = sum(1 for s in slots if s.outcome == "compressed")
        dropped = sum(1 for s in slots if s.outcome == "dropped")
        summarized = sum(1 for s in slots if s.outcome == "summarized")
        if used == "passthrough":
            text = f"Under budget, all {len(slots)} messages kept; {figures}"
        elif used == "aggressive_truncate":
            kept = sum(1 for s in slots if s.sent)
            text = f"Aggressive truncate: kept identity + last turns ({kept} messages), {dropped} dropped"
            if compressed:
                text += f", {compressed} compressed"
            text += f"; {figures}"
        elif used == "llm_summarize":
            text = f"{summarized} messages LLM-summarized into 1 ({report.summary_tokens} tokens)"
            if compressed or dropped:
                text += f", {compressed} compressed, {dropped} dropped"
            text += f"; {figures}"
        else:
            squeezed = [s for s in slots if s.outcome == "compressed"]
            before = sum(s.l0 for s in squeezed)
            after = sum(s.info.rungs[s.rung][2] for s in squeezed)
            ratio = before / after if after else 1.0
            text = f"{compressed} messages fidelity-compressed ({ratio:.1f}x), {dropped} dropped; {figures}"
        if pin_count:
            text += f"; {pin_count} pinned block{'s' if pin_count != 1 else ''} ({report.pin_tokens} tokens)"
        if note:
            text = f"{note}. {text}"
        return text


def _units(history: Sequence[Mapping[str, Any]], start: int) -> list[list[int]]:
    """Partition `history[start:]` into units: an assistant message with `tool_calls` together with
    the tool messages right after it that answer those calls; every other message alone. Units
    before `start` (identity) are singletons."""
    units: list[list[int]] = [[i] for i in range(start)]
    n = len(history)
    i = start
    while i < n:
        m = history[i]
        calls = m.get("tool_calls") if m.get("role") == "assistant" else None
        if calls:
            ids = {tc.get("id") for tc in calls if isinstance(tc, Mapping)}
            j = i + 1
            while j < n and history[j].get("role") == "tool" and history[j].get("tool_call_id") in ids:
                j += 1
            units.append(list(range(i, j)))
            i = j
        else:
            units.append([i])
            i += 1
    return units
