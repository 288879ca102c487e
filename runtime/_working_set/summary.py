"""The summary of `llm_summarize` (step 4 of `build()`): the request that asks a summarizer for
the middle of the conversation in the room left, and its answer made into one message that fits."""

from __future__ import annotations

from typing import Any

from .._tokens import TokenCounter
from .config import message_text
from .records import Summarizer
from .slots import Slot, scoring_text

#: Longest summary the builder asks for; the caller may pass it as `max_tokens` to the provider.
SUMMARY_MAX_TOKENS = 500
# Below this many free tokens a summary is not worth a model call.
_MIN_SUMMARY_TOKENS = 64
_SUMMARY_LINE_CHARS = 1000
_SUMMARY_SYSTEM = "You are a conversation summarizer. Be concise."


async def try_summarize(
    counter: TokenCounter,
    min_tokens: int,
    slots: list[Slot],
    middle: list[Slot],
    budget_total: int,
    fixed: int,
    summarize: Summarizer | None,
) -> tuple[dict[str, Any] | None, bool, str | None, list[dict[str, Any]] | None, str]:
    """One summary call replacing the middle. Returns (summary message or None, call made,
    error, request, why-not note)."""
    middle_tokens = sum(s.l0 for s in middle)
    if summarize is None:
        return None, False, None, None, "no summarizer is available"
    if not middle:
        return None, False, None, None, "there is no middle to summarize"
    if middle_tokens < min_tokens:
        return (
            None,
            False,
            None,
            None,
            f"the middle holds only {middle_tokens} tokens (< summarize_min_tokens {min_tokens})",
        )
    rest = fixed + sum(s.l0 for s in slots if s.region != "middle")
    header = _summary_header(middle)
    header_tokens = counter.count_message({"role": "system", "content": header + "\n"})
    room = budget_total - rest - header_tokens
    if room < _MIN_SUMMARY_TOKENS:
        return None, False, None, None, f"only {max(room, 0)} tokens are free for a summary"
    want = min(room, SUMMARY_MAX_TOKENS)
    request = _summary_request(slots, middle, want)
    try:
        text = await summarize(request)
    except Exception as exc:  # any provider failure: fall back, and say so truthfully
        err = f"{type(exc).__name__}: {exc}"
        return None, True, err, request, f"the summary call failed ({err})"
    if not isinstance(text, str) or not text.strip():
        err = "empty summary"
        return None, True, err, request, "the summary call returned no text"
    # Trim an over-long reply at a token boundary until the message fits the room it was given.
    limit = room + header_tokens
    body = text.strip()
    msg = {"role": "system", "content": f"{header}\n{body}"}
    while (excess := counter.count_message(msg) - limit) > 0 and body:
        body = counter.truncate_text(body, counter.count_text(body) - excess)
        msg = {"role": "system", "content": f"{header}\n{body}"}
    for s in middle:
        s.outcome, s.reason = "summarized", "llm_summarized_into_single"
    return msg, True, None, request, ""


def _summary_header(middle: list[Slot]) -> str:
    first, last = middle[0].turn, middle[-1].turn
    span = f"turn {first}" if first == last else f"turns {first}–{last}"
    return f"[Earlier conversation — summary of {len(middle)} messages, {span}]"


def _summary_request(slots: list[Slot], middle: list[Slot], want: int) -> list[dict[str, Any]]:
    goal = next((message_text(s.msg) for s in slots if s.region == "task"), "")
    lines = []
    for s in middle:
        text = scoring_text(s.msg)
        if len(text) > _SUMMARY_LINE_CHARS:
            text = text[:_SUMMARY_LINE_CHARS] + "..."
        lines.append(f"[{s.role} · turn {s.turn}] {text}")
    prompt = (
        f"Summarize this earlier part of a conversation in at most {want} tokens "
        f"(about {want * 3} characters). Keep facts, numbers, names, identifiers, decisions and "
        "open questions; drop pleasantries.\n"
        f"Current request: {goal}\n\n" + "\n".join(lines)
    )
    return [{"role": "system", "content": _SUMMARY_SYSTEM}, {"role": "user", "content": prompt}]
