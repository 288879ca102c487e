"""Time to reconstruct the context decisions of long generated runs (`runtime.reconstruct`).

    .venv/bin/python bench/reconstruct.py [--calls 100 1000] [--repeat 3]

Each run is an agent that works through turns of a user question, one to three tool calls (each an
assistant `tool_call` and a tool result of 0.5–3 kB of log lines) and an answer; one model call per
step. Two context policies:

* `managed`: tool results older than the last six messages are cut to 200 characters plus
  "... [truncated N chars]"; when the history passes 60 messages, a summarizer side call (agent
  "summarizer") summarizes the oldest 40 and its answer replaces them as a user message;
* `growing`: nothing is ever removed (every call receives the whole conversation: the input of the
  run grows as the square of its length; the worst case for the exact matching).

Printed per run: calls, message occurrences (input messages summed over the calls), distinct
contents, message states written, compactions found, and the time of `reconstruct(calls)` from
plain dicts (parsing included) with tiktoken counts (cold: each distinct content counted once) and
with a free counter (`len`), which is the alignment alone. Best of `--repeat`.
"""

from __future__ import annotations

import argparse
import random
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from runtime._tokens import TokenCounter  # noqa: E402
from runtime.reconstruct import reconstruct  # noqa: E402

SYSTEM = "You are an SRE assistant. Never restart the database. Answer in at most 5 sentences."
WORDS = "pod node api worker restarted OOM pool retry scheduled latency p99 timeout disk queue lag".split()


def _text(role: str, content: str) -> dict[str, Any]:
    return {"role": role, "parts": [{"type": "text", "content": content}]}


def _log(rng: random.Random, n: int) -> str:
    return "\n".join(
        f"2026-05-{rng.randint(1, 28):02d} {rng.randint(0, 23):02d}:{rng.randint(0, 59):02d} "
        + " ".join(rng.choice(WORDS) for _ in range(8))
        for _ in range(n)
    )


def _cut(msg: dict[str, Any]) -> dict[str, Any]:
    part = msg["parts"][0]
    result = part["result"]
    if len(result) <= 200:
        return msg
    return {
        "role": "tool",
        "parts": [{**part, "result": result[:200] + f"... [truncated {len(result) - 200} chars]"}],
    }


def generate(n_calls: int, policy: str, seed: int = 7) -> list[dict[str, Any]]:
    rng = random.Random(seed)
    history: list[dict[str, Any]] = [_text("system", SYSTEM)]
    calls: list[dict[str, Any]] = []
    turn = 0
    pending_tools = 0

    def send(inputs: list[dict[str, Any]], outputs: list[dict[str, Any]], **extra: Any) -> None:
        calls.append(
            {
                "id": f"call-{len(calls) + 1:05d}",
                "input_messages": inputs,
                "output_messages": outputs,
                "context_window": 128_000,
                **extra,
            }
        )

    while len(calls) < n_calls:
        if pending_tools == 0:
            turn += 1
            history.append(_text("user", f"Turn {turn}: why is service s{turn % 13} slow? " + _log(rng, 1)))
            pending_tools = rng.randint(1, 3)
        if policy == "managed" and len(history) > 60:
            old = history[1:41]
            summary = f"Summary of turns up to {turn}: " + " ".join(rng.choice(WORDS) for _ in range(60))
            send(
                [_text("system", "Summarize the conversation."), _text("user", str(len(old)) + " messages")],
                [_text("assistant", summary)],
                agent="summarizer",
            )
            history[1:41] = [_text("user", summary)]
        inputs = list(history)
        if policy == "managed":
            inputs = [
                _cut(m) if m["role"] == "tool" and k < len(inputs) - 6 else m for k, m in enumerate(inputs)
            ]
        if pending_tools > 0:
            cid = f"t{len(calls)}"
            out = {
                "role": "assistant",
                "parts": [
                    {"type": "tool_call", "id": cid, "name": "fetch_logs", "arguments": {"service": turn}}
                ],
            }
            send(inputs, [out])
            history.append(out)
            history.append(
                {
                    "role": "tool",
                    "parts": [
                        {"type": "tool_call_response", "id": cid, "result": _log(rng, rng.randint(8, 40))}
                    ],
                }
            )
            pending_tools -= 1
            if pending_tools == 0:
                pending_tools = -1  # the answer comes next
        else:
            out = _text(
                "assistant", f"Service s{turn % 13}: " + " ".join(rng.choice(WORDS) for _ in range(30))
            )
            send(inputs, [out])
            history.append(out)
            pending_tools = 0
    return calls


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--calls", type=int, nargs="+", default=[100, 1000])
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args(argv)
    print(
        f"{'policy':>8} {'calls':>6} {'occurrences':>11} {'distinct':>8} {'states':>9} {'compactions':>11} "
        f"{'tiktoken s':>10} {'len s':>7} {'ms/call':>7}"
    )
    for policy in ("managed", "growing"):
        for n in args.calls:
            calls = generate(n, policy)
            occurrences = sum(len(c["input_messages"]) for c in calls)
            best_tok = best_len = float("inf")
            result = None
            for _ in range(args.repeat):
                counter = TokenCounter()  # a fresh cache: every distinct content counted
                t0 = time.perf_counter()
                result = reconstruct(calls, count_text=counter.count_text)
                best_tok = min(best_tok, time.perf_counter() - t0)
                t0 = time.perf_counter()
                reconstruct(calls, count_text=len)
                best_len = min(best_len, time.perf_counter() - t0)
            assert result is not None
            states = sum(len(c.states) for c in result.calls)
            print(
                f"{policy:>8} {n:>6} {occurrences:>11} {len(result.messages):>8} {states:>9} "
                f"{len(result.compactions):>11} {best_tok:>10.2f} {best_len:>7.2f} {1000 * best_tok / n:>7.2f}"
            )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
