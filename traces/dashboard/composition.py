"""What filled the context: the tokens of one step's context by part, from its stored decision (the
per-message table and the report), for recorded decisions (our runtime, arcana-agent 1.2) and
reconstructed ones (OTLP runs, `runtime.reconstruct`) alike.

Parts: the system prompt, tool schemas, user, assistant, tool results, pins, summaries and recalled
turns. A message the decision dropped or summarized adds nothing (it was not sent); a shortened one
adds its tokens as sent. Where each figure comes from:
- **pins**: the rows of pinned blocks; **system / user / assistant / tool results**: the other rows by
  role, tokens as sent (`token_count_after`);
- **tool schemas**: the report's `tools_tokens`, else the decision's `budget_tools`: ours count the
  schemas they send; a reconstructed decision (an OTLP span) counts the definitions the span carries
  (`gen_ai.tool.definitions`, OpenInference's `llm.tools.N.tool.json_schema`) the same way, 0 without;
- **summaries**: the report's `summary_tokens` (ours), or the rows a reconstruction marked as a summary;
- **recalled turns**: tool results of `recall` calls — known when the step's prompt snapshot was
  recorded (it names each tool call); otherwise they count as tool results.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from traces.models import ContextDecision, Step, message_decision_rows
from traces.runs.run_page import turn_link

PARTS: tuple[tuple[str, str], ...] = (
    ("system", "system prompt"),
    ("tools", "tool schemas"),
    ("user", "user"),
    ("assistant", "assistant"),
    ("tool_results", "tool results"),
    ("pins", "pins"),
    ("summaries", "summaries"),
    ("recalled", "recalled turns"),
    ("other", "other"),
)
LABELS = dict(PARTS)
_ROLE = {"system": "system", "user": "user", "assistant": "assistant", "tool": "tool_results"}
# Columns of a message decision row (MESSAGE_DECISION_KEYS).
_ROLE_I, _OUTCOME_I, _BEFORE_I, _AFTER_I, _REASON_I, _PINNED_I = 1, 2, 5, 6, 7, 8


@dataclass
class Composition:
    """One step's context by part (`tokens`: part -> tokens, every part of PARTS present)."""

    tokens: dict[str, int]
    origin: str  # "recorded" or "reconstructed"

    @property
    def total(self) -> int:
        return sum(self.tokens.values())

    def segments(self, width: float = 100.0) -> list[dict[str, Any]]:
        """The parts with tokens, as segments of a bar `width` wide (x, width, share)."""
        total = self.total or 1
        x, out = 0.0, []
        for key, label in PARTS:
            n = self.tokens.get(key, 0)
            if n:
                w = width * n / total
                out.append({"key": key, "label": label, "tokens": n, "x": round(x, 3), "width": round(w, 3),
                            "share": n / total})  # fmt: skip
                x += w
        return out


def _tool_names(snapshot: Any) -> list[str]:
    """The tool name of each tool-result message of a prompt snapshot, in order ("" when unknown)."""
    messages = snapshot.get("messages") if isinstance(snapshot, dict) else None
    if not isinstance(messages, list):
        return []
    names: dict[str, str] = {}
    out: list[str] = []
    for m in messages:
        if not isinstance(m, dict):
            continue
        for call in m.get("tool_calls") or []:
            if isinstance(call, dict):
                fn = call.get("function")
                named = fn if isinstance(fn, dict) else call
                names[str(call.get("id"))] = str(named.get("name") or "")
        if m.get("role") == "tool":
            out.append(names.get(str(m.get("tool_call_id")), ""))
    return out


def _int(v: Any) -> int:
    return v if isinstance(v, int) and not isinstance(v, bool) and v > 0 else 0


def compose(decision: ContextDecision, snapshot: Any = None) -> Composition:
    """The composition of the context a decision produced (`snapshot`: the step's prompt snapshot,
    when recorded, to tell recall results from other tool results)."""
    report = decision.report if isinstance(decision.report, dict) else {}
    reconstructed = report.get("origin") == "reconstructed" or decision.strategy == "reconstructed"
    tokens = dict.fromkeys(LABELS, 0)
    tool_names = iter(_tool_names(snapshot))
    # One pass over a table of ~200 rows, for each of a band's ~120 steps: the common cases (an int
    # count, a role string) are tested by type first; anything else goes through `_int` and `str`.
    for row in message_decision_rows(decision.message_table):
        outcome = row[_OUTCOME_I]
        if outcome == "dropped" or outcome == "summarized":
            continue
        sent = row[_AFTER_I]
        if sent is None:
            sent = row[_BEFORE_I]
        n = sent if type(sent) is int and sent > 0 else _int(sent)
        if row[_PINNED_I]:
            part = "pins"
        elif row[_REASON_I] == "reconstructed_summary":
            part = "summaries"
        else:
            role = row[_ROLE_I]
            part = _ROLE.get(role if type(role) is str else str(role), "other")
            if part == "tool_results" and next(tool_names, "") == "recall":
                part = "recalled"
        tokens[part] += n
    tokens["tools"] = _int(report.get("tools_tokens")) or _int(decision.budget_tools)
    tokens["summaries"] += _int(report.get("summary_tokens"))
    return Composition(tokens, "reconstructed" if reconstructed else "recorded")


def step_composition(step: Step, decision: ContextDecision | None) -> Composition | None:
    if decision is None:
        return None
    comp = compose(decision, step.prompt_snapshot)
    return comp if comp.total else None


#: The band over a run draws at most this many steps (evenly spaced over the run).
BAND_STEPS = 120
BAND_W, BAND_H = 720, 120


@dataclass
class BandStep:
    x: float
    turn: int
    step: int
    href: str
    comp: Composition
    rects: list[dict[str, Any]]


def run_band(run: Any, agent: str) -> dict[str, Any] | None:
    """The context composition over a run (one agent's steps): a stacked bar per step, at most
    `BAND_STEPS` of them evenly spaced; None when no step has a decision. Two queries."""
    keys = list(
        ContextDecision.objects.filter(run=run, agent=agent)
        .order_by("turn_number", "step_number")
        .values_list("id", flat=True)
    )
    if not keys:
        return None
    every = max(1, -(-len(keys) // BAND_STEPS))
    picked = keys[::every]
    decisions = (
        ContextDecision.objects.filter(id__in=picked)
        .select_related("step")
        .only(
            "id",
            "turn_number",
            "step_number",
            "strategy",
            "budget_tools",
            "report",
            "message_table",
            "step__id",
            "step__prompt_snapshot",
        )  # fmt: skip
        .order_by("turn_number", "step_number")
    )
    comps = [(d, compose(d, d.step.prompt_snapshot)) for d in decisions]
    comps = [(d, c) for d, c in comps if c.total]
    if not comps:
        return None
    top = max(c.total for _, c in comps)
    slot = BAND_W / len(comps)
    steps: list[BandStep] = []
    link = turn_link(run)  # one `run.turn_url` call, not one a step
    for i, (d, c) in enumerate(comps):
        y = float(BAND_H)
        rects = []
        for seg in c.segments(1.0):
            h = BAND_H * seg["tokens"] / top
            y -= h
            rects.append(
                {
                    "key": seg["key"],
                    "y": round(y, 2),
                    "h": round(h, 2),
                    "label": seg["label"],
                    "tokens": seg["tokens"],
                }
            )
        href = link(d.turn_number) + (f"?agent={agent}" if agent else "") + f"#step-{d.step_number}"
        steps.append(BandStep(round(i * slot, 3), d.turn_number, d.step_number, href, c, rects))
    return {
        "steps": steps,
        "slot": round(slot, 3),
        "bar": round(max(slot * 0.85, 0.5), 3),
        "width": BAND_W,
        "height": BAND_H,
        "top": top,
        "sampled": every > 1,
        "of": len(keys),
        "parts": [(k, label) for k, label in PARTS if any(c.tokens.get(k) for _, c in comps)],
        "origin": comps[0][1].origin,
    }
