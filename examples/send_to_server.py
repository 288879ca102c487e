"""Stream a conversation's trace into Arcana Console while it runs, and keep a local copy.

    ARCANA_URL=http://127.0.0.1:8000 ARCANA_API_KEY=arc_… python examples/send_to_server.py

Offline (the scripted provider), so it needs only `pip install arcana-console` and a server's API key.
"""

import asyncio
import os

from runtime import HttpBatchSink, JsonlFileSink, Runtime, RuntimeConfig, ScriptedProvider

server = os.environ.get("ARCANA_URL", "http://127.0.0.1:8000")
model = ScriptedProvider(
    [
        {
            "content": None,
            "tool_calls": [{"name": "pin", "arguments": {"content": "Budget: 40k EUR", "label": "budget"}}],
        },
        "Noted: the budget is pinned.",
        "Plan: two phases, both inside the pinned budget.",
    ]
)
rt = Runtime(
    providers={"scripted": model},
    config=RuntimeConfig(cognitive_primitives=["recall", "pin"]),
    # Both sinks get every event: the server as the conversation runs, a JSONL file for `arcana trace`.
    trace_sinks=[
        JsonlFileSink("./arcana-traces"),
        HttpBatchSink(f"{server}/api/v1/ingest", api_key=os.environ["ARCANA_API_KEY"], max_interval_s=0.5),
    ],
)


async def main():
    async with rt.chat(system="You are a planner.") as chat:  # closing the chat flushes both sinks
        await chat.send("Our budget is 40k EUR. Remember it.")
        reply = await chat.send("Draft the plan.")
    print(reply.run_id)


asyncio.run(main())
