"""Named offline scenarios for the `scripted` provider: what a server offers as the "models" of its
built-in, key-less provider, so a new user sees every cognitive primitive with no API key.

    >>> from runtime.scenarios import SCENARIOS, get_scenario
    >>> s = get_scenario("pin-recall-demo")
    >>> s.script[0][:40], s.context_window
    ('Here is the brief for the Aurora launch.', 2400)
    >>> provider = s.provider()                  # a fresh ScriptedProvider playing the scenario

A `Scenario` holds the scripted model's steps (answered in order, whatever the user types), a
suggested user script (one message per turn; a playground may type anything instead), the tools the
steps call, pin ids to hand out first (so a scripted `unpin` can name the pin it made) and a
context window / strategy small enough that the working-set builder really compresses.

`pin-recall-demo` (the chat of `runtime.demo`): turn 1 pins the launch constraints and answers a long
plan; turns 2–3 grow the history until the plan is compressed; turn 4 recalls turn 1; turn 5 unpins.
`pool-demo` (the pool of `runtime.demo`): a researcher pins the weather; a writer recalls its own
first turn. `small-talk`: one short answer per message, no primitives used (for trying the page).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from ._providers import ScriptedProvider
from ._working_set import ContextStrategy
from .demo import CHAT_PIN_ID, CHAT_TURNS, CONTEXT_WINDOW, POOL_TURNS, SYSTEM, get_forecast

__all__ = ["SCENARIOS", "Scenario", "get_scenario", "scenario_names"]


@dataclass(frozen=True)
class Scenario:
    """One named script of the offline `scripted` provider (see the module docstring)."""

    name: str
    description: str
    steps: tuple[Any, ...]
    script: tuple[str, ...]
    system: str | None = None
    context_window: int | None = None
    response_reserve: int | None = None
    strategy: ContextStrategy | None = None
    cognitive_primitives: tuple[str, ...] = ()
    tools: tuple[Callable[..., Any], ...] = ()
    pin_ids: tuple[str, ...] = ()
    # A pool scenario: agent name → its system prompt; `script_agents[i]` addresses `script[i]`.
    agents: dict[str, str] = field(default_factory=dict)
    script_agents: tuple[str, ...] = ()
    closing_text: str = "That is all I have scripted for this scenario; start a new run to replay it."

    def provider(self, *, name: str = "scripted", delay: float = 0.0) -> ScriptedProvider:
        """A fresh `ScriptedProvider` playing this scenario (model name = the scenario's name), each
        answer taking `delay` seconds."""
        return ScriptedProvider(
            list(self.steps), name=name, model=self.name, closing_text=self.closing_text, delay=delay
        )

    def describe(self) -> dict[str, Any]:
        """A JSON-safe summary (for forms and the API): suggested script and settings."""
        return {
            "name": self.name,
            "description": self.description,
            "system": self.system,
            "script": list(self.script),
            "script_agents": list(self.script_agents) or None,
            "agents": [{"name": n, "system": s} for n, s in self.agents.items()] or None,
            "context_window": self.context_window,
            "cognitive_primitives": list(self.cognitive_primitives),
        }


_DEMO_STRATEGY = ContextStrategy(tail_preserve_below=1.0, llm_summarize_below=1.0, keep_recent=3)


def _small_talk_steps(n: int) -> tuple[str, ...]:
    return tuple(f"(scripted answer {i}) Noted. Ask me anything else." for i in range(1, n + 1))


SCENARIOS: dict[str, Scenario] = {
    s.name: s
    for s in (
        Scenario(
            name="pin-recall-demo",
            description="Pins the launch constraints, sees the plan compressed, recalls turn 1, unpins.",
            steps=tuple(step for _, steps in CHAT_TURNS for step in steps),
            script=tuple(text for text, _ in CHAT_TURNS),
            system=SYSTEM,
            context_window=CONTEXT_WINDOW,
            response_reserve=300,
            strategy=_DEMO_STRATEGY,
            cognitive_primitives=("recall", "pin"),
            tools=(get_forecast,),
            pin_ids=(CHAT_PIN_ID,),
        ),
        Scenario(
            name="pool-demo",
            description="Two agents: a researcher pins the weather, a writer recalls its first turn.",
            steps=tuple(step for _, _, steps in POOL_TURNS for step in steps),
            script=tuple(text for _, text, _ in POOL_TURNS),
            script_agents=tuple(agent for agent, _, _ in POOL_TURNS),
            agents={
                "researcher": "You research facts for the launch team.",
                "writer": "You write short customer copy.",
            },
            context_window=CONTEXT_WINDOW,
            response_reserve=300,
            strategy=_DEMO_STRATEGY,
            cognitive_primitives=("recall", "pin"),
            tools=(get_forecast,),
        ),
        Scenario(
            name="small-talk",
            description="A short scripted answer per message; no primitives, no tools.",
            steps=_small_talk_steps(20),
            script=("Hello!", "What can you do?", "Thanks."),
        ),
    )
}


def get_scenario(name: str) -> Scenario:
    """The scenario called `name`; `KeyError` naming the known ones otherwise."""
    try:
        return SCENARIOS[name]
    except KeyError:
        raise KeyError(f"unknown scenario {name!r}; known: {', '.join(sorted(SCENARIOS))}") from None


def scenario_names() -> Sequence[str]:
    return sorted(SCENARIOS)
