"""Runtime overhead per step: the working-set builder plus its bookkeeping (the context-decision
metadata serialised as the trace writer would), provider excluded.

For histories of 50, 200 and 1,000 messages (a realistic mix: user questions, assistant answers,
assistant tool calls with JSON arguments, tool results of a few hundred to a thousand tokens, two
pins), it prints:

- floor: the time tiktoken needs to encode the whole history once (every text the counter reads);
- cold: one step with an empty count cache (a fresh process, or a restored session);
- warm: the median step once counts are cached, the history grown by one tool round per step
  (steady state of a running conversation);
- ratio = step time / floor.

Two windows: 128k (passthrough, or aggressive_truncate for the 250k-token history) and a "tight"
window the history fills to ~65% (tail_preserve: relevance scoring, the fidelity ladder and the fit
loop all run).

Then, end to end (`--send`, on by default): the time of one `chat.send()` with 200 and 1,000 messages
of history against a loopback OpenAI-compatible server (tests/runtime/openai_server.py), and the
floor: a bare `httpx` POST of the very messages (and tools) the runtime sent, to the same server, on
a client that stays open. ratio = send / bare POST (the runtime's whole cost per send: working set,
trace events written to a JSONL file, bookkeeping). Medians of `--sends`, timed pair by pair (a send,
then a bare POST of the request it made), so the machine's drift falls on both alike.

The CPU columns are `time.process_time()` of the same sends and POSTs (the whole process: the
loopback server runs in a thread of it, so both sides include the server's work); on a shared machine
their ratio moves less than the wall-clock one.

Run: .venv/bin/python bench/runtime_overhead.py [--no-builder] [--sends 15]
"""

from __future__ import annotations

import asyncio
import json
import random
import statistics
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from runtime._tokens import TokenCounter  # noqa: E402
from runtime._working_set import ContextStrategy, PinBlock, WorkingSetBuilder  # noqa: E402

VOCAB = (
    "the deployment pipeline failed because the staging cluster ran out of memory while building the "
    "container image so we retried with a larger node pool and the migration finished in twelve minutes "
    "customer reported latency spikes around midnight UTC on the checkout service after the cache eviction "
    "policy changed; budget approved 40k for Q3 with a review in September and the launch plan has three "
    "phases: internal beta, partner preview and general availability 2026-11-30 ticket #4471 owner Dana"
).split()

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": name,
            "description": f"{name.replace('_', ' ').capitalize()} for the current project.",
            "parameters": {
                "type": "object",
                "properties": {
                    "query": {"type": "string", "description": "What to look for."},
                    "limit": {"type": "integer", "description": "Maximum results."},
                },
                "required": ["query"],
            },
        },
    }
    for name in ("search_docs", "read_ticket", "run_sql", "get_metrics")
]


def text(rng: random.Random, n_words: int) -> str:
    return " ".join(rng.choice(VOCAB) for _ in range(n_words))


def make_history(n: int, seed: int = 7) -> list[dict[str, Any]]:
    rng = random.Random(seed)
    history: list[dict[str, Any]] = [
        {"role": "system", "content": "You are a careful SRE assistant. " + text(rng, 60)}
    ]
    call = 0
    while len(history) < n:
        history.append({"role": "user", "content": text(rng, rng.randint(15, 150))})
        for _ in range(rng.randint(0, 3)):
            call += 1
            cid = f"call_{call:06d}"
            args = json.dumps({"query": text(rng, rng.randint(3, 40)), "limit": rng.randint(1, 50)})
            history.append(
                {
                    "role": "assistant",
                    "content": None,
                    "tool_calls": [
                        {
                            "id": cid,
                            "type": "function",
                            "function": {"name": rng.choice(TOOLS)["function"]["name"], "arguments": args},
                        }
                    ],
                }
            )
            history.append({"role": "tool", "tool_call_id": cid, "content": text(rng, rng.randint(80, 900))})
        history.append({"role": "assistant", "content": text(rng, rng.randint(40, 300))})
    return (
        history[:n]
        if history[n - 1]["role"] != "assistant" or not history[n - 1].get("tool_calls")
        else history[: n + 1]
    )


PINS = [
    PinBlock("p_a1b2c3d4", "key facts", "Budget 40k for Q3. GA date 2026-11-30. Owner Dana."),
    PinBlock("p_0badf00d", "plan", "1. internal beta 2. partner preview 3. general availability"),
]


def floor_seconds(history: list[dict[str, Any]], counter: TokenCounter, repeats: int = 5) -> float:
    """Encode every text of the history once with tiktoken (no caching): the least any exact
    counter must spend."""
    texts: list[str] = []
    for m in history:
        texts.append(m["role"])
        if m.get("content"):
            texts.append(m["content"])
        for tc in m.get("tool_calls") or ():
            texts += [tc["function"]["name"], tc["function"]["arguments"]]
        if m.get("tool_call_id"):
            texts.append(m["tool_call_id"])
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        for t in texts:
            counter.encode(t)
        best = min(best, time.perf_counter() - t0)
    return best


async def one_step(builder: WorkingSetBuilder, history: list[dict[str, Any]], step: int) -> float:
    t0 = time.perf_counter()
    ws = await builder.build(history, tools=TOOLS, pins=PINS, turn=step, step=1)
    # bookkeeping: the context_decision event metadata, serialised as the JSONL/HTTP sinks do
    json.dumps({"producer": "arcana-console", "turn": step, "step": 1, **ws.decision.to_metadata()})
    return time.perf_counter() - t0


async def measure(n: int, window: int) -> dict[str, Any]:
    full = make_history(n + 40)
    history = full[:n]
    # cold: a fresh counter (empty cache) — but the encoding itself is loaded once per process
    counter = TokenCounter()
    builder = WorkingSetBuilder(counter, context_window=window, strategy=ContextStrategy())
    cold = await one_step(builder, history, 1)
    # warm: the conversation grows by a message per step, as a running session's does
    warm: list[float] = []
    for i in range(1, 11):
        warm.append(await one_step(builder, full[: n + i], i + 1))
    ws = await builder.build(full[: n + 10], tools=TOOLS, pins=PINS, turn=11, step=1)
    return {
        "n": n,
        "window": window,
        "floor": floor_seconds(history, counter),
        "cold": cold,
        "warm": statistics.median(warm),
        "strategy": ws.decision.strategy,
        "tokens": counter.count_messages(history),
    }


async def send_vs_post(n: int, sends: int, trace_dir: str) -> dict[str, float]:
    """Median seconds of `chat.send()` with `n` messages of history, and of a bare POST of the same
    request body (messages, tools, model) to the same loopback server."""
    import httpx

    import runtime
    from tests.runtime.openai_server import OpenAIServer

    history = make_history(n)
    window = max(128_000, int(TokenCounter().count_messages(history) * 1.5))
    with OpenAIServer(default_reply="Noted; the plan stands.") as server:
        rt = runtime.Runtime(
            providers={"openai": {"api_key": "k", "base_url": server.base_url, "model": "loopback-model"}},
            # A window the whole history fits in, so every message is sent (and the bare POST carries
            # the same messages); 128k would cut the 1,000-message history (~250k tokens).
            config=runtime.RuntimeConfig(context_window=window, trace_dir=trace_dir),
        )
        async with rt.chat(system=history[0]["content"]) as chat:
            state = chat.export_state()
        # The same session with `n` messages of history (one turn per user message), restored.
        turns, turn = [0], 0
        for m in history[1:]:
            turn += m["role"] == "user"
            turns.append(turn)
        state.update(history=history, message_turns=turns, turn=turn)
        times: list[float] = []
        cpu: list[float] = []
        bare: list[float] = []
        bare_cpu: list[float] = []
        headers = {"Authorization": "Bearer k", "Content-Type": "application/json"}
        async with (
            rt.chat(state=state) as chat,
            httpx.AsyncClient(base_url=server.base_url, timeout=30) as client,
        ):

            async def post() -> None:
                # The request the send just made, encoded as a client must (the runtime's own
                # encoding), posted, the answer decoded.
                payload = json.loads(server.requests[-1].body)
                t0, c0 = time.perf_counter(), time.process_time()
                data = json.dumps(payload, separators=(",", ":"), ensure_ascii=False).encode()
                r = await client.post("/chat/completions", content=data, headers=headers)
                r.json()
                bare.append(time.perf_counter() - t0)
                bare_cpu.append(time.process_time() - c0)

            await chat.send("warm up: what is the plan?")
            await post()
            bare.clear()
            bare_cpu.clear()
            # Pair by pair (a send, then a bare POST of the request it made): this machine's speed
            # drifts within seconds, and all sends then all POSTs read that drift as a ratio.
            for i in range(sends):
                t0, c0 = time.perf_counter(), time.process_time()
                await chat.send(f"question {i}: what is the budget?")
                times.append(time.perf_counter() - t0)
                cpu.append(time.process_time() - c0)
                await post()
        body = server.requests[-2].body  # the last send's (the last request is its bare POST)
        messages = len(json.loads(body)["messages"])
    return {"send": statistics.median(times), "bare": statistics.median(bare), "sent": messages,
            "bytes": len(body), "send_cpu": statistics.median(cpu),
            "bare_cpu": statistics.median(bare_cpu)}  # fmt: skip


def main() -> None:
    import argparse
    import tempfile

    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--no-builder", action="store_true", help="only the send vs bare POST comparison")
    ap.add_argument("--sends", type=int, default=15)
    args = ap.parse_args()
    if not args.no_builder:
        builder_table()
    print(f"\nsend vs bare HTTP POST of the same request (loopback, medians of {args.sends}):")
    print(f"{'history':>8} {'sent msgs':>9} {'body KB':>8} {'send ms':>8} {'POST ms':>8} {'ratio':>6}"
          f" {'send CPU':>9} {'POST CPU':>9} {'CPU ratio':>9}")  # fmt: skip
    with tempfile.TemporaryDirectory() as tmp:
        for n in (200, 1000):
            r = asyncio.run(send_vs_post(n, args.sends, tmp))
            print(f"{n:>8} {r['sent']:>9} {r['bytes'] / 1024:>8.0f} {r['send'] * 1e3:>8.2f} "
                  f"{r['bare'] * 1e3:>8.2f} {r['send'] / r['bare']:>6.2f} {r['send_cpu'] * 1e3:>9.2f} "
                  f"{r['bare_cpu'] * 1e3:>9.2f} {r['send_cpu'] / r['bare_cpu']:>9.2f}")  # fmt: skip


def builder_table() -> None:
    TokenCounter()  # load the encoding before timing anything
    print(
        f"{'messages':>8} {'window':>7} {'history tok':>11} {'strategy':>19} {'floor ms':>9} "
        f"{'cold ms':>8} {'cold/floor':>10} {'warm ms':>8} {'warm/floor':>10}"
    )
    for label in ("128k", "tight"):
        for n in (50, 200, 1000):
            tokens = TokenCounter().count_messages(make_history(n))
            # "tight": a window the history fills to ~65%, so tail_preserve grades and demotes
            window = 128_000 if label == "128k" else int(tokens / 0.65)
            r = asyncio.run(measure(n, window))
            print(
                f"{r['n']:>8} {r['window']:>7} {r['tokens']:>11} {r['strategy']:>19} {r['floor'] * 1e3:>9.2f} "
                f"{r['cold'] * 1e3:>8.2f} {r['cold'] / r['floor']:>10.2f} {r['warm'] * 1e3:>8.2f} "
                f"{r['warm'] / r['floor']:>10.3f}"
            )


if __name__ == "__main__":
    main()
