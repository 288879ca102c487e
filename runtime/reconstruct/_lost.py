"""Lost instructions: sentences of the system prompt and of user messages that state a constraint or
a fact, and that the agent's context stopped holding, verbatim or close, for the rest of the run.

**The heuristic** (`instruction_kinds`), on sentences of 3 to 80 words that are not questions:

* `constraint`: a rule word — never, always, must, do not / don't, cannot, should, only, avoid,
  ensure / make sure, required, important, at least / at most / no more than, not allowed;
* `imperative`: the sentence starts with a verb of command (use, keep, write, reply, call, …);
* `number`: it holds a number (a budget, a limit, a date, an id);
* `name`: it holds a capitalized word that is not its first word (a person, a product, a place).

**Still held** at a call: some message of that call contains the sentence's text (letters and
digits, lowercased), or at least 80% of its significant words and all of its numbers.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from ._forms import Form, significant_words, skeleton, words
from ._records import Compaction, LostInstruction

__all__ = ["instruction_kinds", "sentences"]

_SENTENCE_END = re.compile(r"(?<=[.!?;])\s+|\n+")
_CONSTRAINT = re.compile(
    r"\b(?:never|always|must|mustn't|must not|do not|don't|does not|doesn't|cannot|can't|can not"
    r"|should|shouldn't|should not|only|avoid|ensure|make sure|required?|important|at least|at most"
    r"|no more than|not allowed|forbidden|prohibited|under no circumstances)\b",
    re.IGNORECASE,
)
_IMPERATIVES = frozenset(
    """add answer apply ask avoid be build call change check cite close commit confirm continue convert
    create delete deploy describe document do double-check email ensure explain fetch find fix follow
    format give implement include install keep leave limit list look make mention merge migrate move
    note open prefer print put read recall refactor refuse remember remove rename reply report respond
    return review run save say send set show sign skip sort speak start stay stop summarize tell test
    treat try update use verify wait write""".split()
)
_NUMBER = re.compile(r"\d")
_NAME = re.compile(r"(?<![.!?]\s)\b[A-Z][a-zA-Z0-9]+")
#: A close match holds this share of the sentence's significant words (and all of its numbers):
#: 4 in 5, as integers so that 4 of 5 words is exactly enough.
CLOSE_SHARE = (4, 5)


def sentences(text: str) -> list[str]:
    """`text` split into sentences (at `. ! ? ;` followed by space, and at line breaks).

    >>> sentences("Never touch the auth module. Budget: 40k!\\nThanks")
    ['Never touch the auth module.', 'Budget: 40k!', 'Thanks']
    """
    return [s.strip() for s in _SENTENCE_END.split(text) if s.strip()]


def instruction_kinds(sentence: str) -> tuple[str, ...]:
    """Which rules of the heuristic `sentence` meets (empty: not an instruction or fact).

    >>> instruction_kinds("Never touch the auth module.")
    ('constraint',)
    >>> instruction_kinds("The budget is 40,000 EUR.")
    ('number', 'name')
    >>> instruction_kinds("What time is it?")
    ()
    """
    w = sentence.split()
    if not 3 <= len(w) <= 80 or sentence.rstrip().endswith("?"):
        return ()
    kinds: list[str] = []
    if _CONSTRAINT.search(sentence):
        kinds.append("constraint")
    first = w[0].strip("\"'*-•([").lower()
    if first in _IMPERATIVES:
        kinds.append("imperative")
    if _NUMBER.search(sentence):
        kinds.append("number")
    if any(m.group(0) != "I" for m in _NAME.finditer(sentence, len(w[0]))):
        kinds.append("name")
    return tuple(kinds)


def find_lost(
    *,
    agent: str | None,
    call_ids: Sequence[str],
    form_first: dict[Form, tuple[int, str | None]],
    form_last: dict[Form, int],
    compactions: dict[str, Compaction],
) -> list[LostInstruction]:
    """The lost instructions of one agent. `call_ids` are its calls in order; `form_first` /
    `form_last` give, for each form its context held, the first and last ordinal (index in
    `call_ids`) that held it, and the message id it was first seen as."""
    last_ordinal = len(call_ids) - 1
    index: dict[str, list[Form]] = {}  # word -> the forms holding it, made when first needed
    out: list[LostInstruction] = []
    done: set[str] = set()
    sources = sorted(
        (
            (first, f, mid)
            for f, (first, mid) in form_first.items()
            if f.role in ("system", "user") and f.kind == "text"
        ),
        key=lambda t: t[0],
    )
    for first, f, mid in sources:
        if form_last[f] == last_ordinal:
            continue  # the message itself is still there at the end
        for sentence in sentences(f.text):
            why = instruction_kinds(sentence)
            if not why:
                continue
            skel = skeleton(sentence)
            if len(skel) < 8 or skel in done:
                continue
            done.add(skel)
            if not index:
                for other in form_last:
                    for w in other.wordset:
                        index.setdefault(w, []).append(other)
            last = _last_held(sentence, skel, index, form_last)
            if last is None or last >= last_ordinal:
                continue
            missing_id = call_ids[last + 1]
            out.append(
                LostInstruction(
                    text=sentence,
                    source="system_prompt" if f.role == "system" else "user",
                    message_id=mid or "",
                    agent=agent,
                    why=why,
                    first_seen_call_id=call_ids[first],
                    last_seen_call_id=call_ids[last],
                    first_missing_call_id=missing_id,
                    compaction_call_id=missing_id if missing_id in compactions else None,
                )
            )
    return out


def _last_held(
    sentence: str, skel: str, index: dict[str, list[Form]], form_last: dict[Form, int]
) -> int | None:
    """The last ordinal at which some form held `sentence` verbatim or close."""
    sig = significant_words(sentence)
    numbers = {w for w in words(sentence) if w.isdigit()}
    if not sig:
        return None
    # A close match misses at most 20% of the words: it holds one of the rarest `allowed + 1`.
    part, whole = CLOSE_SHARE
    allowed = len(sig) * (whole - part) // whole
    rare = sorted(sig, key=lambda w: (len(index.get(w, ())), w))[: allowed + 1]
    best: int | None = None
    seen: set[int] = set()
    for w in rare:
        for f in index.get(w, ()):
            if id(f) in seen:
                continue
            seen.add(id(f))
            last = form_last[f]
            if best is not None and last <= best:
                continue
            if skel in f.skel or (len(sig & f.wordset) * whole >= len(sig) * part and numbers <= f.wordset):
                best = last
    return best
