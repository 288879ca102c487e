"""Agreement of `runtime.reconstruct` with the truth: our runtime's recorded context decisions.

    .venv/bin/python bench/reconstruct_agreement.py [--turns 30] [-v]

1. Plays runs of our runtime with the offline `ScriptedProvider` behind a recording wrapper that
   keeps the exact messages each provider call received and the message it answered: the demo chat
   (`runtime.demo`: pin, tail_preserve compression, recall, unpin, a tool) and generated runs of
   `--turns` turns (a question, a `fetch_logs` tool call with a long result, an answer; a `pin` every
   5th turn, a `recall` of turn 1 every 7th) under each strategy forced (`tail_preserve`: fidelity
   levels and drops; `aggressive_truncate`: drops; `llm_summarize`: summaries from a summarizer call)
   and chosen by demand (`auto`), in a small window so that the builder really compresses.
2. Converts each call to the parts form (what an OTLP export without `arcana.*` attributes carries)
   and reconstructs the run (`reconstruct`).
3. Maps each message of the session's history to its reconstructed message by content digest, and
   compares, call by call, the reconstructed status with the class the recorded decisions imply:
   recorded dropped → dropped, summarized → summarized; sent (kept or compressed) → restored when the
   step before had not sent it, else shortened when compressed, else kept — or new / kept (the
   previous answer) when it entered the history since the step before. Pins are not history messages
   and are left out.

Prints per class: messages expected, agreeing, the share, and (with -v) each disagreement.
"""

from __future__ import annotations

import argparse
import asyncio
import copy
import sys
from collections import Counter
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from runtime import CallableSink, ContextStrategy, Runtime, RuntimeConfig, ScriptedProvider  # noqa: E402
from runtime._provider_types import ProviderResponse  # noqa: E402
from runtime.demo import (  # noqa: E402
    CHAT_PIN_ID,
    CHAT_TURNS,
    CONTEXT_WINDOW,
    SYSTEM,
    _chat_script,
    get_forecast,
)
from runtime.reconstruct import Message, reconstruct  # noqa: E402
from runtime.reconstruct._forms import FormTable  # noqa: E402

CLASSES = ("kept", "shortened", "summarized", "dropped", "restored", "new")
SUMMARIZER_SYSTEM = "You are a conversation summarizer. Be concise."


class Recording:
    """A provider that passes every call to `inner` and keeps (messages received, answer)."""

    def __init__(self, inner: ScriptedProvider) -> None:
        self.inner = inner
        self.name = inner.name
        self.model = inner.model
        self.calls: list[tuple[list[dict[str, Any]], dict[str, Any]]] = []

    async def complete(self, messages: list[dict[str, Any]], **kwargs: Any) -> ProviderResponse:
        resp = await self.inner.complete(messages, **kwargs)
        self.calls.append((copy.deepcopy(messages), resp.assistant_message()))
        return resp

    async def aclose(self) -> None:
        await self.inner.aclose()


def to_parts(msg: dict[str, Any]) -> dict[str, Any]:
    """A Chat Completions message in the OTel GenAI parts form."""
    role, content = msg["role"], msg.get("content")
    if isinstance(content, list):
        texts = [str(p.get("text") or "") for p in content if isinstance(p, dict) and p.get("type") == "text"]
    else:
        texts = [content] if content else []
    if role == "tool":
        return {
            "role": "tool",
            "parts": [
                {"type": "tool_call_response", "id": msg.get("tool_call_id"), "result": "\n".join(texts)}
            ],
        }
    parts: list[dict[str, Any]] = [{"type": "text", "content": t} for t in texts]
    for tc in msg.get("tool_calls") or []:
        fn = tc.get("function") or {}
        parts.append(
            {
                "type": "tool_call",
                "id": tc.get("id"),
                "name": fn.get("name"),
                "arguments": fn.get("arguments"),
            }
        )
    return {"role": role, "parts": parts}


def fetch_logs(n: int) -> str:
    """Deploy logs of deploy n."""
    return " ".join(
        f"deploy {n} line {i}: pod api-{(n * 7 + i) % 11} on node pool {'ABC'[(n + i) % 3]} restarted after OOM;"
        for i in range(25)
    )


def long_script(turns: int) -> tuple[list[Any], list[str]]:
    """Summarizer answers first (only a summary request matches their `when`), then each turn's
    steps, matched by the turn's marker in the user message."""
    steps: list[Any] = [
        {
            "content": f"Summary {k}: the user asks about failed deploys; logs show OOM restarts on node "
            f"pools A, B and C; the answers blame memory limits; pins hold the key facts.",
            "when": "Summarize this earlier part",
        }
        for k in range(4 * turns)
    ]
    questions: list[str] = []
    for t in range(1, turns + 1):
        marker = f"T{t}:"
        questions.append(f"{marker} why did deploy {t} fail? Look at its logs and give the root cause. " * 3)
        if t % 7 == 0:
            first = {"name": "recall", "arguments": {"turn": 1}}
        elif t % 5 == 0:
            first = {"name": "pin", "arguments": {"content": f"Deploy {t}: OOM on pool B.", "label": f"d{t}"}}
        else:
            first = {"name": "fetch_logs", "arguments": {"n": t}}
        steps.append({"content": None, "tool_calls": [first], "when": marker})
        if first["name"] != "fetch_logs":
            steps.append(
                {
                    "content": None,
                    "tool_calls": [{"name": "fetch_logs", "arguments": {"n": t}}],
                    "when": marker,
                }
            )
        steps.append(
            {"content": f"Deploy {t} failed: node pool B ran out of memory (answer {t}).", "when": marker}
        )
    return steps, questions


async def play(
    provider: ScriptedProvider,
    system: str,
    questions: list[str],
    config: RuntimeConfig,
    tools: list[Any],
    pin_id: str | None = None,
) -> tuple[Recording, list[dict[str, Any]], list[dict[str, Any]]]:
    rec = Recording(provider)
    events: list[dict[str, Any]] = []
    rt = Runtime({provider.name: rec}, config=config, tools=tools, trace_sinks=[CallableSink(events.append)])  # type: ignore[dict-item]
    async with rt.chat(system=system) as chat:
        if pin_id:
            ids = [pin_id]
            chat.cognitive.id_factory = lambda: ids.pop(0) if ids else "p_00000000"
        for q in questions:
            await chat.send(q)
        history = copy.deepcopy(chat.history)
    await rt.aclose()
    return rec, events, history


def compare(
    rec: Recording, events: list[dict[str, Any]], history: list[dict[str, Any]]
) -> tuple[Counter[str], Counter[str], list[str]]:
    calls = []
    for k, (messages, answer) in enumerate(rec.calls):
        summarizer = bool(messages) and messages[0].get("content") == SUMMARIZER_SYSTEM
        calls.append(
            {
                "id": f"call{k}",
                "input_messages": [to_parts(m) for m in messages],
                "output_messages": [to_parts(answer)],
                "agent": "summarizer" if summarizer else None,
            }
        )
    r = reconstruct(calls)
    main = [c for c in r.calls if c.kind == "turn" and c.agent is None]
    decisions = [e["metadata"]["context_decision"] for e in events if e["event_type"] == "context_decision"]
    assert len(main) == len(decisions), (len(main), len(decisions))
    # History message → reconstructed message id, by content digest, in order.
    table = FormTable(len)
    by_digest: dict[str, list[str]] = {}
    for m in r.messages:
        if m.agent is None and m.origin != "summary":
            by_digest.setdefault(m.digest, []).append(m.message_id)
    ids: list[str | None] = []
    for h in history:
        found = by_digest.get(table.form_of(Message.from_dict(to_parts(h))).digest)
        ids.append(found.pop(0) if found else None)
    expected_n: Counter[str] = Counter()
    agree: Counter[str] = Counter()
    notes: list[str] = []
    prev: dict[int, str] = {}
    for call, decision in zip(main, decisions, strict=True):
        states = {s.message_id: s for s in call.states}
        now: dict[int, str] = {}
        for d in decision["decisions"]:
            if d.get("pinned"):
                continue
            i, outcome = d["index"], d["outcome"]
            now[i] = outcome
            if outcome in ("dropped", "summarized"):
                want = outcome
            elif i not in prev:
                want = "kept" if history[i]["role"] == "assistant" else "new"
            elif prev[i] in ("dropped", "summarized"):
                want = "restored"
            else:
                want = "shortened" if outcome == "compressed" else "kept"
            expected_n[want] += 1
            mid = ids[i]
            got = states[mid].status if mid is not None and mid in states else "unmatched"
            if got == want:
                agree[want] += 1
            else:
                notes.append(
                    f"{call.call_id} history[{i}] {history[i]['role']}: recorded {outcome}"
                    f"{'/' + d['fidelity'] if d.get('fidelity') else ''} ({d['reason']}) → expected {want}, "
                    f"reconstructed {got}{' (' + states[mid].reason + ')' if mid in states else ''}"
                )
        prev = now
    return expected_n, agree, notes


def runs(turns: int) -> list[tuple[str, Any]]:
    out: list[tuple[str, Any]] = []
    demo_config = RuntimeConfig(
        context_window=CONTEXT_WINDOW,
        response_reserve=300,
        context_strategy=ContextStrategy(tail_preserve_below=1.0, llm_summarize_below=1.0, keep_recent=3),
        trace_dir=None,
        cognitive_primitives=["recall", "pin"],
    )
    out.append(
        (
            "demo chat",
            play(
                ScriptedProvider(_chat_script(), name="atlas"),
                SYSTEM,
                [text for text, _ in CHAT_TURNS],
                demo_config,
                [get_forecast],
                CHAT_PIN_ID,
            ),
        )
    )
    for force in ("tail_preserve", "aggressive_truncate", "llm_summarize", None):
        steps, questions = long_script(turns)
        strategy = (
            ContextStrategy(force=force, keep_recent=4, summarize_min_tokens=200)
            if force
            else ContextStrategy(
                passthrough_below=0.3,
                tail_preserve_below=0.6,
                llm_summarize_below=0.8,
                keep_recent=4,
                summarize_min_tokens=200,
            )
        )
        config = RuntimeConfig(
            context_window=4000,
            response_reserve=300,
            context_strategy=strategy,
            trace_dir=None,
            cognitive_primitives=["recall", "pin"],
            pin_budget_fraction=0.2,
        )
        out.append(
            (
                f"{turns} turns, {force or 'auto'}",
                play(
                    ScriptedProvider(steps, name="scripted"),
                    "You are a deployment assistant. Never guess.",
                    questions,
                    config,
                    [fetch_logs],
                ),
            )
        )
    return out


async def main_async(turns: int, verbose: bool) -> int:
    total_n: Counter[str] = Counter()
    total_ok: Counter[str] = Counter()
    print(f"{'run':<28} " + " ".join(f"{c:>16}" for c in CLASSES))
    for name, coro in runs(turns):
        rec, events, history = await coro
        n, ok, notes = compare(rec, events, history)
        total_n.update(n)
        total_ok.update(ok)
        print(f"{name:<28} " + " ".join(f"{_cell(ok[c], n[c]):>16}" for c in CLASSES))
        if verbose:
            for note in notes:
                print("   ", note)
    print(f"{'all':<28} " + " ".join(f"{_cell(total_ok[c], total_n[c]):>16}" for c in CLASSES))
    return 0


def _cell(ok: int, n: int) -> str:
    return f"{ok}/{n} {100 * ok / n:5.1f}%" if n else "-"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--turns", type=int, default=30)
    ap.add_argument("-v", "--verbose", action="store_true")
    args = ap.parse_args(argv)
    return asyncio.run(main_async(args.turns, args.verbose))


if __name__ == "__main__":
    raise SystemExit(main())
