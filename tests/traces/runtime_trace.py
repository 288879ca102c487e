"""A trace written by our own runtime (Runtime + ScriptedProvider), for the dashboard tests."""

from __future__ import annotations

import asyncio
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from runtime import Runtime, RuntimeConfig, ScriptedProvider


def lookup(city: str) -> str:
    """Look a city up.

    Args:
        city: The city name.
    """
    return f"{city}: 21C, clear"


def _call(name: str, **arguments: object) -> dict[str, object]:
    return {"name": name, "arguments": arguments}


def write_runtime_trace(trace_dir: Path) -> Path:
    """Run a three-turn chat that pins a fact, calls a tool, recalls turn 1 and unpins; return its file."""
    provider = ScriptedProvider(
        [
            {
                "content": None,
                "tool_calls": [
                    _call("pin", content="Budget is 42 units; deadline is Friday.", label="key facts"),
                    _call("lookup", city="Paris"),
                ],
            },
            "Noted: budget 42, deadline Friday. Paris is clear.",
            {"content": None, "tool_calls": [_call("recall", turn=1)]},
            "In turn 1 you set the budget to 42 units.",
            "Wrapping up: launch on Friday within 42 units.",
        ]
    )
    config = RuntimeConfig(
        cognitive_primitives=["recall", "pin"],
        trace_dir=str(trace_dir),
        trace_include_prompt_snapshots=True,
    )
    rt = Runtime({"scripted": provider}, config=config, tools=[lookup])

    async def go() -> None:
        async with rt.chat(system="You plan product launches.") as chat:
            await chat.send("Plan the launch: budget 42 units, deadline Friday. Check the weather in Paris.")
            await chat.send("What did I say about the budget in turn 1?")
            await chat.send("Summarise the plan.")

    # Playwright's sync API keeps an event loop running in the test thread; run the chat on its own.
    with ThreadPoolExecutor(max_workers=1) as pool:
        pool.submit(asyncio.run, go()).result()
    files = sorted(Path(trace_dir).glob("*.jsonl"))
    assert len(files) == 1, files
    return files[0]
