"""Play the offline `pin-recall-demo` script twice — cognitive primitives on, then off — into ./arcana-traces,
and print the two run ids for `arcana trace diff` (scripted provider: no key, no network).

    $ .venv/bin/python examples/compare_primitives.py
    $ .venv/bin/arcana trace diff <on> <off>
"""

from __future__ import annotations

import asyncio
import sys

from runtime import Runtime, RuntimeConfig
from runtime.scenarios import get_scenario


async def play(primitives: list[str], trace_dir: str) -> str:
    s = get_scenario("pin-recall-demo")
    config = RuntimeConfig(
        context_window=s.context_window,
        response_reserve=s.response_reserve,
        context_strategy=s.strategy,
        trace_dir=trace_dir,
        cognitive_primitives=primitives,
    )
    rt = Runtime({"scripted": s.provider()}, config=config, tools=list(s.tools))
    async with rt.chat(system=s.system) as chat:
        for message in s.script:
            reply = await chat.send(message)
    return reply.run_id


async def main(trace_dir: str) -> None:
    on = await play(["recall", "pin"], trace_dir)
    off = await play([], trace_dir)
    print(f"primitives on:  {on}")
    print(f"primitives off: {off}")


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1] if len(sys.argv) > 1 else "./arcana-traces"))
