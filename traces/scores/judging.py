"""What a judge asks and how its answer is read.

**The prompt** is the judge's template with `{{ variable }}` filled from the run (`VARIABLES`): its
last answer, the first and last turn's input, the context the last step received (when the producer
recorded it), the lost instructions, the review notes. A template naming anything else is refused
when the judge is made. The system message states the one answer the judge may give:

    {"value": <the score>, "reasoning": "<why, briefly>"}

**The answer** is parsed strictly (`parse_answer`): one JSON object (a single fenced code block
around it is tolerated), with `value` of the config's type — a JSON number in the range, `true` or
`false`, or one of the categories — and an optional string `reasoning`, nothing else. Anything else
is a `JudgeAnswerError`, kept as the run's visible judge error, never a score.

**The offline `scripted` provider** answers as its model says (`SCRIPTED_MODELS`): `judge-heuristic`
derives a value from the run (deterministic; a demo and the tests), `judge-unparseable` answers prose.
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass
from typing import Any

from traces.conversations.providers import ProviderNotConfigured, ask_once
from traces.models import Note, Run, ScoreConfig, Step
from traces.runs import queries
from traces.scores.actions import check_value
from traces.scores.targets import ScoreError

VARIABLES = {
    "last_answer": "the run's last answer",
    "first_input": "the first turn's user message",
    "turn_input": "the last turn's user message",
    "context": "the messages the last step received (when its producer recorded them)",
    "lost_instructions": "the instructions later calls no longer saw, one a line",
    "notes": "the run's review notes, one a line",
    "run_id": "the run's id",
    "model": "the run's model",
}
SCRIPTED_MODELS = ("judge-heuristic", "judge-unparseable")
_VAR = re.compile(r"\{\{\s*([a-z_]+)\s*\}\}")
VALUE_CHARS = 20_000  # a variable's text is cut to this many characters
ANSWER_CHARS = 10_000  # the answer kept on a judge error


class JudgeAnswerError(ValueError):
    """The judge's answer is not a score of its config (the run's visible judge error)."""


def check_prompt(template: str) -> None:
    """`ScoreError("prompt", …)` for an empty template or one naming an unknown variable."""
    if not template.strip():
        raise ScoreError("prompt", "write the judge's prompt")
    unknown = sorted({m for m in _VAR.findall(template) if m not in VARIABLES})
    if unknown:
        raise ScoreError("prompt", f"unknown variable {', '.join(unknown)} (known: {', '.join(VARIABLES)})")


def _text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(str(p.get("text", "")) for p in content if isinstance(p, dict))
    return "" if content is None else str(content)


def _user_message(step: Step | None) -> str:
    """The user message a turn's first step received (its snapshot or its appended messages)."""
    if step is None:
        return ""
    for source in (step.prompt_snapshot, step.messages):
        messages = source.get("messages") if isinstance(source, dict) else source
        if isinstance(messages, list):
            users = [m for m in messages if isinstance(m, dict) and m.get("role") == "user"]
            if users:
                return _text(users[-1].get("content"))
    return ""


def variables(run: Run) -> dict[str, str]:
    """Every variable's text for `run` (a few bounded queries)."""
    steps = Step.objects.filter(run=run).order_by("turn_number", "number")
    last = steps.exclude(assistant_text=None).order_by("-turn_number", "-number").first()
    first_turn = steps.filter(number=1).first()
    last_turn = steps.filter(number=1).order_by("-turn_number").first()
    last_step = steps.order_by("-turn_number", "-number").first()
    snapshot = last_step.prompt_snapshot if last_step is not None else None
    messages = snapshot.get("messages") if isinstance(snapshot, dict) else snapshot
    context = (
        "\n".join(f"{m.get('role')}: {_text(m.get('content'))}" for m in messages if isinstance(m, dict))
        if isinstance(messages, list)
        else "(not recorded)"
    )
    lost = [str(i.get("text", "")) for i in queries.context_changes(run, "").lost]
    notes = list(Note.objects.filter(run=run).values_list("body", flat=True)[:50])
    out = {
        "last_answer": (last.assistant_text or "") if last is not None else "",
        "first_input": _user_message(first_turn),
        "turn_input": _user_message(last_turn),
        "context": context,
        "lost_instructions": "\n".join(lost) or "(none)",
        "notes": "\n".join(notes) or "(none)",
        "run_id": run.run_id,
        "model": run.model,
    }
    return {k: v[:VALUE_CHARS] for k, v in out.items()}


def render(template: str, values: dict[str, str]) -> str:
    return _VAR.sub(lambda m: values.get(m.group(1), m.group(0)), template)


def answer_format(config: ScoreConfig) -> str:
    if config.kind == ScoreConfig.Kind.BOOLEAN:
        kind = "true or false (JSON booleans)"
    elif config.kind == ScoreConfig.Kind.CATEGORICAL:
        kind = "one of " + ", ".join(json.dumps(c) for c in config.categories)
    else:
        lo = "" if config.min_value is None else f" from {config.min_value:g}"
        hi = "" if config.max_value is None else f" to {config.max_value:g}"
        kind = f"a JSON number{lo}{hi}"
    return (
        f"You score '{config.name}'{': ' + config.description if config.description else ''}. "
        f'Answer with exactly one JSON object and nothing else: {{"value": <{kind}>, "reasoning": "<why, briefly>"}}'
    )


_FENCE = re.compile(r"^```(?:json)?\s*\n(.*)\n```$", re.DOTALL)


def parse_answer(config: ScoreConfig, text: str | None) -> tuple[float | None, str, str]:
    """(value, label, reasoning) of a judge's answer, or `JudgeAnswerError` saying what is wrong."""
    body = (text or "").strip()
    if (fenced := _FENCE.match(body)) is not None:
        body = fenced.group(1).strip()
    try:
        data = json.loads(body)
    except ValueError:
        raise JudgeAnswerError("the answer is not one JSON object") from None
    if not isinstance(data, dict) or "value" not in data:
        raise JudgeAnswerError('the answer is not a JSON object with a "value"')
    if extra := sorted(set(data) - {"value", "reasoning"}):
        raise JudgeAnswerError(f"unexpected keys {', '.join(extra)}")
    reasoning = data.get("reasoning", "")
    if not isinstance(reasoning, str):
        raise JudgeAnswerError('"reasoning" is not a string')
    value = data["value"]
    expected = {
        ScoreConfig.Kind.BOOLEAN: (bool,),
        ScoreConfig.Kind.CATEGORICAL: (str,),
        ScoreConfig.Kind.NUMERIC: (int, float),
    }[ScoreConfig.Kind(config.kind)]
    if not isinstance(value, expected) or (
        config.kind == ScoreConfig.Kind.NUMERIC and isinstance(value, bool)
    ):
        raise JudgeAnswerError(
            f'"value" is {json.dumps(value)[:80]}, not {answer_format(config).split("<")[1].split(">")[0]}'
        )
    try:
        number, label = check_value(config, value)
    except ScoreError as e:
        raise JudgeAnswerError(f'"value" {json.dumps(value)[:80]}: {e.message}') from None
    return number, label, reasoning.strip()[:5000]


def scripted_answer(model: str, config: ScoreConfig, values: dict[str, str]) -> str:
    """What the offline judge says: a value derived from the run (`judge-heuristic`), or prose."""
    if model == "judge-unparseable":
        return "The answer looks helpful to me."
    digest = int(hashlib.sha256(values["last_answer"].encode()).hexdigest()[:8], 16)
    if config.kind == ScoreConfig.Kind.BOOLEAN:
        value: Any = values["lost_instructions"] == "(none)"
        why = "no instruction was lost" if value else "an instruction was lost"
    elif config.kind == ScoreConfig.Kind.CATEGORICAL:
        value = config.categories[digest % len(config.categories)]
        why = "picked from the last answer's digest"
    elif config.min_value is not None and config.max_value is not None:
        span = config.max_value - config.min_value
        value = config.min_value + (
            digest % (int(span) + 1) if config.is_integer_range else (digest % 101) / 100 * span
        )
        why = f"{len(values['last_answer'])} characters in the last answer"
    else:
        value, why = len(values["last_answer"]), "the last answer's length"
    return json.dumps({"value": value, "reasoning": f"scripted heuristic: {why}"})


@dataclass
class Call:
    """One judge call's answer and its token cost."""

    text: str | None
    tokens: int


def call_model(provider: str, model: str, config: ScoreConfig, prompt: str, values: dict[str, str]) -> Call:
    """Ask the judge (in an event loop of this thread; no ORM inside it). Raises `ProviderError`."""
    messages = [
        {"role": "system", "content": answer_format(config)},
        {"role": "user", "content": prompt},
    ]
    try:
        text, tokens = ask_once(provider, model, messages, scripted_answer(model, config, values))
    except ProviderNotConfigured as e:
        raise JudgeAnswerError(str(e)) from None
    return Call(text, tokens)
