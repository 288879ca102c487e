"""`RuntimeConfig`: every knob of a `Runtime`, validated at construction.

    >>> RuntimeConfig()                                              # 128k window, traces in ./arcana-traces
    >>> RuntimeConfig(context_window=8000, trace_dir=None)           # small window, no trace files
    >>> RuntimeConfig(cognitive_primitives=["recall", "pin"], pin_budget_fraction=0.25)

Invalid values raise `ConfigError` when the config is built, never later in a conversation.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any

from ._working_set import ContextStrategy
from .errors import ConfigError

#: Names accepted in `cognitive_primitives`. "pin" also exposes its companion "unpin".
ACCEPTED_PRIMITIVES: tuple[str, ...] = ("recall", "pin")

#: The tools each accepted name exposes to the model, in the order their schemas are sent.
PRIMITIVE_TOOLS: dict[str, tuple[str, ...]] = {"recall": ("recall",), "pin": ("pin", "unpin")}

#: Every tool name the runtime may intercept as a primitive.
ALL_PRIMITIVE_TOOL_NAMES: frozenset[str] = frozenset({"recall", "pin", "unpin"})

DEFAULT_RESPONSE_RESERVE = 4096


def normalize_primitives(
    names: Sequence[str] | None, *, where: str = "cognitive_primitives"
) -> tuple[str, ...]:
    """Validate a list of primitive names and return it deduplicated, in accepted order.

    Raises `ConfigError` naming the accepted values for anything else (including "unpin", which is
    enabled through "pin", and a bare string passed instead of a list)."""
    if names is None:
        return ()
    if isinstance(names, str | bytes):
        raise ConfigError(
            f"{where} must be a list of names such as ['recall', 'pin'], not the string {names!r}"
        )
    seen: set[str] = set()
    for name in names:
        if name not in ACCEPTED_PRIMITIVES:
            hint = " ('unpin' is enabled together with 'pin')" if name == "unpin" else ""
            raise ConfigError(
                f"unknown cognitive primitive {name!r} in {where}{hint}; accepted: "
                + ", ".join(repr(n) for n in ACCEPTED_PRIMITIVES)
                + " ('pin' also exposes 'unpin')"
            )
        seen.add(name)
    return tuple(n for n in ACCEPTED_PRIMITIVES if n in seen)


def pin_cap(context_window: int, pin_budget_fraction: float) -> int:
    """The hard pin budget `int(context_window * pin_budget_fraction)`, computed on the decimal value
    the fraction was written as: in binary floating point 10_000 * 0.57 is 5699.999..., which would
    make the cap one token smaller than the configuration says."""
    return int(context_window * Fraction(repr(float(pin_budget_fraction))))


def primitive_tool_names(enabled: Sequence[str]) -> tuple[str, ...]:
    """The tool names the model sees for these enabled primitives: ("recall", "pin", "unpin")."""
    out: list[str] = []
    for name in ACCEPTED_PRIMITIVES:
        if name in enabled:
            out.extend(PRIMITIVE_TOOLS[name])
    return tuple(out)


@dataclass(frozen=True)
class RuntimeConfig:
    """How a `Runtime` builds working sets, runs turns and writes traces.

    * `context_window` — tokens the model accepts (prompt + answer). Default 128,000.
    * `response_reserve` — tokens kept free for the answer. Default `min(4096, context_window // 4)`.
    * `context_strategy` — the builder's `ContextStrategy` (thresholds, tail size, ...).
    * `trace_dir` — where `JsonlFileSink` writes `<trace_dir>/<run_id>.jsonl`. Default "./arcana-traces";
      `None` writes no files.
    * `trace` — write traces at all. Default `None` means: `True` when `trace_dir` is set, else
      `False` (see `trace_enabled`). Sinks passed to `Runtime(trace_sinks=...)` replace the file sink
      and are used whenever `trace` is not explicitly `False`.
    * `trace_include_prompt_snapshots` — also write the exact messages and tools sent at every step.
    * `max_steps_per_turn` — LLM calls one `send()` may make before it stops with outcome "max_steps".
    * `default_provider` / `default_model` — used when `chat()` / `pool.add()` name none
      (default: the first configured provider and its own model).
    * `cognitive_primitives` — `[]` (default, no change at all), or any of "recall", "pin".
    * `pin_budget_fraction` — pins may hold at most `int(context_window * fraction)` tokens, in (0, 1].
    * `tool_result_max_chars` — longer tool results are cut, with a visible
      "[truncated: N chars total]" marker. `None` never cuts. Default 100,000.
    * `deterministic_step_ids` — derive every event's `step_id` from the run id, agent, turn, step and
      the event's position in the step (uuid5) instead of a random uuid4, so a turn re-run from an
      exported state writes the very same ids and an idempotent store keeps it once. Default False.
    * `token_calibration` — scale token counts by the ratio of the provider's reported prompt tokens
      to ours (`CalibratedCounter`), and mark them estimated in the trace. None (default): only for an
      OpenAI-compatible provider whose model tiktoken does not know (DeepSeek, Gemini, Llama, ...).
    """

    context_window: int = 128_000
    response_reserve: int | None = None
    context_strategy: ContextStrategy = field(default_factory=ContextStrategy)
    trace_dir: str | None = "./arcana-traces"
    trace: bool | None = None
    trace_include_prompt_snapshots: bool = False
    max_steps_per_turn: int = 10
    default_provider: str | None = None
    default_model: str | None = None
    cognitive_primitives: Sequence[str] = ()
    pin_budget_fraction: float = 0.5
    tool_result_max_chars: int | None = 100_000
    deterministic_step_ids: bool = False
    token_calibration: bool | None = None

    def __post_init__(self) -> None:
        if isinstance(self.context_window, bool) or not isinstance(self.context_window, int):
            raise ConfigError(f"context_window must be an integer, got {self.context_window!r}")
        if self.context_window <= 0:
            raise ConfigError(f"context_window must be positive, got {self.context_window}")
        reserve = self.response_reserve
        if reserve is None:
            reserve = min(DEFAULT_RESPONSE_RESERVE, self.context_window // 4)
        if isinstance(reserve, bool) or not isinstance(reserve, int) or reserve < 0:
            raise ConfigError(f"response_reserve must be a non-negative integer, got {reserve!r}")
        if reserve >= self.context_window:
            raise ConfigError(
                f"response_reserve ({reserve}) must be smaller than context_window ({self.context_window})"
            )
        object.__setattr__(self, "response_reserve", reserve)
        if not isinstance(self.context_strategy, ContextStrategy):
            raise ConfigError(
                f"context_strategy must be a ContextStrategy, got {type(self.context_strategy).__name__}"
            )
        fraction = self.pin_budget_fraction
        if isinstance(fraction, bool) or not isinstance(fraction, int | float) or not 0 < fraction <= 1:
            raise ConfigError(f"pin_budget_fraction must be in (0, 1], got {fraction!r}")
        if isinstance(self.max_steps_per_turn, bool) or not isinstance(self.max_steps_per_turn, int):
            raise ConfigError(f"max_steps_per_turn must be an integer, got {self.max_steps_per_turn!r}")
        if self.max_steps_per_turn < 1:
            raise ConfigError(f"max_steps_per_turn must be 1 or more, got {self.max_steps_per_turn}")
        if self.tool_result_max_chars is not None and (
            isinstance(self.tool_result_max_chars, bool)
            or not isinstance(self.tool_result_max_chars, int)
            or self.tool_result_max_chars < 1
        ):
            raise ConfigError(
                f"tool_result_max_chars must be a positive integer or None, got {self.tool_result_max_chars!r}"
            )
        object.__setattr__(self, "cognitive_primitives", normalize_primitives(self.cognitive_primitives))
        if self.trace is not None and not isinstance(self.trace, bool):
            raise ConfigError(f"trace must be True, False or None, got {self.trace!r}")

    @property
    def trace_enabled(self) -> bool:
        """Whether traces are written: `trace` if given, else whether `trace_dir` is set."""
        return self.trace if self.trace is not None else self.trace_dir is not None

    @property
    def pin_cap_tokens(self) -> int:
        """The hard pin budget: `int(context_window * pin_budget_fraction)` tokens (see `pin_cap`)."""
        return pin_cap(self.context_window, self.pin_budget_fraction)

    def describe(self) -> dict[str, Any]:
        """A JSON-safe summary (for logs and exported state)."""
        return {
            "context_window": self.context_window,
            "response_reserve": self.response_reserve,
            "trace_dir": self.trace_dir,
            "trace": self.trace_enabled,
            "max_steps_per_turn": self.max_steps_per_turn,
            "cognitive_primitives": list(self.cognitive_primitives),
            "pin_budget_fraction": self.pin_budget_fraction,
        }
