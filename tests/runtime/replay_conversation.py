"""Run one scripted conversation against the loopback OpenAI server and return what it produced: the
trace file's lines (timestamps and measured durations blanked) and the raw request bodies.

A script is JSON-safe data (so the same script can be replayed by another checkout of the runtime):

    {"model": "gpt-4", "window": 6000, "reserve": 500, "primitives": ["pin", "recall"], "system": "...",
     "turns": [{"user": "...", "replies": [{"text": "..."} | {"calls": [[name, {args}], ...]}]}]}

Tool calls name `lookup` (a tool answering `result` words given in its arguments) or a primitive.
The last reply of a turn should be text; a turn whose message does not fit records the error.
"""

from __future__ import annotations

import asyncio
import re
import tempfile
from pathlib import Path
from typing import Any

_VARIABLE = re.compile(
    rb'("timestamp":"[^"]*"|"(?:llm_latency_ms|latency_ms|time_ms|duration_ms)":\d+|127\.0\.0\.1:\d+)'
)


def _blank(match: re.Match[bytes]) -> bytes:
    if match.group(0).startswith(b"127."):
        return b"127.0.0.1:0"  # the loopback server's port
    key = match.group(0).split(b":", 1)[0]
    return key + b":0"


def lookup(query: str, result: str = "") -> str:
    """Look something up.

    Args:
        query: What to look for.
        result: The text to answer.
    """
    return result or f"nothing about {query}"


async def _converse(
    script: dict[str, Any], base_url: str, server: Any, trace_dir: str, bodies: list[bytes]
) -> list[str]:
    import runtime

    rt = runtime.Runtime(
        providers={"openai": {"api_key": "k", "base_url": base_url, "model": script["model"]}},
        config=runtime.RuntimeConfig(
            context_window=script["window"],
            response_reserve=script["reserve"],
            trace_dir=trace_dir,
            deterministic_step_ids=True,
            cognitive_primitives=script["primitives"],
        ),
        tools=[lookup],
    )
    outcomes: list[str] = []
    async with rt, rt.chat(system=script["system"], run_id="replayed-run") as chat:
        numbers = iter(range(1, 1 << 30))
        chat.cognitive.id_factory = lambda: f"p_{next(numbers):08x}"  # pin ids, the same in every run
        for turn in script["turns"]:
            for reply in turn["replies"]:
                if "calls" in reply:
                    server.enqueue_tool_calls([(name, args) for name, args in reply["calls"]])
                else:
                    server.enqueue_text(reply["text"])
            try:
                answer = await chat.send(turn["user"])
                outcomes.append(f"{answer.outcome}:{answer.content}")
            except Exception as exc:  # the same failure in both runs is part of what is compared
                outcomes.append(_VARIABLE.sub(_blank, f"{type(exc).__name__}: {exc}".encode()).decode())
            bodies.extend(r.body for r in server.requests)
            server.reset()  # unanswered replies of a failed turn are not the next turn's
    return outcomes


def replay(script: dict[str, Any]) -> tuple[list[bytes], list[bytes], list[str]]:
    """(trace lines, request bodies, turn outcomes) of `script`."""
    from tests.runtime.openai_server import OpenAIServer

    with tempfile.TemporaryDirectory() as trace_dir, OpenAIServer() as server:
        bodies: list[bytes] = []
        outcomes = asyncio.run(_converse(script, server.base_url, server, trace_dir, bodies))
        lines = Path(trace_dir, "replayed-run.jsonl").read_bytes().splitlines()
    return [_VARIABLE.sub(_blank, line) for line in lines], bodies, outcomes


if __name__ == "__main__":  # python replay_conversation.py script.json out.json (another checkout)
    import json
    import sys

    lines, bodies, outcomes = replay(json.loads(Path(sys.argv[1]).read_text()))
    Path(sys.argv[2]).write_text(
        json.dumps(
            {
                "lines": [x.decode() for x in lines],
                "bodies": [b.decode() for b in bodies],
                "outcomes": outcomes,
            }
        )  # fmt: skip
    )


_WORDS = (
    "the deploy failed because staging ran out of memory budget approved 40k for Q3 review launch plan "
    "internal beta partner preview general availability ticket owner Dana error recovery exception café "
    'naïve façade — 🚀 "quoted" back\\slash tab\tnew\nline 2026-11-30 #4471 {"json": [1, 2.5]}'
).split(" ")


def random_script(seed: int, *, window: int, turns: int) -> dict[str, Any]:
    """A conversation of `turns` turns made from `seed`: user questions, tool rounds (`lookup`, `pin`,
    `recall`) with results of a few to a few hundred words, and text answers."""
    import random

    rng = random.Random(seed)

    def words(lo: int, hi: int) -> str:
        return " ".join(rng.choice(_WORDS) for _ in range(rng.randint(lo, hi)))

    script_turns = []
    for _ in range(turns):
        replies: list[dict[str, Any]] = []
        for _ in range(rng.choice((0, 0, 1, 1, 2, 3))):
            calls: list[Any] = []
            for _ in range(rng.randint(1, 3)):
                kind = rng.random()
                if kind < 0.15:
                    calls.append(["pin", {"content": words(3, 30), "label": words(1, 2)}])
                elif kind < 0.25:
                    calls.append(["recall", {"query": words(1, 4)}])
                else:
                    calls.append(["lookup", {"query": words(1, 8), "result": words(5, 300)}])
            replies.append({"calls": calls})
        replies.append({"text": words(3, 80)})
        script_turns.append({"user": words(2, 40), "replies": replies})
    return {
        # gpt-4: tiktoken's exact counts; loopback-model: counts calibrated on the server's usage
        "model": rng.choice(["gpt-4", "loopback-model"]),
        "window": window,
        "reserve": rng.randint(100, 600),
        "primitives": rng.choice([[], ["pin"], ["pin", "recall"]]),
        "system": "You are careful. " + words(5, 60),
        "turns": script_turns,
    }
