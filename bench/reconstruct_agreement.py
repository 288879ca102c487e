"""Agreement of `runtime.reconstruct` with the truth: our runtime's recorded context decisions.

    .venv/bin/python bench/reconstruct_agreement.py [--turns 30] [-v]

1. Plays runs of our runtime with the offline `ScriptedProvider` and two trace sinks: the recorded
   events (the truth) and `OtlpExportSink` (prompt snapshots on), whose SDK exporter is wrapped in
   `StripArcana`: every `arcana.*` attribute and `arcana.event` span event is removed before the
   spans are encoded as the OTLP/HTTP exporter's protobuf body (`ProtobufBodies`; the test sends
   them to a loopback collector with the SDK's `OTLPSpanExporter`). What is left is what any other
   agent's spans carry: the GenAI messages, model and usage, no decision, no summarizer call (ours
   rides on an `arcana.event`). Runs: the demo chat (`runtime.demo`: pin, tail_preserve
   compression, recall, unpin, a tool) and generated runs of `--turns` turns (a question, a
   `fetch_logs` tool call with a long result, an answer; a `pin` every 5th turn, a `recall` of
   turn 1 every 7th) under each strategy forced (`tail_preserve`: fidelity levels and drops;
   `aggressive_truncate`: drops; `llm_summarize`: summaries from a summarizer call) and chosen by
   demand (`auto`), in a small window so that the builder really compresses.
2. Decodes the bodies with `runtime.otlp` (`decode_request`, `normalize_span`, `group_runs`,
   `assemble_run`) and reconstructs the run as the server does for spans without a recorded
   decision (`runtime.otlp._reconstructed.reconstruction`).
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
from collections.abc import Awaitable, Callable, Sequence
from functools import partial
from pathlib import Path
from typing import Any

from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from runtime import (  # noqa: E402
    CallableSink,
    ContextStrategy,
    OtlpExportSink,
    Runtime,
    RuntimeConfig,
    ScriptedProvider,
)
from runtime._otlp_sink import message_parts  # noqa: E402
from runtime.demo import (  # noqa: E402
    CHAT_PIN_ID,
    CHAT_TURNS,
    CONTEXT_WINDOW,
    SYSTEM,
    _chat_script,
    get_forecast,
)
from runtime.otlp import assemble_run, decode_request, group_runs, normalize_span  # noqa: E402
from runtime.otlp._reconstructed import reconstruction  # noqa: E402
from runtime.reconstruct import Message, Reconstruction  # noqa: E402
from runtime.reconstruct._forms import FormTable  # noqa: E402

CLASSES = ("kept", "shortened", "summarized", "dropped", "restored", "new")


class StripArcana(SpanExporter):
    """An SDK span exporter that passes every span to `inner` without our `arcana.*` attributes and
    without the `arcana.event` span events (a summarizer's call rides on one): what any other agent's
    spans carry — the GenAI messages, model, usage — and no recorded decision."""

    def __init__(self, inner: SpanExporter) -> None:
        self.inner = inner

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        return self.inner.export([strip_arcana(s) for s in spans])

    def shutdown(self) -> None:
        self.inner.shutdown()

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        return self.inner.force_flush(timeout_millis)


def strip_arcana(span: ReadableSpan) -> ReadableSpan:
    attributes = {k: v for k, v in (span.attributes or {}).items() if not k.startswith("arcana.")}
    return ReadableSpan(
        name=span.name,
        context=span.context,
        parent=span.parent,
        resource=span.resource,
        attributes=attributes,
        events=[e for e in span.events if not e.name.startswith("arcana.")],
        links=span.links,
        kind=span.kind,
        status=span.status,
        start_time=span.start_time,
        end_time=span.end_time,
        instrumentation_scope=span.instrumentation_scope,
    )


class ProtobufBodies(SpanExporter):
    """Encodes each export as the OTLP/HTTP exporter's body (`ExportTraceServiceRequest`, protobuf)
    and keeps the bodies: the collector's side of the wire, without a socket."""

    def __init__(self) -> None:
        self.bodies: list[bytes] = []

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        self.bodies.append(encode_spans(spans).SerializeToString())
        return SpanExportResult.SUCCESS

    def shutdown(self) -> None:
        pass


def read_back(bodies: list[bytes]) -> Reconstruction:
    """The bodies decoded and normalized by `runtime.otlp` (as the server's `/v1/traces`), the run
    assembled and reconstructed exactly as the server does for spans without a recorded decision."""
    spans = []
    for body in bodies:
        decoded = decode_request(body, "application/x-protobuf")
        assert not decoded.rejections, decoded.rejections
        spans.extend(normalize_span(s) for s in decoded.spans)
    assert all(not s["arcana"] for s in spans), "an arcana.* attribute survived the export"
    runs = group_runs(spans)
    assert len(runs) == 1, list(runs)
    rec = reconstruction(assemble_run(next(iter(runs.values()))))
    assert rec is not None, "no call carries its input messages"
    return rec


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
    *,
    inner: SpanExporter,
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Plays the run with two sinks: the recorded events (the truth) and `OtlpExportSink` exporting
    through `StripArcana` to `inner` (what is measured). Returns the events and the final history."""
    otlp = OtlpExportSink(exporter=StripArcana(inner), batch=False)
    events: list[dict[str, Any]] = []
    rt = Runtime(
        {provider.name: provider}, config=config, tools=tools, trace_sinks=[CallableSink(events.append), otlp]
    )
    async with rt.chat(system=system) as chat:
        if pin_id:
            ids = [pin_id]
            chat.cognitive.id_factory = lambda: ids.pop(0) if ids else "p_00000000"
        for q in questions:
            await chat.send(q)
        history = copy.deepcopy(chat.history)
    await rt.aclose()
    otlp.close()
    return events, history


def compare(
    bodies: list[bytes], events: list[dict[str, Any]], history: list[dict[str, Any]]
) -> tuple[Counter[str], Counter[str], list[str]]:
    r = read_back(bodies)
    main = [c for c in r.calls if c.kind == "turn"]
    decisions = [e["metadata"]["context_decision"] for e in events if e["event_type"] == "context_decision"]
    assert len(main) == len(decisions), (len(main), len(decisions))
    # History message → reconstructed message id, by content digest, in order.
    table = FormTable(len)
    by_digest: dict[str, list[str]] = {}
    for m in r.messages:
        if m.origin != "summary":
            by_digest.setdefault(m.digest, []).append(m.message_id)
    ids: list[str | None] = []
    for h in history:
        found = by_digest.get(table.form_of(Message.from_dict(message_parts(h))).digest)
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


def runs(turns: int) -> list[tuple[str, Callable[..., Awaitable[Any]]]]:
    """Each run's name and its `play` waiting for `inner=` (the exporter behind `StripArcana`)."""
    out: list[tuple[str, Any]] = []
    demo_config = RuntimeConfig(
        context_window=CONTEXT_WINDOW,
        response_reserve=300,
        context_strategy=ContextStrategy(tail_preserve_below=1.0, llm_summarize_below=1.0, keep_recent=3),
        trace_dir=None,
        trace_include_prompt_snapshots=True,
        cognitive_primitives=["recall", "pin"],
    )
    out.append(
        (
            "demo chat",
            partial(
                play,
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
            trace_include_prompt_snapshots=True,
            cognitive_primitives=["recall", "pin"],
            pin_budget_fraction=0.2,
        )
        out.append(
            (
                f"{turns} turns, {force or 'auto'}",
                partial(
                    play,
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
    for name, make in runs(turns):
        bodies = ProtobufBodies()
        events, history = await make(inner=bodies)
        n, ok, notes = compare(bodies.bodies, events, history)
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
