import asyncio

from runtime import Runtime, RuntimeConfig, ScriptedProvider


def get_weather(city: str) -> str:
    """Current weather for a city."""
    return f"{city}: 19C, clear"


model = ScriptedProvider(
    [
        {"content": None, "tool_calls": [{"name": "get_weather", "arguments": {"city": "Lisbon"}}]},
        "Lisbon is 19C and clear.",
    ]
)
rt = Runtime(
    providers={"scripted": model}, config=RuntimeConfig(trace_dir="./arcana-traces"), tools=[get_weather]
)


async def main():
    async with rt.chat(system="You are terse.") as chat:  # one chat session = one run = one trace file
        reply = await chat.send("Weather in Lisbon?")  # one turn (1-based, counted across sends)
        print(reply.turn, reply.steps, reply.content, reply.run_id)


asyncio.run(main())
