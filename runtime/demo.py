"""A scripted demo conversation: pin, compression, recall, unpin, a tool call, and a pool of two agents.

Offline and deterministic (a `ScriptedProvider`, no network), with a small context window so the
working-set builder really compresses. It writes ordinary trace files, so the dashboard, the `arcana`
CLI and the Celery worker can all use it:

    >>> from runtime.demo import build_demo_runtime, run_demo
    >>> summary = asyncio.run(run_demo("./arcana-traces"))       # two runs: a chat and a pool
    >>> summary["chat"]["run_id"], summary["pool"]["run_id"]

`build_demo_runtime(trace_dir)` returns the configured `Runtime` (with its scripted providers) if you
want to drive the turns yourself; `run_demo()` plays the whole script: `CHAT_TURNS` through
`rt.chat()`, then `POOL_TURNS` through `rt.collaborate()`. `trace_sinks` replaces the file sink (the
worker passes a `CallableSink` that ingests each event). Also runnable as
`python -m runtime.demo ./arcana-traces`.
"""

from __future__ import annotations

import asyncio
import json
import secrets
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ._config import RuntimeConfig
from ._providers import ScriptedProvider
from ._session import Runtime
from ._trace_writer import TraceSink
from ._working_set import ContextStrategy

__all__ = ["CHAT_TURNS", "POOL_TURNS", "build_demo_runtime", "get_forecast", "run_demo"]

CONTEXT_WINDOW = 2400
CHAT_PIN_ID = "p_a7145c0d"

SYSTEM = "You are Atlas, a launch-planning assistant. Be concrete and keep the plan consistent."

BRIEF = (
    "Here is the brief for the Aurora launch. Constraints: the total budget is 42,000 EUR, the hard "
    "deadline is Friday 17:00 UTC, Dana owns the go/no-go call, and nothing ships without a QA "
    "sign-off. Audience: existing customers first, then a public announcement a week later. "
    "Please draft a step-by-step plan."
)
PLAN = (
    "Launch plan for Aurora, seven steps. "
    "Step 1: freeze scope on Monday and publish the feature list to the team. "
    "Step 2: staging deploy on Tuesday morning with the migration rehearsal. "
    "Step 3: QA sign-off by Wednesday 18:00 UTC, owned by the QA lead, with a written checklist. "
    "Step 4: customer email drafted Wednesday, approved by Dana Thursday noon. "
    "Step 5: production deploy Friday 09:00 UTC behind a feature flag. "
    "Step 6: go/no-go call with Dana Friday 15:00 UTC; rollback drill rehearsed beforehand. "
    "Step 7: enable the flag for existing customers Friday 16:00 UTC, public post one week later. "
    "Budget split: 18,000 EUR engineering overtime, 9,000 EUR QA contractors, 11,000 EUR marketing, "
    "4,000 EUR contingency."
)
CONSTRAINTS = "Budget 42,000 EUR; deadline Friday 17:00 UTC; Dana owns go/no-go; QA sign-off required."
VENDOR_NOTES = " ".join(
    f"Vendor note {i}: the CDN contract renewal, DNS cut-over timing, status-page wording and on-call rota "
    f"for region {i} were reviewed; no blockers, minor wording changes requested."
    for i in range(1, 19)
)


def get_forecast(city: str, day: str = "Friday") -> dict[str, Any]:
    """Weather forecast for a city on a given day (demo data).

    Args:
        city: City name, e.g. "Lisbon".
        day: Day of the week.
    """
    return {"city": city, "day": day, "forecast": "clear, 19C, light wind", "outage_risk": "low"}


#: (user message, scripted model steps for that turn) for the chat session.
CHAT_TURNS: list[tuple[str, list[Any]]] = [
    (
        BRIEF,
        [
            {
                "content": None,
                "tool_calls": [
                    {"name": "pin", "arguments": {"content": CONSTRAINTS, "label": "constraints"}}
                ],
            },
            PLAN,
        ],
    ),
    (
        "The launch party is in Lisbon. What does Friday look like there?",
        [
            {
                "content": None,
                "tool_calls": [{"name": "get_forecast", "arguments": {"city": "Lisbon", "day": "Friday"}}],
            },
            "Friday in Lisbon: clear, 19C, light wind, low outage risk. No change to step 6 or 7.",
        ],
    ),
    (
        "Here are this week's vendor notes, please check them against the plan: " + VENDOR_NOTES,
        [
            "I read all eighteen vendor notes. None touches the deadline, the budget or the go/no-go call; "
            "the status-page wording change fits step 4."
        ],
    ),
    (
        "Remind me exactly what step 3 of the original plan said, and who owns it.",
        [
            {
                "content": None,
                "tool_calls": [{"name": "recall", "arguments": {"turn": 1, "include": "assistant_only"}}],
            },
            "Step 3 of the original plan: QA sign-off by Wednesday 18:00 UTC, owned by the QA lead, with a "
            "written checklist. The pinned constraints still hold: nothing ships without it.",
        ],
    ),
    (
        "Good news: finance approved the budget and Dana delegated go/no-go to me. The constraints are settled.",
        [
            {"content": None, "tool_calls": [{"name": "unpin", "arguments": {"pin_id": CHAT_PIN_ID}}]},
            "Understood. I released the pinned constraints; the plan stays as drafted.",
        ],
    ),
]

#: (agent, user message, scripted model steps) for the pool.
POOL_TURNS: list[tuple[str, str, list[Any]]] = [
    (
        "researcher",
        "Research the launch-day weather for Lisbon and keep the key fact.",
        [
            {"content": None, "tool_calls": [{"name": "get_forecast", "arguments": {"city": "Lisbon"}}]},
            {
                "content": None,
                "tool_calls": [
                    {
                        "name": "pin",
                        "arguments": {
                            "content": "Lisbon Friday: clear, 19C, low outage risk.",
                            "label": "weather",
                        },
                    }
                ],
            },
            "Lisbon on Friday: clear, 19C, light wind, low outage risk. Pinned as 'weather'.",
        ],
    ),
    (
        "writer",
        "Write the one-line customer announcement for Friday.",
        ["Aurora is live for every existing customer this Friday at 16:00 UTC."],
    ),
    (
        "writer",
        "Shorten what you wrote in your first turn.",
        [
            {
                "content": None,
                "tool_calls": [{"name": "recall", "arguments": {"turn": 1, "include": "assistant_only"}}],
            },
            "Aurora is live Friday, 16:00 UTC.",
        ],
    ),
]


def _chat_script() -> list[Any]:
    return [step for _, steps in CHAT_TURNS for step in steps]


def build_demo_runtime(
    trace_dir: str | Path | None = "./arcana-traces",
    *,
    trace_sinks: Sequence[TraceSink] | None = None,
    prompt_snapshots: bool = True,
) -> Runtime:
    """The demo `Runtime`: providers "atlas" (the chat), "researcher" and "writer" (the pool), all
    `ScriptedProvider`s; a 2,400-token window (so compression happens); recall and pin enabled; the
    `get_forecast` tool; prompt snapshots on by default so the dashboard can show what was sent."""
    providers = {
        "atlas": ScriptedProvider(_chat_script(), name="atlas", model="scripted-atlas"),
        "researcher": ScriptedProvider(POOL_TURNS[0][2], name="researcher", model="scripted-researcher"),
        "writer": ScriptedProvider(
            POOL_TURNS[1][2] + POOL_TURNS[2][2], name="writer", model="scripted-writer"
        ),
    }
    config = RuntimeConfig(
        context_window=CONTEXT_WINDOW,
        response_reserve=300,
        # Compress by fidelity (tail_preserve) rather than by summary calls, so the script stays linear.
        context_strategy=ContextStrategy(tail_preserve_below=1.0, llm_summarize_below=1.0, keep_recent=3),
        trace_dir=None if trace_dir is None else str(trace_dir),
        trace_include_prompt_snapshots=prompt_snapshots,
        cognitive_primitives=["recall", "pin"],
        default_provider="atlas",
    )
    return Runtime(providers, config=config, tools=[get_forecast], trace_sinks=trace_sinks)


async def run_demo(
    trace_dir: str | Path | None = "./arcana-traces",
    *,
    trace_sinks: Sequence[TraceSink] | None = None,
    prompt_snapshots: bool = True,
) -> dict[str, Any]:
    """Play the whole demo; returns the run ids, every reply and the pins, as JSON-safe data."""
    rt = build_demo_runtime(trace_dir, trace_sinks=trace_sinks, prompt_snapshots=prompt_snapshots)
    replies: list[dict[str, Any]] = []
    async with rt.chat(system=SYSTEM) as chat:
        # A fixed id for the chat's pin, so the scripted `unpin` can name it (ids are random otherwise).
        chat.cognitive.id_factory = _ids(CHAT_PIN_ID)
        for text, _ in CHAT_TURNS:
            reply = await chat.send(text)
            replies.append(_reply_dict(reply))
        chat_summary = {
            "run_id": chat.run_id,
            "replies": replies,
            "pins": chat.pins,
            "recall_log": chat.recall_log,
        }
    pool_replies: list[dict[str, Any]] = []
    async with rt.collaborate() as pool:
        pool.add("researcher", system="You research facts for the launch team.", provider="researcher")
        pool.add("writer", system="You write short customer copy.", provider="writer", tools=[])
        for agent, text, _ in POOL_TURNS:
            pool_replies.append(_reply_dict(await pool[agent].send(text)))
        pool_summary = {
            "run_id": pool.run_id,
            "replies": pool_replies,
            "pins": {name: a.pins for name, a in pool.agents.items()},
        }
    await rt.aclose()
    return {"chat": chat_summary, "pool": pool_summary}


def _ids(*fixed: str) -> Any:
    queue = list(fixed)

    def next_id() -> str:
        return queue.pop(0) if queue else "p_" + secrets.token_hex(4)

    return next_id


def _reply_dict(reply: Any) -> dict[str, Any]:
    return {
        "agent": reply.agent,
        "turn": reply.turn,
        "steps": reply.steps,
        "content": reply.content,
        "outcome": reply.outcome,
        "tool_calls": [c["name"] for c in reply.tool_calls],
    }


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    trace_dir = args[0] if args else "./arcana-traces"
    summary = asyncio.run(run_demo(trace_dir))
    print(
        json.dumps(
            {
                "trace_dir": trace_dir,
                "chat_run": summary["chat"]["run_id"],
                "pool_run": summary["pool"]["run_id"],
            }
        )
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
