import asyncio

from runtime import ContextStrategy, Runtime, RuntimeConfig, ScriptedProvider

ANALYSIS = "Three load-bearing assumptions: " + " ".join(
    f"(detail {i}) the billing service stays the source of truth;" for i in range(40)
)
NOTES = "Notes from the week: " + " ".join(f"item {i} reviewed, nothing blocking." for i in range(120))

model = ScriptedProvider(
    [
        {
            "content": None,
            "tool_calls": [
                {
                    "name": "pin",
                    "arguments": {
                        "content": "A1 billing is the source of truth; A2 EU data stays in EU; A3 deploys are reversible.",
                        "label": "assumptions",
                    },
                }
            ],
        },
        ANALYSIS,
        "Read the notes; nothing contradicts the assumptions.",
        {
            "content": None,
            "tool_calls": [{"name": "recall", "arguments": {"turn": 1, "include": "assistant_only"}}],
        },
        "Checked against my original analysis from turn 1: all three assumptions still hold.",
    ]
)
rt = Runtime(
    providers={"scripted": model},
    config=RuntimeConfig(
        context_window=2000,
        response_reserve=200,
        trace_dir="./arcana-traces",
        cognitive_primitives=["recall", "pin"],
        context_strategy=ContextStrategy(keep_recent=2),
    ),
)


async def main():
    async with rt.chat(system="You are a careful refactoring assistant.") as chat:
        for text in [
            "List three load-bearing assumptions for the refactor.",
            NOTES,
            "Check each assumption against what we learned. Any contradicted?",
        ]:
            reply = await chat.send(text)
            print(
                f"turn {reply.turn}: {reply.steps} steps, tools={[c['name'] for c in reply.tool_calls]}: {reply.content[:70]}"
            )
        print("pins:", [(p["pin_id"], p["label"], p["tokens"]) for p in chat.pins])
        print("run:", chat.run_id)


asyncio.run(main())
