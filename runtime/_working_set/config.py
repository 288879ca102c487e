"""The working set's configuration: fidelity levels and how a message is rendered at each
(`Fidelity`), the strategies and their selection (`ContextStrategy`), and the budget."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

from ..errors import ConfigError

StrategyName = Literal["passthrough", "tail_preserve", "llm_summarize", "aggressive_truncate"]

STRATEGIES: tuple[str, ...] = ("passthrough", "tail_preserve", "llm_summarize", "aggressive_truncate")
LEVELS: tuple[str, ...] = ("L0", "L1", "L2", "L3")


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
            text = message_text(msg)
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
# Helpers
# ---------------------------------------------------------------------------------------------
def message_text(msg: Mapping[str, Any]) -> str:
    """The text of a message: its content string, or the text parts of a content list."""
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
