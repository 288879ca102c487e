"""Two runs of the `pin-recall-demo` script, with the cognitive primitives on and off (scripted
provider, our own runtime writing real trace files), for the compare tests of the CLI and the server."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from runtime import Runtime, RuntimeConfig
from runtime.scenarios import get_scenario


def play_demo(
    trace_dir: Path,
    primitives: Sequence[str],
    *,
    turns: int | None = None,
    script: Sequence[str] | None = None,
    scenario_pin_ids: bool = False,
) -> str:
    """Play `pin-recall-demo` (its first `turns` messages, or `script`) into `trace_dir`; the run id.
    `scenario_pin_ids`: the pin gets the scenario's fixed id, as a conversation's worker gives it, so the
    scripted `unpin` of the last turn releases it (else the unpin names an unknown id)."""
    s = get_scenario("pin-recall-demo")
    config = RuntimeConfig(
        context_window=s.context_window,
        response_reserve=s.response_reserve,
        context_strategy=s.strategy,
        trace_dir=str(trace_dir),
        cognitive_primitives=list(primitives),
        trace_include_prompt_snapshots=True,
    )
    rt = Runtime({"scripted": s.provider()}, config=config, tools=list(s.tools))
    messages = list(script) if script is not None else list(s.script[:turns])

    async def go() -> str:
        async with rt.chat(system=s.system) as chat:
            if scenario_pin_ids:
                fixed = list(s.pin_ids)
                chat.cognitive.id_factory = lambda: fixed.pop(0) if fixed else "p_extra"
            reply = None
            for m in messages:
                reply = await chat.send(m)
            assert reply is not None
            return reply.run_id

    # A browser test's Playwright keeps an event loop in this thread; run the chat on its own.
    with ThreadPoolExecutor(max_workers=1) as pool:
        return pool.submit(asyncio.run, go()).result()


def trace_file(trace_dir: Path, run_id: str) -> Path:
    return trace_dir / f"{run_id}.jsonl"
