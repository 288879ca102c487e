"""What the checker is asked and how its answer is read.

**The prompt**: the system message states the task and the one answer the model may give,

    {"verdict": "contradicts" | "consistent" | "unclear", "reasoning": "<why, briefly>"}

and the user message holds the instruction (with where it came from) and the answer checked, each
cut to `TEXT_CHARS`.

**The answer** is parsed strictly (`parse_answer`): one JSON object (a single fenced code block
around it is tolerated) with `verdict` one of the three and a string `reasoning`, nothing else.
Anything else is a `CheckAnswerError`: the check's visible error, never a verdict.

**The offline `scripted` provider** answers as its model says (`SCRIPTED_MODELS`): `check-heuristic`
reads the instruction's negated words ("never X", "do not X", "avoid X") in the answer as a
contradiction, most of its words there as consistent, else unclear (deterministic: a demo and the
tests); `check-unparseable` answers prose.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass

from traces.conversations.providers import ProviderNotConfigured, ask_once

SCRIPTED_MODELS = ("check-heuristic", "check-unparseable")
VERDICTS = ("contradicts", "consistent", "unclear")
TEXT_CHARS = 20_000  # the instruction and the answer are cut to this many characters
REASONING_CHARS = 5_000
ANSWER_KEPT = 500  # characters of an unreadable answer quoted in the error

SYSTEM = (
    "You check an AI assistant's answer against an instruction it had been given earlier and that "
    "its context no longer held when it answered. Say whether the answer contradicts the "
    "instruction, is consistent with it, or whether it cannot be told. Answer with exactly one JSON "
    'object and nothing else: {"verdict": "contradicts" | "consistent" | "unclear", '
    '"reasoning": "<why, briefly>"}'
)
_SOURCES = {"system_prompt": "the system prompt", "user": "a user message"}


class CheckAnswerError(ValueError):
    """The checker's answer is not a verdict (the check's visible error)."""


def prompt(instruction: str, source: str, answer: str) -> str:
    where = _SOURCES.get(source, "the conversation")
    return (
        f"The instruction (from {where}):\n{instruction[:TEXT_CHARS]}\n\n"
        f"The answer given after the context lost it:\n{answer[:TEXT_CHARS]}"
    )


_FENCE = re.compile(r"^```(?:json)?\s*\n(.*)\n```$", re.DOTALL)


def parse_answer(text: str | None) -> tuple[str, str]:
    """(verdict, reasoning) of a checker's answer, or `CheckAnswerError` saying what is wrong."""
    body = (text or "").strip()
    if (fenced := _FENCE.match(body)) is not None:
        body = fenced.group(1).strip()
    try:
        data = json.loads(body)
    except ValueError:
        raise CheckAnswerError("the answer is not one JSON object") from None
    if not isinstance(data, dict) or "verdict" not in data:
        raise CheckAnswerError('the answer is not a JSON object with a "verdict"')
    if extra := sorted(set(data) - {"verdict", "reasoning"}):
        raise CheckAnswerError(f"unexpected keys {', '.join(extra)}")
    verdict, reasoning = data["verdict"], data.get("reasoning", "")
    if verdict not in VERDICTS:
        raise CheckAnswerError(f'"verdict" is {json.dumps(verdict)[:80]}, not one of {", ".join(VERDICTS)}')
    if not isinstance(reasoning, str):
        raise CheckAnswerError('"reasoning" is not a string')
    return verdict, reasoning.strip()[:REASONING_CHARS]


def quoted(text: str | None) -> str:
    """An unreadable answer, cut, for the error."""
    body = (text or "").strip()
    return body[:ANSWER_KEPT] + ("…" if len(body) > ANSWER_KEPT else "")


_NEGATED = re.compile(r"\b(?:never|not|don't|avoid|no)\s+((?:[\w-]+\s+){0,2}[\w-]+)", re.IGNORECASE)
_WORD = re.compile(r"[^\W_]{4,}")


def scripted_answer(model: str, instruction: str, answer: str) -> str:
    """What the offline checker says (module docstring)."""
    if model == "check-unparseable":
        return "The answer seems fine to me."
    said = {w.lower() for w in _WORD.findall(answer)}
    for m in _NEGATED.finditer(instruction):
        forbidden = [w.lower() for w in _WORD.findall(m.group(1))]
        if forbidden and all(w in said for w in forbidden):
            return json.dumps(
                {
                    "verdict": "contradicts",
                    "reasoning": f"scripted heuristic: the answer does what the instruction rules out "
                    f"({' '.join(forbidden)})",
                }
            )
    words = {w.lower() for w in _WORD.findall(instruction)}
    if words and len(words & said) * 2 >= len(words):
        return json.dumps(
            {
                "verdict": "consistent",
                "reasoning": "scripted heuristic: the answer keeps to the instruction's words",
            }
        )
    return json.dumps({"verdict": "unclear", "reasoning": "scripted heuristic: the answer does not say"})


@dataclass
class Call:
    """One checker call's answer and its token cost."""

    text: str | None
    tokens: int


def call_model(provider: str, model: str, instruction: str, source: str, answer: str) -> Call:
    """Ask the checker (in an event loop of this thread; no ORM inside it). Raises `ProviderError`,
    or `CheckAnswerError` when the provider is no longer configured."""
    messages = [
        {"role": "system", "content": SYSTEM},
        {"role": "user", "content": prompt(instruction, source, answer)},
    ]
    try:
        text, tokens = ask_once(provider, model, messages, scripted_answer(model, instruction, answer))
    except ProviderNotConfigured as e:
        raise CheckAnswerError(str(e)) from None
    return Call(text, tokens)
