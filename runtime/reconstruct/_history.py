"""What the alignment keeps: each agent's history (`Stream`, its `Entry`s) and, while one call is
aligned, what the steps found so far (`CallMatch`, a `Present` per input message)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from ._forms import Form
from ._records import MessageState


class Entry:
    """An original message of one agent's history."""

    __slots__ = (
        "id",
        "n",
        "form",
        "origin",
        "first_call",
        "summary",
        "summarizes",
        "summarizer",
        "dropped_at",
        "last",
        "last_key",
    )

    def __init__(self, id: str, n: int, form: Form, origin: str, first_call: int) -> None:
        self.id = id
        self.n = n
        self.form = form
        self.origin = origin
        self.first_call = first_call
        self.summary: Entry | None = None  # the summary standing for it, once summarized
        self.summarizes: tuple[Entry, ...] = ()  # a summary: what it stands for
        self.summarizer: int | None = None  # a summary: the call whose answer it is
        self.dropped_at: int | None = None
        self.last: MessageState | None = None  # its state at the last call, and what it was made of
        self.last_key: tuple[object, ...] | None = None


@dataclass
class Stream:
    """One agent's calls and history."""

    agent: str | None
    entries: list[Entry]
    by_form: dict[Form, list[Entry]]
    alias: dict[Form, tuple[Entry, bool]]  # a shortened form → its original, and whether a stub
    prev_call: int | None = None
    prev_ctx: list[Entry] | None = None
    prev_list: list[Form] | None = None  # the previous call's input forms, in order
    prev_forms: dict[Entry, Form] | None = None  # the form each present entry had then
    prev_out: list[Entry] | None = None
    calls: list[int] | None = None
    form_last: dict[Form, int] | None = None  # form → last ordinal (index in `calls`) it was present
    form_first: dict[Form, tuple[int, Entry | None]] | None = None


@dataclass(slots=True)
class Present:
    """What step 1–6 found for one input message."""

    entry: Entry | None = None
    status: str = ""
    reason: str = ""
    stub: bool = False


@dataclass(slots=True)
class CallMatch:
    """One call of a stream while it is aligned: its input, the previous call's, and what each
    step found."""

    j: int  # the call's position in the run
    ctx: list[Form]  # its input forms, the system instructions first
    prev_ctx: list[Entry]  # the previous call's input
    prev_forms: dict[Entry, Form]  # the form each entry of the previous call's input had there
    prev_pos: dict[Entry, int]  # the previous call's input and answer: each one's place
    prev_out_set: set[Entry]  # the previous call's answer
    found: list[Present]  # per input message
    used: set[Entry] = field(default_factory=set)  # entries found in the input
    k: int = 0  # step 1: how many first messages are the previous call's first ones, unchanged
    missing: list[Entry] = field(default_factory=list)  # step 2: the previous call's, not found
    dropped_reason: dict[Entry, str] = field(default_factory=dict)  # step 5: the old system prompt
    # Steps 4 and 7: each new summary (input position, what it replaced, its summarizer call), what
    # each summarized entry went into, and the older entries a summary now stands for.
    new_summaries: list[tuple[int, list[Entry], int | None]] = field(default_factory=list)
    summarized_into: dict[Entry, Entry] = field(default_factory=dict)
    absorbed: set[Entry] = field(default_factory=set)


def bounds(found: Sequence[Present], prev_pos: dict[Entry, int], start: int) -> tuple[list[int], list[int]]:
    """For each input position from `start` on: the highest previous-call place of the matches
    before it, and the lowest of the matches after it (-1 and past-the-end when there are none).
    The first `start` positions are the previous call's first `start` messages, in their order."""
    n = len(found)
    lo_of = [-1] * n
    hi_of = [len(prev_pos) + 1] * n
    run_max = start - 1
    for i in range(start, n):
        lo_of[i] = run_max
        e = found[i].entry
        if e is not None and e in prev_pos:
            run_max = max(run_max, prev_pos[e])
    run_min = len(prev_pos) + 1
    for i in range(n - 1, start - 1, -1):
        hi_of[i] = run_min
        e = found[i].entry
        if e is not None and e in prev_pos:
            run_min = min(run_min, prev_pos[e])
    return lo_of, hi_of
